"""Vocabularies as maps from token id to the exact bytes the token stands for.

Bytes are the alphabet of ppl-tok (``DESIGN.md``): every algorithm sees only
``id -> bytes``; this module is the one place that knows tokenizer families.

* GPT-2-style byte-level BPE (SmolLM2, Mamba, GPT-2): token strings are written
  in the GPT-2 byte alphabet (``Ġ`` is a space) and decoded byte by byte.
* SentencePiece style (Llama 2, Gemma): ``▁`` is a space and ``<0xNN>`` pieces
  are byte fallback, one raw byte each.
* A plain list of token strings (toy vocabularies for tests and docs).

Special and control tokens (BOS, EOS, ``<pad>``, chat markers) have no surface: their entry is ``None`` and
they never appear inside an MDD. Several ids may share one surface; all of them are kept.

Byte-fallback pieces are used according to :class:`ByteFallback`: by default as
in the paper (Geh et al., 2024, Sec. 3), only where no ordinary piece covers a
character; with that policy the Llama 2 vocabulary reproduces Fig. 1 exactly.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ppl_tok.common.byte_trie import ByteTrie

SPACE_MARK = "\u2581"  # SentencePiece's "▁"
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class ByteFallback(str, enum.Enum):
    """When byte-fallback pieces (``<0xNN>``) may appear in a tokenization.

    ``PAPER`` (default): only for characters that no ordinary piece covers, as
    the paper's compiler does. ``ALWAYS``: anywhere (every byte of the text may
    also be spelled by its byte piece). ``NEVER``: not at all.
    """

    PAPER = "paper"
    ALWAYS = "always"
    NEVER = "never"


def gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's ``bytes_to_unicode`` table (character -> byte).

    Printable Latin-1 bytes stand for themselves; the other 68 bytes are shifted
    to code points 256, 257, ... in increasing byte order.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\xa1"), ord("\xac") + 1),
        *range(ord("\xae"), ord("\xff") + 1),
    ]
    table = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shift)] = b
            shift += 1
    return table


def _sentencepiece_surface(piece: str) -> bytes:
    match = _BYTE_PIECE.match(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace(SPACE_MARK, " ").encode("utf-8")


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token id -> bytes, with special tokens marked as having no surface.

    :param surfaces: ``surfaces[i]`` is the byte string of token ``i``, or
        ``None`` for special/control tokens (excluded from tokenizations).
    :param byte_fallback_ids: ids of byte-fallback pieces (``<0xNN>``).
    :param names: the tokenizer's own string for each id (for display).
    :param encoder: the tokenizer's canonical encoder ``str -> ids``, taking
        the text literally (no dummy-prefix space, no special tokens).
    :param fallback: the byte-fallback policy used by :func:`ppl_tok.mdd.compile_mdd`.
    :param dummy_prefix: the tokenizer puts a space (``▁``) before every text it encodes (SentencePiece's
        dummy prefix: Llama 2, Mistral, Phi-3); :meth:`encode` still takes text literally, and
        :meth:`sequence_start` gives a text the space the tokenizer would.
    :param tokenizer_json: a fast tokenizer's ``tokenizer.json``, on demand (:mod:`ppl_tok.canonical_step.pairs`).
    """

    surfaces: tuple[bytes | None, ...]
    byte_fallback_ids: frozenset[int] = frozenset()
    names: tuple[str, ...] | None = None
    encoder: Callable[[str], list[int]] | None = field(default=None, repr=False)
    fallback: ByteFallback = ByteFallback.PAPER
    name: str = "vocabulary"
    dummy_prefix: bool = False
    tokenizer_json: Callable[[], str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.surfaces:
            raise ValueError("a vocabulary needs at least one token")
        for i, s in enumerate(self.surfaces):
            if s is not None and (not isinstance(s, bytes) or len(s) == 0):
                raise ValueError(f"token {i} has surface {s!r}: expected non-empty bytes or None")
        object.__setattr__(self, "fallback", ByteFallback(self.fallback))

    def __len__(self) -> int:
        return len(self.surfaces)

    def __getitem__(self, token_id: int) -> bytes | None:
        return self.surfaces[token_id]

    def __repr__(self) -> str:
        return (
            f"Vocabulary({self.name!r}, {len(self)} ids, {len(self.special_ids)} special, "
            f"{len(self.byte_fallback_ids)} byte-fallback, fallback={self.fallback.value!r})"
        )

    # ------------------------------------------------------------------ views
    @cached_property
    def special_ids(self) -> frozenset[int]:
        """Ids with no surface (BOS, EOS, padding, control tokens)."""
        return frozenset(i for i, s in enumerate(self.surfaces) if s is None)

    def token_name(self, token_id: int) -> str:
        """A printable name of a token: the tokenizer's string if known."""
        if self.names is not None:
            return self.names[token_id]
        s = self.surfaces[token_id]
        return "<special>" if s is None else s.decode("utf-8", errors="backslashreplace")

    def ids_of(self, surface: bytes | str) -> list[int]:
        """All ids whose surface equals ``surface`` (possibly several)."""
        if isinstance(surface, str):
            surface = surface.encode("utf-8")
        return list(self._by_surface.get(surface, ()))

    @cached_property
    def _by_surface(self) -> dict[bytes, tuple[int, ...]]:
        table: dict[bytes, list[int]] = {}
        for i, s in enumerate(self.surfaces):
            if s is not None:
                table.setdefault(s, []).append(i)
        return {s: tuple(ids) for s, ids in table.items()}

    @cached_property
    def _ascii_tokens(self) -> bytes:
        """The ASCII bytes that are an ordinary (not byte-fallback) token by themselves."""
        by_surface, pieces = self._by_surface, self.byte_fallback_ids
        return bytes(b for b in range(128) if any(t not in pieces for t in by_surface.get(bytes([b]), ())))

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """Concatenate the surfaces of ``token_ids`` (special tokens are an error)."""
        out = bytearray()
        for t in token_ids:
            s = self.surfaces[t]
            if s is None:
                raise ValueError(f"token {t} ({self.token_name(t)}) is special and has no surface")
            out += s
        return bytes(out)

    def trie(self, byte_fallback: bool) -> ByteTrie:
        """Byte trie of the ordinary tokens (and of the byte pieces too if asked)."""
        return self._tries[bool(byte_fallback)]

    @cached_property
    def _tries(self) -> dict[bool, ByteTrie]:
        ordinary, with_bytes = ByteTrie(), ByteTrie()
        for i, s in enumerate(self.surfaces):
            if s is None:
                continue
            if i not in self.byte_fallback_ids:
                ordinary.add(s, i)
            with_bytes.add(s, i)
        return {False: ordinary, True: with_bytes}

    # -------------------------------------------------------------- encoding
    def sequence_start(self, text: str) -> str:
        """``text`` as the tokenizer feeds it at the start of a sequence (right after BOS): with a leading
        space where the tokenizer has a dummy prefix and the text has none (``"Q: x"`` -> ``" Q: x"``, encoded
        ``[▁Q, :, ▁x]`` as ``transformers`` does), else unchanged."""
        return " " + text if self.dummy_prefix and text and not text.startswith(" ") else text

    def encode(self, text: str) -> list[int]:
        """The canonical tokenization of ``text``, taken literally.

        Uses the tokenizer's encoder, with special tokens not parsed: text that
        spells one (``"<|endoftext|>"``) is ordinary text. Toy vocabularies (no encoder) fall back to
        greedy longest match, left to right.
        """
        if not text:
            raise ValueError("cannot encode the empty string")
        if self.encoder is not None:
            ids = list(self.encoder(text))
        else:
            ids = self._longest_match(text.encode("utf-8"))
        if self.decode(ids) != text.encode("utf-8"):
            raise ValueError(
                f"the tokenizer's encoding of {text!r} decodes to "
                f"{self.decode(ids)!r}, not to the text itself"
            )
        return ids

    def _longest_match(self, data: bytes) -> list[int]:
        trie, ids, i = self.trie(self.fallback is not ByteFallback.NEVER), [], 0
        while i < len(data):
            found = trie.matches(data, i)
            if not found:
                raise ValueError(f"no token covers byte {data[i]:#04x} at offset {i}")
            i, tok = max(found, key=lambda m: (m[0], -m[1]))
            ids.append(tok)
        return ids

    # ---------------------------------------------------------- constructors
    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[str | bytes | None],
        *,
        fallback: ByteFallback | str = ByteFallback.PAPER,
        name: str = "toy",
    ) -> Vocabulary:
        """A toy vocabulary from token strings; ``None`` marks a special token.

        Strings of the form ``<0xNN>`` are byte-fallback pieces.
        """
        surfaces: list[bytes | None] = []
        fallback_ids = set()
        for i, t in enumerate(tokens):
            if t is None:
                surfaces.append(None)
            elif isinstance(t, bytes):
                surfaces.append(t)
            elif _BYTE_PIECE.match(t):
                surfaces.append(_sentencepiece_surface(t))
                fallback_ids.add(i)
            else:
                surfaces.append(t.encode("utf-8"))
        names = tuple("<special>" if t is None else str(t) for t in tokens)
        return cls(tuple(surfaces), frozenset(fallback_ids), names, None, ByteFallback(fallback), name)

    @classmethod
    def from_sentencepiece(
        cls, path: str | Path, *, fallback: ByteFallback | str = ByteFallback.PAPER
    ) -> Vocabulary:
        """From a SentencePiece ``.model`` file (e.g. Llama 2's ``tokenizer.model``)."""
        import sentencepiece as spm

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no SentencePiece model at {path}")
        try:
            sp = spm.SentencePieceProcessor(model_file=str(path))
        except Exception as err:  # sentencepiece raises bare RuntimeError/OSError
            raise ValueError(f"{path} is not a readable SentencePiece model: {err}") from err
        surfaces: list[bytes | None] = []
        fallback_ids = set()
        names = []
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            names.append(piece)
            if sp.is_control(i) or sp.is_unknown(i):
                surfaces.append(None)
            elif sp.is_byte(i):
                surfaces.append(_sentencepiece_surface(piece))
                fallback_ids.add(i)
            else:
                surfaces.append(_sentencepiece_surface(piece))
        encoder = _literal_sentencepiece_encoder(path, sp)
        dummy = "".join(sp.encode("a", out_type=str)).startswith(SPACE_MARK)
        return cls(tuple(surfaces), frozenset(fallback_ids), tuple(names), encoder,
                   ByteFallback(fallback), path.stem, dummy)

    @classmethod
    def from_hf(cls, tokenizer: Any, *, fallback: ByteFallback | str = ByteFallback.PAPER,
                name: str | None = None) -> Vocabulary:
        """From a Hugging Face tokenizer (fast or slow, byte-level BPE or SentencePiece).

        The family is read from the tokenizer's decoder (``ByteLevel`` means the
        GPT-2 byte alphabet); tokenizers without that information are classified
        by their pieces (``Ġ`` against ``▁``).
        """
        vocab_map: dict[str, int] = tokenizer.get_vocab()
        size = max(len(tokenizer), max(vocab_map.values()) + 1)
        names = [""] * size
        for piece, i in vocab_map.items():
            names[i] = piece
        special = set(tokenizer.all_special_ids)
        for i, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
            if getattr(added, "special", False):
                special.add(i)
        byte_level = _is_byte_level(tokenizer, vocab_map)
        decoder = gpt2_byte_decoder() if byte_level else None
        surfaces: list[bytes | None] = []
        fallback_ids = set()
        for i, piece in enumerate(names):
            if i in special or piece == "":
                surfaces.append(None)
            elif byte_level:
                try:
                    surfaces.append(bytes(decoder[c] for c in piece))
                except KeyError:  # an added token written in plain text
                    surfaces.append(piece.encode("utf-8"))
            else:
                if _BYTE_PIECE.match(piece):
                    fallback_ids.add(i)
                surfaces.append(_sentencepiece_surface(piece))

        def encoder(text: str) -> list[int]:
            # Text that spells a special token ("<|endoftext|>", "<bos>") is ordinary text.
            return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

        probe = encoder("a")
        dummy = all(surfaces[t] is not None for t in probe) and b"".join(surfaces[t] for t in probe) == b" a"
        if dummy:
            encoder = _literal_hf_encoder(tokenizer)
        label = name or getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        return cls(tuple(surfaces), frozenset(fallback_ids), tuple(names), encoder, ByteFallback(fallback), str(label),
                   dummy, getattr(getattr(tokenizer, "backend_tokenizer", None), "to_str", None))


