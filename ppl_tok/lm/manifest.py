"""The checksums of a converted model folder: ``ppl-tok-manifest.json`` (the size and sha256 of every file, and the
card's BOS id) written at conversion, and :func:`verify_folder`, which finds a damaged or truncated file before the
model loads (docs/cli.md, "Models")."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

MANIFEST = "ppl-tok-manifest.json"
_VERIFIED = ".ppl-tok-verified.json"
_BOOKKEEPING = {MANIFEST, _VERIFIED, ".complete"}


class CorruptModelError(ValueError):
    """A converted model folder whose files differ from what was written at conversion."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path, card: Any = None) -> None:
    """Record the size and sha256 of every file of ``folder`` (and the BOS id of ``card``, a
    :class:`~ppl_tok.lm.cards.ModelCard`) in ``MANIFEST``."""
    files = {p.name: {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name not in _BOOKKEEPING}
    meta = {"card": card.name if card else None, "bos_id": card.bos_id if card else None, "files": files}
    (folder / MANIFEST).write_text(json.dumps(meta, indent=1), encoding="utf-8")


def _safetensors_problem(path: Path) -> str | None:
    """Why a ``.safetensors`` file is truncated or has a broken header (``None`` if it looks whole)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n <= 0 or 8 + n > size:
                return f"{path}: truncated ({size} bytes, shorter than its own header)"
            header = json.loads(f.read(n))
    except (ValueError, UnicodeDecodeError) as err:
        return f"{path}: unreadable safetensors header ({err})"
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != size:
        return f"{path}: {size} bytes, but its header describes {8 + n + end} (truncated or padded)"
    return None


def verify_folder(folder: str | Path) -> str | None:
    """What is wrong with a converted folder, naming the file, or ``None`` if it matches its manifest.

    Safetensors files are checked for truncation; with a manifest, every file's
    size and sha256 (hashes are cached by size and mtime in the folder, so an
    unchanged folder is checked for the price of a ``stat``).
    """
    folder = Path(folder)
    for st in sorted(folder.glob("*.safetensors")):
        problem = _safetensors_problem(st)
        if problem:
            return problem
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return None
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        seen = json.loads((folder / _VERIFIED).read_text(encoding="utf-8")) if (folder / _VERIFIED).is_file() else {}
    except (ValueError, KeyError, TypeError) as err:
        return f"{manifest}: unreadable manifest ({err})"
    changed = False
    for name, want in files.items():
        path = folder / name
        if not path.is_file():
            return f"{path}: missing (listed in {MANIFEST})"
        stat = path.stat()
        if stat.st_size != want["size"]:
            return f"{path}: {stat.st_size} bytes, {want['size']} when converted"
        key = [stat.st_size, stat.st_mtime_ns, want["sha256"]]
        if seen.get(name) != key:
            if _sha256(path) != want["sha256"]:
                return f"{path}: sha256 differs from the one recorded at conversion (the file is damaged)"
            seen[name], changed = key, True
    if changed:
        try:
            (folder / _VERIFIED).write_text(json.dumps(seen), encoding="utf-8")
        except OSError:  # a read-only folder: verify again next time
            pass
    return None


def _manifest(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
