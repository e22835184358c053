"""The per-step canonicality test: can a token prefix still be the tokenizer's own tokenization?

Words. ``C`` is the set of *canonical* token sequences, ``C = {encode(x) : x a string}``;
``v`` is canonical iff ``encode(decode(v)) == v``. Local conditioning (Vieira et al., ICML 2025,
"Language Models over Canonical Byte-Pair Encodings") needs, at each step, the tokens ``t`` that keep
the prefix in ``P = {u : u w in C for some w}`` (the prefixes of canonical sequences), and, for the end
of the text, whether the prefix itself is in ``C``.

The test. For byte-pair encoding, canonicality is a property of adjacent pairs (Vieira et al.): with
``pair(a, b)`` true iff ``encode(decode(a) decode(b)) == [a, b]`` and ``first(t)`` iff
``encode(decode(t)) == [t]``,

    ``v in C  <=>  first(v_1) and pair(v_i, v_i+1) for every i``.

(BPE merges never cross the join of ``a`` and ``b`` when no pair straddling it outranks the merges that
built them, and a merge that does straddle it fires in the longer text as it does in the pair.) Then
``P = C`` and the step test of ``t`` after ``u`` is ``pair(u_last, t)`` (``first(t)`` at the start):
one cached look-up per step. The equivalence is *checked*, not assumed: the tests compare it with
``encode(decode(v)) == v`` on every tokenization of short strings (the MDD's enumeration) for the
bundled vocabularies (SmolLM2's byte-level BPE with its regex pre-tokenizer, Gemma 3's BPE) and Llama 2's
SentencePiece, and with brute force over all strings on toy BPE vocabularies.

Tokens that split a UTF-8 character (byte-level BPE, byte-fallback pieces ``<0xE2>``) have no text of
their own, and the encoder takes text. So the pairs are of *units*: a unit is a token, or the run of
tokens that together spell whole characters (``<0xE2> <0x82> <0xAC>`` is one unit, ``€``). The test
keeps a key ``(previous unit, open unit)``; a token that leaves its unit open passes if its bytes can
still become UTF-8 (and fails if they never can), and the token that closes the unit is tested on the
pair (previous unit, this unit). The text may end only where no unit is open.

Regex pre-tokenizers (GPT-2's, SmolLM2's) break the pair property in one place: ``\\s+(?!\\S)`` hands the
last character of a whitespace run to what follows, so ``['\\n', '\\n', 'x']`` is canonical though
``['\\n', '\\n']`` is not (``\\n\\n`` alone is one token): a prefix of a canonical sequence need not be canonical.
A window that fails on its own but ends in whitespace and is a prefix of the encoding of its text followed by a
letter is *pending*: it is kept whole, the next unit is tested against all of it, and the text may not end there.

Cost: ``pair`` is one encoding of a two-token text, cached. The mask of a step (every token ``t`` that
fails after ``a``, :meth:`CanonicalSteps.banned`) encodes ``a t`` for every ``t`` once per distinct ``a``
and is cached; that is the price of the exact local normaliser.
"""

from __future__ import annotations

import codecs
import functools
import time
import weakref
from collections.abc import Sequence

import torch

from ppl_tok.canonical_step.pairs import PairMasks, pair_masks_for
from ppl_tok.vocabulary import Vocabulary

#: ``(window, open unit, pending)``: the tokens of the last whole unit (of the units since the last window that
#: encoded to itself, while ``pending``) and of the unit still open
Key = tuple[tuple[int, ...], tuple[int, ...], bool]
START: Key = ((), (), False)
FAIL, EXACT, PENDING = 0, 1, 2


def _utf8_state(data: bytes) -> bool | None:
    """``True``: whole UTF-8 text; ``None``: a proper prefix of some UTF-8 text; ``False``: never UTF-8."""
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        pass
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return None


