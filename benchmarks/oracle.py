"""What a search's gain costs when its paths are known in advance (``python -m benchmarks perplexity run --paths``).

A search over tokenizations (the byte-synchronous beam) ends with a set ``F`` of complete
tokenizations of each document, the canonical one ``v*`` among them, and its floor is
``log sum_{v in F} p(v)``; its *gain* over canonical scoring is that less ``log p(v*)``.
Scoring a set ``S`` of tokenizations (``v*`` in it) costs one token-forward per distinct
token prefix of its members, since paths that share a prefix share its rows:

    forwards(S) = | { v[:k] : v in S, 1 <= k <= len(v) } |,      forwards({v*}) = len(v*),

the canonical scoring's count. An *oracle* that knew ``F`` before running anything would
run only a subset of it. :func:`oracle_curve` finds, for each target share ``q`` of the
found gain summed over documents, a small such cost: greedily, over all documents at
once, it adds the path with the largest gain per new forward,

    (log(M_d + p(v)) - log M_d) / (len(v) - lcp(v, S_d)),

where ``M_d`` is the mass of document ``d``'s chosen set ``S_d`` and ``lcp`` the longest
prefix ``v`` shares with a path already chosen (``S_d``'s prefixes are closed under
taking prefixes, so its new forwards are the rest of ``v``). Greedy is not guaranteed
optimal (a knapsack with shared items), so the curve is an estimate of the least cost,
not a bound; it is what any rule that decides which paths to run could reach with
perfect foresight. A rule's own cost is that plus the forwards it spends on paths it
runs and then drops (docs/benchmarks.md: the three lazy shares against this curve).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ppl_tok.common.logspace import logsumexp

#: the shares of the found gain :func:`oracle_curve` reports by default
SHARES = (0.5, 0.75, 0.9, 0.99)


@dataclass(frozen=True)
class FoundPaths:
    """One document's complete tokenizations found by a search: ``paths`` as ``(tokens, log p)``, and the
    canonical tokenization (which must be among them)."""

    canonical: tuple[int, ...]
    paths: tuple[tuple[tuple[int, ...], float], ...]

    def __post_init__(self) -> None:
        if not self.canonical:
            raise ValueError("the canonical tokenization is empty")
        if not any(tuple(p) == tuple(self.canonical) for p, _ in self.paths):
            raise ValueError("the canonical tokenization is not among the found paths (a search always keeps it)")
        if not all(math.isfinite(lp) for p, lp in self.paths if tuple(p) == tuple(self.canonical)):
            raise ValueError("the canonical tokenization has no probability (log p must be finite)")
        bad = [lp for _, lp in self.paths if not lp <= 0.0]
        if bad:
            raise ValueError(f"a found path has log p = {bad[0]} (must be at most 0)")


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def oracle_curve(documents: Sequence[FoundPaths], shares: Sequence[float] = SHARES) -> dict:
    """The greedy oracle's cost (module docstring) for each share of the found gain, over all ``documents``.

    Returns ``canonical_forwards`` (sum of ``len(v*)``), ``gain_nats`` (the found gain summed),
    ``all_paths_forwards_ratio`` (every found path run: the cost of scoring ``F`` itself) and
    ``points``: per share ``q``, ``forwards_ratio`` (the oracle's forwards over canonical's) and
    ``gain_share`` (the share it reached, at least ``q``).
    """
    if not documents:
        raise ValueError("no documents to run the oracle on")
    if any(not 0 < q <= 1 for q in shares):
        raise ValueError(f"shares must be in (0, 1], got {list(shares)}")
    chosen: list[list[tuple[int, ...]]] = []
    mass: list[float] = []
    candidates: list[dict[tuple[int, ...], float]] = []
    canonical_forwards = 0
    gain = 0.0
    for d in documents:
        canon = tuple(d.canonical)
        own = {tuple(p): float(lp) for p, lp in d.paths}
        chosen.append([canon])
        mass.append(own.pop(canon))
        candidates.append({p: lp for p, lp in own.items() if lp > -math.inf})
        canonical_forwards += len(canon)
        gain += logsumexp([mass[-1], *candidates[-1].values()]) - mass[-1]

    def best_of(i: int) -> tuple[float, tuple[int, ...] | None, int]:
        top: tuple[float, tuple[int, ...] | None, int] = (-math.inf, None, 0)
        for p, lp in candidates[i].items():
            new = len(p) - max(_common_prefix(p, c) for c in chosen[i])
            score = (logsumexp([mass[i], lp]) - mass[i]) / max(new, 1)
            if score > top[0]:
                top = (score, p, new)
        return top

    best = [best_of(i) for i in range(len(documents))]
    extra, got, points = 0, 0.0, []
    targets = sorted(shares)
    while targets:
        i = max(range(len(documents)), key=lambda j: best[j][0])
        score, path, new = best[i]
        if path is None:
            break
        before = mass[i]
        mass[i] = logsumexp([mass[i], candidates[i].pop(path)])
        chosen[i].append(path)
        extra += new
        got += mass[i] - before
        best[i] = best_of(i)
        while targets and got >= targets[0] * gain * (1 - 1e-12):
            points.append({"share": targets.pop(0), "forwards_ratio": (canonical_forwards + extra) / canonical_forwards,
                           "gain_share": got / gain if gain > 0 else 1.0})
    every = sum(len({p[:k] for p in [tuple(d.canonical), *(tuple(q) for q, _ in d.paths)]
                     for k in range(1, len(p) + 1)}) for d in documents)
    for q in targets:  # no gain to find (every share is reached at the canonical cost)
        if gain <= 0:
            points.append({"share": q, "forwards_ratio": 1.0, "gain_share": 1.0})
    return {"documents": len(documents), "canonical_forwards": canonical_forwards, "gain_nats": gain,
            "all_paths_forwards_ratio": every / canonical_forwards, "points": points}


def oracle_of_rows(rows: Sequence[dict]) -> dict | None:
    """:func:`oracle_curve` over ``bench perplexity`` rows that kept their paths (``paths``, ``canonical_path``;
    ``None``: none did); ``documents_without_paths`` counts the others (rows measured without them, resumed)."""
    kept = [r for r in rows if "paths" in r]
    if not kept:
        return None
    out = oracle_curve([FoundPaths(tuple(r["canonical_path"]), tuple((tuple(p), lp) for p, lp in r["paths"]))
                        for r in kept])
    out["documents_without_paths"] = len(rows) - len(kept)
    return out


def format_oracle(o: dict) -> str:
    """One line: the oracle's cost at each share of the found gain."""
    left = o.get("documents_without_paths")
    return (f"oracle (the found paths holding a share of the gain, known in advance; {o['documents']} documents, "
            f"{o['gain_nats']:.1f} nats found): " + ", ".join(f"{p['share']:.0%} at {p['forwards_ratio']:.2f}x"
                                                             for p in o["points"])
            + f"; every found path at {o['all_paths_forwards_ratio']:.2f}x canonical's token-forwards"
            + (f" ({left} documents measured without --paths left out)" if left else ""))


__all__ = ["FoundPaths", "oracle_curve", "oracle_of_rows", "format_oracle", "SHARES"]
