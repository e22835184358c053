"""The fast step mask of a BPE vocabulary: which tokens ``b`` may follow a token ``a`` canonically, from the merges.

Words. ``pair(a, b)`` is true iff ``encode(decode(a) decode(b)) == [a, b]`` (:mod:`ppl_tok.canonical_step`); the
step mask after ``a`` is ``pair(a, .)`` over the whole vocabulary. Encoding ``decode(a) b`` for every ``b`` costs
one encode per id; this module gets the same mask from the BPE merges, vectorised over the vocabulary.

**Merges** (Vieira et al., ICML 2025, "Language Models over Canonical Byte-Pair Encodings", the bigram test).
Run BPE on a token's own symbols and record its derivation tree. The *right spine* ``R(a)`` is the chain
``a = x_0, x_1, ...`` of right children, each with ``r(x_i)``, the rank of the merge that absorbed ``x_i``
into its parent (``r(a) = inf``); the *left spine* ``L(b)`` likewise with left children. BPE applies merges in
increasing rank (a merge's rank exceeds those that built its parts), the lowest position first on a tie, and
the two sides of the join evolve apart until a merge crosses it. ``x_i`` is the last symbol left of the join
while merges of rank ``< r(x_i)`` run, ``y_j`` the first right of it while ranks ``< r(y_j)`` do. So, where
``A B`` is one pre-token and ``a``, ``b`` are each their own BPE (``bpe_ok``)::

    BPE(A B) == [a, b]  <=>  no merge (x, y) with x in R(a), y in L(b), rank(x, y) < r(x), rank(x, y) <= r(y)

(a tie with ``a``'s own merge goes to ``a``'s, the leftmost; a tie with ``b``'s to the crossing merge).

**Pre-tokens.** Encoding is BPE per pre-token, so ``encode(A B) == [a, b]`` iff the pre-tokenizer gives
``[A, B]`` (*clean*: then iff ``encode(A) == [a]`` and ``encode(B) == [b]``) or ``[A B]`` (*join*: the merge
test), never otherwise (*other*). Under GPT-2's regex (byte-level BPE with ``use_regex``: SmolLM2) the class
depends on ``A`` and on ``B``'s first four characters up to character class (letters, numbers, the rest,
each whitespace character and the apostrophe kept; letters of a contraction kept after an apostrophe): the
pre-tokenizer runs once per class, not per id. A tokenizer with no effective pre-tokenizer (Gemma 3: spaces
become ``▁`` before its split on ``" "``) joins everything. Any other pipeline (a dummy prefix, Llama 3's
digit groups, SentencePiece files) has no fast mask here: :mod:`ppl_tok.canonical_step` keeps its exact test.

A non-exact pair still passes when the slow test calls it *pending* (its text ends in whitespace): those
few ids go back to the slow test. The tests check this mask against the slow one, id by id.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from functools import cached_property
from typing import Any

import torch

from ppl_tok.vocabulary import Vocabulary

INF = 1 << 40
CLEAN, JOIN, OTHER = 0, 1, 2
_CONTRACTION_LETTERS = set("strvemld")


def _char_class(c: str, literal_letter: bool) -> str:
    if c == "'" or c.isspace() or unicodedata.category(c)[0] in "ZC":
        return c
    kind = unicodedata.category(c)[0]
    if kind == "L":
        return c if literal_letter and c in _CONTRACTION_LETTERS else "a"
    return "0" if kind == "N" else "."


def _rep(text: str, after_apostrophe: bool) -> str:
    """``text``'s first four characters up to what GPT-2's regex sees at a join (see the module docstring)."""
    out = []
    for i, c in enumerate(text[:4]):
        literal = (after_apostrophe and i < 2) or "'" in text[max(0, i - 2):i]
        out.append(_char_class(c, literal))
    return "".join(out)


def _pretokenizer_kind(data: dict) -> str | None:
    """``"gpt2"`` (ByteLevel with GPT-2's regex), ``"none"`` (no effective split) or ``None`` (unsupported)."""
    pre, norm = data.get("pre_tokenizer"), data.get("normalizer")
    if (isinstance(pre, dict) and pre.get("type") == "ByteLevel" and pre.get("use_regex", True)
            and norm is None):
        return "gpt2"
    spaces_replaced = (isinstance(norm, dict) and norm.get("type") == "Replace"
                       and norm.get("pattern") == {"String": " "} and norm.get("content") == "\u2581")
    if pre is None and norm is None:
        return "none"
    if spaces_replaced and (pre is None or (pre.get("type") == "Split" and pre.get("pattern") == {"String": " "})):
        return "none"
    return None


class PairMasks:
    """The merge-based step masks of one byte-level or ``▁`` BPE vocabulary (built once, lazily).

    :param vocab: the vocabulary (its ``tokenizer_json`` gives the merges and the pipeline).
    :param data: the parsed ``tokenizer.json`` (from :func:`pair_masks_for`).
    :param source: its text, where the caller has it (the tokenizer is built from it, not from ``data`` again).
    """

    def __init__(self, vocab: Vocabulary, data: dict, kind: str, source: str | None = None) -> None:
        from tokenizers import Tokenizer

        self.vocab, self.kind = vocab, kind
        model = data["model"]
        self._ids: dict[str, int] = model["vocab"]
        self._ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, m in enumerate(model["merges"]):
            x, y = m.split(" ", 1) if isinstance(m, str) else m
            ix, iy, iz = self._ids.get(x), self._ids.get(y), self._ids.get(x + y)
            if ix is not None and iy is not None and iz is not None and (ix, iy) not in self._ranks:
                self._ranks[(ix, iy)] = (rank, iz)
        #: non-special added tokens (Gemma 3's newline runs, ``<table>``): matched in the text before the rest
        self._added = {int(t["id"]): t["content"] for t in data.get("added_tokens", ())
                       if not t.get("special") and 0 <= int(t["id"]) < len(vocab) and vocab.surfaces[int(t["id"])]}
        self._heads: dict[str, torch.Tensor] = {}
        self._tokenizer = Tokenizer.from_str(json.dumps(data) if source is None else source)
        self._tokenizer.encode_special_tokens = True
        self._text = [None if s is None else s.decode("utf-8", errors="strict") if _whole(s) else None
                      for s in vocab.surfaces]

    # ------------------------------------------------------------ per vocabulary
    @cached_property
    def first_ok(self) -> torch.Tensor:
        """``encode(decode(t)) == [t]`` for every id (the tokenizer's own encoder, in one batch)."""
        ids = [i for i, t in enumerate(self._text) if t]
        out = torch.zeros(len(self._text), dtype=torch.bool)
        encs = self._tokenizer.encode_batch([self._text[i] for i in ids], add_special_tokens=False)
        out[ids] = torch.tensor([enc.ids == [i] for i, enc in zip(ids, encs)], dtype=torch.bool)
        return out

    @cached_property
    def _spines(self) -> tuple[torch.Tensor, list[list[tuple[int, int]]], torch.Tensor, torch.Tensor]:
        """``bpe_ok`` (BPE of the token's symbols is the token), the right spines, and the left spines padded
        to ``[V, K]`` (ids, absorbing ranks; padding id ``V`` never merges)."""
        size = len(self._text)
        trees = self._trees
        ok = torch.zeros(size, dtype=torch.bool)
        rights: list[list[tuple[int, int]]] = [[] for _ in range(size)]
        lefts: list[list[tuple[int, int]]] = [[] for _ in range(size)]
        fallback = self.vocab.byte_fallback_ids
        whole = [t for t, tree in trees.items() if t < size and self._text[t] is not None and t not in fallback]
        ok[whole] = True
        for t in whole:
            lefts[t], rights[t] = trees[t]
        lengths = torch.tensor([len(s) for s in lefts], dtype=torch.long)
        width = int(lengths.max()) if size else 0
        left_ids = torch.full((size, width), size, dtype=torch.long)
        left_ranks = torch.full((size, width), INF, dtype=torch.long)
        rows = torch.repeat_interleave(torch.arange(size), lengths)
        cols = torch.arange(len(rows)) - torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
        left_ids[rows, cols] = torch.tensor([y for s in lefts for y, _ in s], dtype=torch.long)
        left_ranks[rows, cols] = torch.tensor([r for s in lefts for _, r in s], dtype=torch.long)
        return ok, rights, left_ids, left_ranks

    @cached_property
    def _trees(self) -> dict[int, tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
        """``(left spine, right spine)`` of every id ``z`` whose piece BPE turns into ``z`` alone.

        Built from the parts up, not by running BPE on every piece: BPE of ``Z = X Y`` ends in ``[z]`` by the merge
        ``(x, y)`` iff BPE turns ``X`` into ``[x]`` and ``Y`` into ``[y]`` and no merge crosses their join before
        both are done (the sides then run as they would alone, the module docstring's join test with the pair
        ``(x, y)`` itself left out; BPE is deterministic, so at most one ``(x, y)`` of ``z`` passes). Pieces are
        taken shortest first, so ``x`` and ``y`` are settled before ``z``."""
        pieces = {i: p for p, i in self._ids.items()}
        made: dict[int, list[tuple[int, int, int]]] = {}
        for (x, y), (rank, z) in self._ranks.items():
            made.setdefault(z, []).append((rank, x, y))
        ranks = self._ranks
        trees: dict[int, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
        for z in sorted(pieces, key=lambda t: len(pieces[t])):
            if len(pieces[z]) == 1:
                if self._ids.get(pieces[z]) == z:
                    trees[z] = ([(z, INF)], [(z, INF)])
                continue
            for rank, x, y in made.get(z, ()):
                if x in trees and y in trees and not _crosses(ranks, trees[x][1], trees[y][0]):
                    trees[z] = ([(z, INF), (x, rank)] + trees[x][0][1:], [(z, INF), (y, rank)] + trees[y][1][1:])
                    break
        return trees

    @cached_property
    def _by_left(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The merges by left symbol: for ``x``, ``ys[offsets[x]:offsets[x + 1]]`` are the ``y`` of the merges
        ``(x, y)``, with their ranks in ``ranks``."""
        pairs = list(self._ranks.items())
        xs = torch.tensor([x for (x, _), _ in pairs], dtype=torch.long)
        ys = torch.tensor([y for (_, y), _ in pairs], dtype=torch.long)
        ranks = torch.tensor([rank for _, (rank, _) in pairs], dtype=torch.long)
        order = xs.argsort(stable=True)
        counts = torch.bincount(xs, minlength=len(self._text)) if len(xs) else torch.zeros(len(self._text),
                                                                                             dtype=torch.long)
        offsets = torch.zeros(len(counts) + 1, dtype=torch.long)
        offsets[1:] = counts.cumsum(0)
        return ys[order], ranks[order], offsets

    @cached_property
    def _reps(self) -> dict[bool, tuple[list[str], torch.Tensor]]:
        """Per ``A ends with an apostrophe``: the distinct join classes of the ids' texts, and each id's class."""
        out = {}
        for apostrophe in (False, True):
            index: dict[str, int] = {}
            of = torch.full((len(self._text),), -1, dtype=torch.long)
            for t, text in enumerate(self._text):
                if text:
                    of[t] = index.setdefault(_rep(text, apostrophe), len(index))
            out[apostrophe] = (list(index), of)
        return out

    def _pieces(self, text: str) -> list[int]:
        """The byte lengths of ``text``'s pre-tokens."""
        if self.kind == "none":
            return [len(text.encode("utf-8"))]
        # ByteLevel writes each byte as one character of GPT-2's alphabet
        return [len(p) for p, _ in self._tokenizer.pre_tokenizer.pre_tokenize_str(text)]

    # ------------------------------------------------------------ per previous token
    def join_classes(self, a_text: str) -> torch.Tensor:
        """``CLEAN``/``JOIN``/``OTHER`` of ``A B`` for every id ``b`` (``OTHER`` where ``b`` has no text)."""
        if self.kind == "none":
            return torch.tensor([OTHER if t is None else JOIN for t in self._text], dtype=torch.long)
        reps, of = self._reps[a_text.endswith("'")]
        size_a = len(a_text.encode("utf-8"))
        kinds = []
        for rep in reps:
            pieces = self._pieces(a_text + rep)
            kinds.append(JOIN if len(pieces) == 1 else CLEAN if pieces[0] == size_a and len(pieces) == 2 else OTHER)
        table = torch.tensor(kinds + [OTHER], dtype=torch.long)
        return table[of.where(of >= 0, torch.full_like(of, len(kinds)))]

    @cached_property
    def _occurrences(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The left spines inverted: for symbol ``y``, ``ids[offsets[y]:offsets[y + 1]]`` are the tokens whose left
        spine holds ``y``, with ``y``'s absorbing rank there in ``ranks``."""
        _, _, left_ids, left_ranks = self._spines
        size = len(self._text)
        ys, order = left_ids.flatten().sort(stable=True)
        keep = ys < size
        ys, order = ys[keep], order[keep]
        ids, ranks = order // left_ids.shape[1], left_ranks.flatten()[order]
        offsets = torch.zeros(size + 2, dtype=torch.long)
        offsets[1:size + 1] = torch.bincount(ys, minlength=size).cumsum(0)
        offsets[size + 1] = offsets[size]
        return ids, ranks, offsets

    def conflicts(self, a: int) -> torch.Tensor:
        """``True`` for every ``b`` with a merge across the join of ``a b`` that fires (the module docstring):
        for each ``x`` on ``a``'s right spine, the merges ``(x, y)`` meet the tokens whose left spine holds ``y``."""
        ids, ranks, offsets = self._occurrences
        out = torch.zeros(len(self._text), dtype=torch.bool)
        by_y, by_rank, by_x = self._by_left
        for x, r_x in self._spines[1][a]:
            lo, hi = int(by_x[x]), int(by_x[x + 1])
            if lo == hi:
                continue
            ys, merge = by_y[lo:hi], by_rank[lo:hi]
            live = merge < r_x
            ys, merge = ys[live], merge[live]
            starts, counts = offsets[ys], offsets[ys + 1] - offsets[ys]
            total = int(counts.sum())
            if not total:
                continue
            within = torch.arange(total) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
            where = torch.repeat_interleave(starts, counts) + within
            fires = torch.repeat_interleave(merge, counts) <= ranks[where]
            out[ids[where[fires]]] = True
        return out

    def after(self, a: int | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(exact, unsure)`` over every id ``b``: ``exact[b]`` iff ``encode(decode(a) decode(b)) == [a, b]``
        (``a=None``: ``encode(decode(b)) == [b]``), except where ``unsure[b]`` (a join with a text that is not its
        own encoding; an added token, or one that an added token's text may straddle): the slow test decides
        those. ``None`` where ``a`` is outside the fast test (not whole text, or not its own encoding)."""
        none = torch.zeros(len(self._text), dtype=torch.bool)
        if a is None:
            return self.first_ok.clone(), none
        text = self._text[a]
        ok = self._spines[0]
        if not text or not bool(self.first_ok[a]) or not (bool(ok[a]) or a in self._added):
            return None
        unsure = self._added_mask | self._straddled(text)
        if a in self._added:  # added tokens are split off before the pre-tokenizer: a clean join
            return self.first_ok.clone(), unsure
        kinds = self.join_classes(text)
        join = (kinds == JOIN) & ok
        exact = ((kinds == CLEAN) & self.first_ok) | (join & self.first_ok & ~self.conflicts(a))
        return exact, unsure | (join & ~self.first_ok)

    @cached_property
    def _added_mask(self) -> torch.Tensor:
        out = torch.zeros(len(self._text), dtype=torch.bool)
        out[list(self._added)] = True
        return out

    def _straddled(self, a_text: str) -> torch.Tensor:
        """Ids whose text starts with the rest of an added token's text that ``a_text`` ends with the start of."""
        out = torch.zeros(len(self._text), dtype=torch.bool)
        for word in self._added.values():
            for k in range(1, len(word)):
                if a_text.endswith(word[:k]):
                    out |= self._starting_with(word[k:])
        return out

    def _starting_with(self, head: str) -> torch.Tensor:
        hit = self._heads.get(head)
        if hit is None:
            hit = self._heads[head] = torch.tensor([bool(t) and t.startswith(head) for t in self._text])
        return hit


def _crosses(ranks: dict[tuple[int, int], tuple[int, int]], right: list[tuple[int, int]],
             left: list[tuple[int, int]]) -> bool:
    """Whether a merge ``(x, y)``, ``x`` on the right spine ``right``, ``y`` on the left spine ``left``, other than
    the merge of their roots, fires across the join: ``rank(x, y) < r(x)`` and ``rank(x, y) <= r(y)``."""
    for k, (x, r_x) in enumerate(right):
        for m, (y, r_y) in enumerate(left):
            hit = ranks.get((x, y))
            if hit is not None and hit[0] < r_x and hit[0] <= r_y and (k or m):
                return True
    return False


def _whole(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def pair_masks_for(vocab: Vocabulary) -> PairMasks | None:
    """The :class:`PairMasks` of ``vocab``, or ``None`` where its pipeline has no fast test (see the module
    docstring): no ``tokenizer.json``, a model other than BPE, a dummy prefix, another pre-tokenizer."""
    source: Callable[[], str] | None = vocab.tokenizer_json
    if source is None or vocab.dummy_prefix:
        return None
    text = source()
    data: Any = json.loads(text)
    if data.get("model", {}).get("type") != "BPE" or data["model"].get("ignore_merges"):
        return None
    if data["model"].get("continuing_subword_prefix") or data["model"].get("end_of_word_suffix"):
        return None
    kind = _pretokenizer_kind(data)
    return None if kind is None else PairMasks(vocab, data, kind, text)


__all__ = ["CLEAN", "JOIN", "OTHER", "PairMasks", "pair_masks_for"]