class CanonicalSteps:
    """The per-step canonicality test of one vocabulary (its encoder is the tokenizer's).

    :param vocab: the vocabulary; its :meth:`~ppl_tok.vocabulary.Vocabulary.encode` defines canonical.
    :param cache_masks: how many step masks (one bool per id) to keep.
    :param fast: build the masks after one whole token from the BPE merges where the vocabulary allows it
        (:mod:`ppl_tok.canonical_step.pairs`), else (and with ``False``) by the step test of every id.
    """

    def __init__(self, vocab: Vocabulary, cache_masks: int = 4096, fast: bool = True) -> None:
        self.vocab = vocab
        self._fast: PairMasks | None | bool = fast  # True: not built yet
        self._verdicts: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        self._masks: dict[Key, torch.Tensor] = {}
        self._cache_masks = cache_masks
        self._text = list(vocab.surfaces)
        self.mask_seconds = 0.0  # time spent building step masks (the benchmark reports it)

    def clear(self) -> None:
        """Forget every cached verdict and mask (a benchmark measures the cold cost)."""
        self._verdicts.clear()
        self._masks.clear()

    # ------------------------------------------------------------ the test
    def _bytes(self, tokens: tuple[int, ...]) -> bytes | None:
        parts = [self._text[t] for t in tokens]
        return None if any(p is None for p in parts) else b"".join(parts)  # type: ignore[arg-type]

    def _encodes_to(self, data: bytes, tokens: tuple[int, ...]) -> bool:
        try:
            return tuple(self.vocab.encode(data.decode("utf-8"))) == tokens
        except (UnicodeDecodeError, ValueError):
            return False

    def _window(self, prev: tuple[int, ...], unit: tuple[int, ...], unit_bytes: bytes) -> int:
        """The verdict on the window ``prev + unit`` (cached): :data:`FAIL`, :data:`EXACT` (it encodes to
        itself) or :data:`PENDING` (it does not, but it ends in whitespace and is a prefix of the encoding of
        its text followed by a letter: a regex pre-tokenizer's ``\\s+(?!\\S)`` gives the last whitespace
        character of a run to what follows, so ``['\\n', '\\n', 'x']`` is canonical and ``['\\n', '\\n']`` is not)."""
        hit = self._verdicts.get((prev, unit))
        if hit is None:
            data = (self._bytes(prev) if prev else b"") + unit_bytes
            window = prev + unit
            hit = FAIL
            if self._encodes_to(data, window):
                hit = EXACT
            elif data[-1:].isspace():
                try:
                    probe = tuple(self.vocab.encode(data.decode("utf-8") + "x"))
                except (UnicodeDecodeError, ValueError):
                    probe = ()
                hit = PENDING if probe[: len(window)] == window else FAIL
            self._verdicts[(prev, unit)] = hit
        return hit

    def step(self, key: Key, t: int) -> tuple[bool, Key]:
        """Whether ``t`` passes at ``key``, and the key after it."""
        prev, open_, pending = key
        t = int(t)
        unit = open_ + (t,)
        data = self._bytes(unit)
        if data is None:
            return False, key
        whole = _utf8_state(data)
        if whole is False:
            return False, key
        if whole is None:
            return True, (prev, unit, pending)
        verdict = self._window(prev, unit, data)
        if verdict == FAIL:
            return False, key
        return True, ((unit, (), False) if verdict == EXACT else (prev + unit, (), True))

    def key(self, tokens: Sequence[int]) -> Key:
        """The key after ``tokens`` (the text's tokens so far, no BOS), without testing them."""
        key = START
        for t in tokens:
            key = self.step(key, t)[1]
        return key

    def allows(self, prefix: Sequence[int], t: int) -> bool:
        """The step test: whether ``prefix + [t]`` passes its last step."""
        return self.step(self.key(prefix), t)[0]

    def passes(self, tokens: Sequence[int]) -> bool:
        """Whether every step of ``tokens`` passes and the text may end after them."""
        key = START
        for t in tokens:
            ok, key = self.step(key, t)
            if not ok:
                return False
        return self.ends_text(key)

    @staticmethod
    def ends_text(key: Key) -> bool:
        """Whether the text may end at ``key``: no unit is open and no window is pending."""
        return not key[1] and not key[2]

    def is_canonical(self, tokens: Sequence[int]) -> bool:
        """``encode(decode(tokens)) == tokens`` (tokens that are not whole UTF-8 text are not canonical)."""
        if not tokens:
            return True
        data = self._bytes(tuple(int(t) for t in tokens))
        return data is not None and self._encodes_to(data, tuple(int(t) for t in tokens))

    # ------------------------------------------------------------ the mask of a step
    def banned(self, key: Key, size: int | None = None) -> torch.Tensor:
        """``out[t]`` is ``True`` where ``t`` fails at ``key``, ids without a surface included (the end of the
        text is :meth:`ends_text`).

        :param size: the row width (an LM head may be padded past the vocabulary: the extra ids are banned).
        """
        mask = self._masks.get(key)
        if mask is None:
            start = time.perf_counter()
            verdicts = self._verdicts
            mask = self._fast_mask(key)
            if mask is None:
                mask = torch.tensor([not self.step(key, t)[0] for t in range(len(self._text))], dtype=torch.bool)
            # the mask holds these verdicts now: keep the pair cache small
            if len(verdicts) > 8 * len(self._text):
                verdicts.clear()
            if len(self._masks) >= self._cache_masks:
                self._masks.pop(next(iter(self._masks)))
            self._masks[key] = mask
            self.mask_seconds += time.perf_counter() - start
        if size is not None and size != mask.shape[0]:
            if size < mask.shape[0]:
                raise ValueError(f"a row of {size} ids is narrower than the vocabulary's {mask.shape[0]}")
            mask = torch.cat([mask, torch.ones(size - mask.shape[0], dtype=torch.bool)])
        return mask

    def _fast_mask(self, key: Key) -> torch.Tensor | None:
        """The mask at the start or after one whole token from the merges (:mod:`ppl_tok.canonical_step.pairs`); the
        ids it cannot settle (a pending whitespace window, a join with a text of several pre-tokens) by
        :meth:`step`. ``None`` where there is no fast test."""
        if self._fast is True:
            self._fast = pair_masks_for(self.vocab)
        prev, open_, pending = key
        if not isinstance(self._fast, PairMasks) or open_ or pending or len(prev) > 1:
            return None
        fast = self._fast.after(prev[0] if prev else None)
        if fast is None:
            return None
        exact, unsure = fast
        states = self._states
        passes = exact | (states == 1)
        unsure = unsure | (~exact & (states == 2) & self._ends_in_space)
        for t in torch.nonzero(unsure).flatten().tolist():
            passes[t] = self.step(key, t)[0]
        return ~passes | (states == 0)

    @functools.cached_property
    def _states(self) -> torch.Tensor:
        """Per id: 0 no surface or never UTF-8, 1 a proper prefix of UTF-8 text, 2 whole text."""
        codes = {False: 0, None: 1, True: 2}
        return torch.tensor([0 if s is None else codes[_utf8_state(s)] for s in self._text], dtype=torch.long)

    @functools.cached_property
    def _ends_in_space(self) -> torch.Tensor:
        return torch.tensor([s is not None and s[-1:].isspace() for s in self._text], dtype=torch.bool)


_STEPS: "weakref.WeakKeyDictionary[Vocabulary, CanonicalSteps]" = weakref.WeakKeyDictionary()


def steps_for(vocab: Vocabulary) -> CanonicalSteps:
    """The one :class:`CanonicalSteps` of ``vocab`` (its caches shared by every caller)."""
    steps = _STEPS.get(vocab)
    if steps is None:
        steps = _STEPS[vocab] = CanonicalSteps(vocab)
    return steps


__all__ = ["CanonicalSteps", "Key", "START", "steps_for"]