def _pipeline_kinds(tokenizer: Any) -> set[str]:
    """The component types of a fast tokenizer's decoder and pre-tokenizer (``tokenizer.json``), nested
    ``Sequence`` parts included; empty for a slow tokenizer. Each component is serialised on its own (its pickle
    state is its ``tokenizer.json`` entry): ``backend.to_str()`` would write the whole vocabulary and merges, about
    3 s for Gemma's 262k pieces and half of a SmolLM2 load."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return set()
    kinds: set[str] = set()
    todo = [json.loads(part.__getstate__()) for part in (backend.decoder, backend.pre_tokenizer) if part is not None]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            kinds.add(str(node.get("type")))
            todo.extend(node.get("decoders") or [])
            todo.extend(node.get("pretokenizers") or [])
    return kinds


def _is_byte_level(tokenizer: Any, vocab_map: dict[str, int]) -> bool:
    """Whether the pieces are written in GPT-2's byte alphabet: from ``tokenizer.json``'s decoder and
    pre-tokenizer (``ByteLevel``, or SentencePiece's ``Metaspace`` / ``ByteFallback`` / ``Replace``), as
    transformers 5 dropped ``byte_decoder`` from some tokenizers; else that attribute; else ``Ġ`` against ``▁``.
    """
    kinds = _pipeline_kinds(tokenizer)
    if "ByteLevel" in kinds:
        return True
    if kinds & {"ByteFallback", "Metaspace", "Replace"}:
        return False
    if hasattr(tokenizer, "byte_decoder") or hasattr(tokenizer, "byte_encoder"):
        return True
    gpt2 = sum(1 for p in vocab_map if "\u0120" in p)
    sp = sum(1 for p in vocab_map if SPACE_MARK in p)
    return gpt2 > sp


def _literal_hf_encoder(tokenizer: Any) -> Callable[[str], list[int]]:
    """The encoder of a fast tokenizer with a dummy prefix, taking text literally.

    ``transformers`` 5 writes the dummy prefix into ``tokenizer.json`` as a ``Metaspace`` pre-tokenizer with
    ``prepend_scheme`` ``"first"``/``"always"``, or (legacy Llama) a ``Prepend("▁")`` normalizer; a copy of
    the pipeline with ``"never"`` and without that normalizer encodes ``"Paris is"`` as ``[P, aris, ▁is]``
    and ``" Paris is"`` as ``[▁Paris, ▁is]``, exactly as the text reads.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"{type(tokenizer).__name__} puts a space before every text and is not a fast tokenizer: "
                         "ppl-tok cannot encode its texts literally; save it as a fast one (tokenizer.json)")
    from tokenizers import Tokenizer

    data = json.loads(backend.to_str())

    def literal(node: Any) -> Any:
        if isinstance(node, list):
            return [literal(x) for x in node
                    if not (isinstance(x, dict) and x.get("type") == "Prepend" and x.get("prepend") == SPACE_MARK)]
        if isinstance(node, dict):
            if node.get("type") == "Prepend" and node.get("prepend") == SPACE_MARK:
                return None
            out = {k: literal(v) for k, v in node.items()}
            if out.get("type") == "Metaspace":
                out["prepend_scheme"], out["add_prefix_space"] = "never", False
            return out
        return node

    data["normalizer"] = literal(data.get("normalizer"))
    data["pre_tokenizer"] = literal(data.get("pre_tokenizer"))
    copy = Tokenizer.from_str(json.dumps(data))
    copy.encode_special_tokens = True  # text that spells a special token is ordinary text

    def encode(text: str) -> list[int]:
        return list(copy.encode(text, add_special_tokens=False).ids)

    return encode


def _literal_sentencepiece_encoder(path: Path, sp: Any) -> Callable[[str], list[int]]:
    """A SentencePiece encoder that adds no dummy-prefix space.

    SentencePiece models such as Llama 2's prepend ``▁`` to every input. To take
    the text literally we switch that normalizer flag off in a copy of the
    model; if the protobuf module is missing, a text that starts with a space
    is encoded without it (the dummy prefix puts it back).
    """
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
        import sentencepiece as spm

        proto = pb.ModelProto()
        proto.ParseFromString(path.read_bytes())
        if not proto.normalizer_spec.add_dummy_prefix:
            return lambda text: list(sp.encode(text))
        proto.normalizer_spec.add_dummy_prefix = False
        literal = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
        return lambda text: list(literal.encode(text))
    except ImportError:
        def encode(text: str) -> list[int]:
            if text.startswith(" "):
                return list(sp.encode(text[1:]))
            raise ValueError("encoding text without a leading space needs the protobuf package")

        return encode
