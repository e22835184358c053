"""An append-only, crash-safe store of QA scores: a folder with ``run.json`` and ``scores.jsonl``.

* ``run.json``: the settings of the run (dataset, split sizes, model, N, seed,
  scores, data checksums, scores version, ppl-tok version), written once,
  atomically, at the start. Opening the folder with other settings raises
  :class:`SettingsMismatchError` naming every differing setting. Only the set
  of optional scores may grow (a later ``--scores exact`` adds those records).
  The ppl-tok version is the creator's, for the reader; a later release may
  add to the folder as long as its ``scores_version`` is the same.
* ``scores.jsonl``: one JSON object per line, one record per (kind, split,
  question). Records are appended a batch at a time with one ``write``,
  ``flush`` and ``fsync``. A process killed at any point leaves at most one
  partial last line (no trailing newline): :meth:`ScoreStore.open` cuts it
  off, so that record is computed again. A malformed complete line, or the
  same record twice, is an error naming the file and line, never skipped.
* ``.lock``: held (``flock``) by the process that has the folder open, so two
  runs never write one folder at once; the kernel releases it when that process
  ends, however it ends.
* ``timing.jsonl``: seconds and questions per batch (for questions/min); kept
  apart so that the scores of a resumed run equal those of an uninterrupted one.

Standard JSON only: ``-inf`` (a zero probability) is written as ``null``;
NaN and ``+inf`` are errors. :func:`encode_log` / :func:`decode_log` convert.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

SETTINGS_FILE = "run.json"
SCORES_FILE = "scores.jsonl"
TIMING_FILE = "timing.jsonl"
LOCK_FILE = ".lock"
#: Settings that may differ between runs into one folder (merged, not compared).
GROWABLE = ("scores",)
#: Settings recorded for the reader but not compared: the ppl-tok release that created the folder
#: (``scores_version`` is what decides whether another release may add to it).
INFORMATIONAL = ("ppl_tok_version",)
#: The ``scores_version`` of folders written before that setting existed (ppl-tok 0.1.0).
FIRST_SCORES_VERSION = 1


class StoreError(ValueError):
    """A run folder that cannot be used as asked."""


class SettingsMismatchError(StoreError):
    """A run folder written with other settings."""


def encode_log(x: float) -> float | None:
    """A log-probability as standard JSON: ``-inf`` becomes ``None`` (``null``)."""
    x = float(x)
    if x == -math.inf:
        return None
    if not math.isfinite(x):
        raise ValueError(f"cannot store the log-probability {x} (only finite values and -inf)")
    return x


def decode_log(x: float | None) -> float:
    """Inverse of :func:`encode_log`."""
    return -math.inf if x is None else float(x)


def encode_logs(xs: Iterable[float]) -> list[float | None]:
    return [encode_log(x) for x in xs]


def decode_logs(xs: Iterable[float | None]) -> list[float]:
    return [decode_log(x) for x in xs]


def _is_nat(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_log(v: Any) -> bool:
    """A stored log-probability: ``null`` (``-inf``) or a finite number (NaN, ``1e999`` are damage)."""
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))


def _list_of(check: Any) -> Any:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


#: Per answer, the fields of each record kind and their checks (:func:`validate_record`).
CHOICE_FIELDS: dict[str, dict[str, Any]] = {
    "is": {"bytes": _is_nat, "seed": _is_nat, "canonical": _list_of(_is_nat), "canonical_log_prob": _is_log,
           "log_p": _list_of(_is_log), "log_q": _list_of(_is_log), "is_canonical": _list_of(lambda b: b in (0, 1)),
           "samples": _list_of(_list_of(_is_nat))},
    "exact": {"lower": _is_log, "upper": _is_log, "closed": lambda b: isinstance(b, bool), "forwards": _is_nat},
    "stratified": {"log_marginal": _is_log},
    "most-likely": {"log_prob": _is_log, "tokens": _list_of(_is_nat), "optimal": lambda b: isinstance(b, bool)},
}
RECORD_KINDS = tuple(CHOICE_FIELDS)


def validate_record(record: Any, where: str, samples: int | None = None) -> dict[str, Any]:
    """``record`` if it is a well-formed score record, else a :class:`StoreError` starting with ``where``.

    Checked: a known ``kind``; ``split``, ``index``, ``id``; ``label`` indexing ``choices``; every
    answer's fields of its kind (log-probabilities finite or ``null``); in an ``"is"`` record,
    ``samples`` (if given, the run's N) entries in each per-sample list.
    """
    def bad(what: str) -> StoreError:
        return StoreError(f"{where}: {what}; the line is damaged (restore it, or delete the line and resume "
                          "the run to compute it again)")

    if not isinstance(record, dict):
        raise bad(f"expected a JSON object, got {type(record).__name__}")
    kind = record.get("kind")
    if kind not in CHOICE_FIELDS:
        raise bad(f"unknown record kind {kind!r} (expected one of {', '.join(RECORD_KINDS)})")
    for name, check in (("split", lambda v: isinstance(v, str)), ("index", _is_nat),
                        ("id", lambda v: isinstance(v, str)), ("label", _is_nat),
                        ("choices", lambda v: isinstance(v, list) and v and all(isinstance(c, dict) for c in v))):
        if not check(record.get(name)):
            raise bad(f"field {name!r} is {record.get(name)!r}")
    if record["label"] >= len(record["choices"]):
        raise bad(f"label {record['label']} does not index {len(record['choices'])} answers")
    for j, choice in enumerate(record["choices"]):
        for name, check in CHOICE_FIELDS[kind].items():
            if name not in choice:
                raise bad(f"answer {j} has no field {name!r}")
            if not check(choice[name]):
                raise bad(f"answer {j}: field {name!r} holds {str(choice[name])[:60]}, not a valid value")
        if kind == "is":
            lengths = {len(choice[k]) for k in ("log_p", "log_q", "is_canonical", "samples")}
            if len(lengths) != 1 or (samples is not None and lengths != {samples}):
                raise bad(f"answer {j}: log_p, log_q, is_canonical and samples hold "
                          f"{sorted(len(choice[k]) for k in ('log_p', 'log_q', 'is_canonical', 'samples'))} entries"
                          + (f", not the run's {samples} samples" if samples is not None else ""))
    return record


def record_key(record: dict[str, Any]) -> tuple[str, str, int]:
    """The identity of a record: ``(kind, split, index)``."""
    return record["kind"], record["split"], record["index"]


def records_digest(records: Iterable[dict[str, Any]], sizes: Mapping[str, int]) -> str:
    """SHA-256 of the records of the first ``sizes[split]`` questions of each split, of every kind.

    The records are taken in :func:`record_key` order, so the order of lines in ``scores.jsonl``
    does not matter (a Ray run appends batches as they finish); records of later questions do not
    count, so a run still appending keeps the digest of the questions already evaluated.
    """
    digest = hashlib.sha256()
    chosen = sorted((r for r in records if r["index"] < sizes.get(r["split"], 0)), key=record_key)
    for record in chosen:
        digest.update(json.dumps(record, sort_keys=True, allow_nan=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    old = {"scores_version": FIRST_SCORES_VERSION, "device": "cpu", **old}  # before "device": CPU-only runs
    keys = sorted((set(old) | set(new)) - set(GROWABLE) - set(INFORMATIONAL))
    return [f"{k}: folder has {old.get(k)!r}, this run has {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


class ScoreStore:
    """The records of one run folder; see the module docstring for the format."""

    def __init__(self, folder: Path, settings: dict[str, Any], records: list[dict[str, Any]],
                 lock: int | None = None):
        self.folder = folder
        self.settings = settings
        self.records = records
        self._done = {record_key(r) for r in records}
        self._lock = lock

    def close(self) -> None:
        """Let go of the folder (another process may then write it)."""
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the flock
            self._lock = None

    def __enter__(self) -> ScoreStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self.folder / SCORES_FILE

    @classmethod
    def open(cls, folder: str | Path, settings: dict[str, Any]) -> ScoreStore:
        """Open (or create) a run folder for ``settings``, repairing a torn last line.

        :raises SettingsMismatchError: the folder holds a run with other settings.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        lock = _lock(folder)
        try:
            return cls._open(folder, settings, lock)
        except BaseException:
            os.close(lock)
            raise

    @classmethod
    def _open(cls, folder: Path, settings: dict[str, Any], lock: int) -> ScoreStore:
        settings = json.loads(json.dumps(settings, allow_nan=False))  # normalise (tuples -> lists)
        settings_path = folder / SETTINGS_FILE
        if settings_path.exists():
            old = read_settings(folder)
            diff = _differences(old, settings)
            if diff:
                raise SettingsMismatchError(
                    f"{settings_path} was written by a run with other settings; use another --out folder "
                    f"or the same settings. Differences:\n  " + "\n  ".join(diff))
            merged = sorted(set(old.get("scores", [])) | set(settings.get("scores", [])))
            if merged != sorted(old.get("scores", [])):
                old = {**old, "scores": merged}
                _write_atomic(settings_path, json.dumps(old, indent=2, allow_nan=False) + "\n")
            settings = old
        else:
            _write_atomic(settings_path, json.dumps(settings, indent=2, allow_nan=False) + "\n")
        repair(folder / SCORES_FILE)
        return cls(folder, settings, list(read_records(folder / SCORES_FILE, samples=settings.get("samples"))), lock)

    def has(self, kind: str, split: str, index: int) -> bool:
        return (kind, split, index) in self._done

    def append(self, records: Sequence[dict[str, Any]], timing: dict[str, Any] | None = None) -> None:
        """Append ``records`` durably (one write, flush, fsync), then a timing line if given."""
        if self._lock is None:
            raise StoreError(f"{self.folder}: the store was closed (open the folder again to write it)")
        for r in records:
            if record_key(r) in self._done:
                raise StoreError(f"{self.path}: record {record_key(r)} is already stored")
        text = "".join(json.dumps(r, allow_nan=False, separators=(",", ":")) + "\n" for r in records)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        self.records.extend(records)
        self._done.update(record_key(r) for r in records)
        if timing is not None:
            with open(self.folder / TIMING_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(timing, allow_nan=False) + "\n")


def _lock(folder: Path) -> int:
    """An exclusive ``flock`` on the folder's lock file (its descriptor), or a :class:`StoreError`."""
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(f"{folder} is being written by another run (it holds {folder / LOCK_FILE}); "
                         f"wait for it to finish or stop it first") from None
    return fd


def read_settings(folder: str | Path) -> dict[str, Any]:
    """The ``run.json`` of a run folder."""
    path = Path(folder) / SETTINGS_FILE
    if not path.is_file():
        raise StoreError(f"{folder} is not a QA run folder: {SETTINGS_FILE} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise StoreError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err


def repair(path: Path) -> int:
    """Cut off a partial last line (a write torn by a kill); return the bytes removed."""
    if not path.exists():
        return 0
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return len(data) - keep


def read_records(path: str | Path, samples: int | None = None) -> Iterator[dict[str, Any]]:
    """The complete records of a ``scores.jsonl``; a malformed or repeated line is an error naming it.

    Each record is checked by :func:`validate_record` (``samples``: the run's N, if known).

    A partial last line (no newline) is not a record yet: a batch a running writer has not
    finished writing, or one torn by a kill (which :meth:`ScoreStore.open` cuts off). It is left
    out, so a run in progress can be read (``qa report --limit``) while it appends.
    """
    path = Path(path)
    if not path.exists():
        return
    seen: dict[tuple[str, str, int], int] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.endswith("\n"):
                return
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise StoreError(f"{path}:{n}: not a score record ({err})") from err
            key = record_key(validate_record(record, f"{path}:{n}", samples))
            if key in seen:
                raise StoreError(f"{path}:{n}: record {key} repeats line {seen[key]}")
            seen[key] = n
            yield record


def read_timing(folder: str | Path) -> list[dict[str, Any]]:
    """The timing lines of a run folder (a torn last line is left out: it holds only timing)."""
    path = Path(folder) / TIMING_FILE
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            if n == len(lines) and not text.endswith("\n"):
                break  # a line torn by a kill: the batch's scores are stored, only its timing is lost
            raise StoreError(f"{path}:{n}: not valid JSON ({err})") from err
    return out
