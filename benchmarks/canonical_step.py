"""``python -m benchmarks canonical-step``: the CPU time to build a vocabulary's merge tables and its first step
mask (:mod:`ppl_tok.canonical_step.pairs`, what ``generate --canonical`` and the canonical LM pay once per
vocabulary), against :class:`PairMasks379ac78` (the build as of 379ac78: BPE run on every piece, the tables filled
one entry at a time), in one process, median of ``rounds``; and whether both give the same spines and masks."""

from __future__ import annotations

import json
import statistics
import time
from functools import cached_property
from typing import Any

import torch

from ppl_tok.canonical_step import CanonicalSteps
from ppl_tok.canonical_step.pairs import INF, PairMasks, _pretokenizer_kind
from ppl_tok.lm.cards import load_vocabulary

MODELS = ("gemma3-270m", "smollm2-135m")
#: the previous tokens whose step masks are compared (a word, a space, a newline, a letter)
WORDS = (" the", " ", "\n", "a")


class PairMasks379ac78(PairMasks):
    """:class:`~ppl_tok.canonical_step.pairs.PairMasks` with its tables built as at 379ac78 (the baseline)."""

    @cached_property
    def first_ok(self) -> torch.Tensor:
        ids = [i for i, t in enumerate(self._text) if t]
        out = torch.zeros(len(self._text), dtype=torch.bool)
        encs = self._tokenizer.encode_batch([self._text[i] for i in ids], add_special_tokens=False)
        for i, enc in zip(ids, encs):
            out[i] = list(enc.ids) == [i]
        return out

    @cached_property
    def _spines(self) -> tuple[torch.Tensor, list[list[tuple[int, int]]], torch.Tensor, torch.Tensor]:
        size = len(self._text)
        ok = torch.zeros(size, dtype=torch.bool)
        rights: list[list[tuple[int, int]]] = [[] for _ in range(size)]
        lefts: list[list[tuple[int, int]]] = [[] for _ in range(size)]
        pieces = {i: p for p, i in self._ids.items()}
        for t in range(size):
            piece = pieces.get(t)
            if piece is None or self._text[t] is None or t in self.vocab.byte_fallback_ids:
                continue
            result = self._bpe(piece)
            if result is not None and result[0] == t:
                ok[t] = True
                lefts[t], rights[t] = result[1], result[2]
        width = max(len(s) for s in lefts)
        left_ids = torch.full((size, width), size, dtype=torch.long)
        left_ranks = torch.full((size, width), INF, dtype=torch.long)
        for t, spine in enumerate(lefts):
            for k, (y, r) in enumerate(spine):
                left_ids[t, k], left_ranks[t, k] = y, r
        return ok, rights, left_ids, left_ranks

    def _bpe(self, piece: str) -> tuple[int, list[tuple[int, int]], list[tuple[int, int]]] | None:
        syms = []
        for c in piece:
            i = self._ids.get(c)
            if i is None:
                return None
            syms.append((i, [(i, INF)], [(i, INF)]))
        while len(syms) > 1:
            best = None
            for k in range(len(syms) - 1):
                hit = self._ranks.get((syms[k][0], syms[k + 1][0]))
                if hit is not None and (best is None or hit[0] < best[0]):
                    best = (hit[0], hit[1], k)
            if best is None:
                return None
            rank, z, k = best
            (_, l1, _), (_, _, r2) = syms[k], syms[k + 1]
            syms[k:k + 2] = [(z, [(z, INF), (l1[0][0], rank)] + l1[1:], [(z, INF), (r2[0][0], rank)] + r2[1:])]
        return syms[0]

    @cached_property
    def _by_left(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # type: ignore[override]
        table: dict[int, tuple[list[int], list[int]]] = {}
        for (x, y), (rank, _) in self._ranks.items():
            ys, rs = table.setdefault(x, ([], []))
            ys.append(y)
            rs.append(rank)
        by_x = {x: (torch.tensor(ys), torch.tensor(rs)) for x, (ys, rs) in table.items()}
        # the lay-out conflicts() reads now, from the dict of tensors as built at 379ac78
        size = len(self._text)
        offsets = torch.zeros(size + 1, dtype=torch.long)
        for x, (ys_, _) in by_x.items():
            offsets[x + 1] = len(ys_)
        offsets = offsets.cumsum(0)
        empty = torch.zeros(0, dtype=torch.long)
        ys = torch.cat([by_x[x][0] if x in by_x else empty for x in range(size)] or [empty])
        ranks = torch.cat([by_x[x][1] if x in by_x else empty for x in range(size)] or [empty])
        return ys, ranks, offsets


def _build(masks: PairMasks, steps: CanonicalSteps, first: int) -> torch.Tensor:
    """What a first step mask after ``first`` costs: the tables, then the mask (the ids it leaves unsure included)."""
    steps._fast = masks
    return steps.banned(((first,), (), False))


def _fresh(cls, vocab) -> PairMasks:
    """A :class:`PairMasks` of ``cls`` over ``vocab`` with nothing built yet (as
    :func:`~ppl_tok.canonical_step.pairs.pair_masks_for` makes it; at 379ac78 the tokenizer re-read ``data``)."""
    source = vocab.tokenizer_json()
    data = json.loads(source)
    kind = _pretokenizer_kind(data)
    assert kind is not None, vocab.name
    return cls(vocab, data, kind, None if cls is PairMasks379ac78 else source)


def bench_canonical_step(models: list[str], rounds: int = 3) -> dict[str, Any]:
    """Per model: CPU seconds of the tables and the first mask, now and at 379ac78 (median of ``rounds``), and
    whether the spines and the masks after :data:`WORDS` agree id for id."""
    rows = []
    for name in models:
        vocab = load_vocabulary(name)
        firsts = [vocab.encode(w)[0] for w in WORDS]
        times: dict[str, list[float]] = {"now": [], "379ac78": []}
        built: dict[str, PairMasks] = {}
        for _ in range(rounds):
            for label, cls in (("now", PairMasks), ("379ac78", PairMasks379ac78)):
                start = time.process_time()
                masks = _fresh(cls, vocab)
                _build(masks, CanonicalSteps(vocab), firsts[0])
                times[label].append(time.process_time() - start)
                built[label] = masks
        now, old = built["now"], built["379ac78"]
        same_spines = (torch.equal(now._spines[0], old._spines[0]) and now._spines[1] == old._spines[1]
                       and torch.equal(now._spines[2], old._spines[2]) and torch.equal(now._spines[3], old._spines[3]))
        same_masks = True
        for a in firsts:
            same_masks &= torch.equal(_build(now, CanonicalSteps(vocab), a), _build(old, CanonicalSteps(vocab), a))
            same_masks &= all(torch.equal(x, y) for x, y in zip(now.after(a), old.after(a)))
        rows.append({"model": name, "vocab_size": len(vocab), "rounds": rounds,
                     "cpu_s": statistics.median(times["now"]), "baseline_cpu_s": statistics.median(times["379ac78"]),
                     "speedup": statistics.median(times["379ac78"]) / statistics.median(times["now"]),
                     "same_spines": bool(same_spines), "same_masks": bool(same_masks)})
    return {"results": rows}


def format_canonical_step(result: dict[str, Any]) -> list[str]:
    lines = ["the merge tables and the first step mask (CPU s, median; baseline: 379ac78)",
             f"{'model':<14} {'ids':>8} {'379ac78':>8} {'now':>8} {'speedup':>8} {'same spines':>12} {'same masks':>11}"]
    for r in result["results"]:
        lines.append(f"{r['model']:<14} {r['vocab_size']:>8} {r['baseline_cpu_s']:>8.2f} {r['cpu_s']:>8.2f} "
                     f"{r['speedup']:>7.1f}x {str(r['same_spines']):>12} {str(r['same_masks']):>11}")
    return lines
