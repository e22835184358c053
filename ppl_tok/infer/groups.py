"""How :func:`ppl_tok.infer.importance.marginals` splits a workload into runs of the engine that fit its memory.

A particle of text ``x`` holds at most ``len(x)`` token positions beyond its context; whole pairs are packed into
runs, and a pair too big alone runs in seeded chunks (:func:`chunk_seed`; docs/lm.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


#: One run of the engine: ``(pairs, particles per pair, their seeds)``.
Group = tuple[list[int], int, list[int] | None]


def particle_groups(texts: Sequence[str], num_samples: int, position_bytes: int,
                    budget: int, seeds: Sequence[int] | None = None) -> list[Group]:
    """Split a workload into runs whose particles' KV memory fits ``budget`` bytes.

    A particle of text ``x`` holds at most ``len(x)`` token positions (one per
    byte) beyond its context, ``position_bytes`` each. Whole pairs are packed
    into runs in order; a pair whose ``num_samples`` particles alone exceed the
    budget runs by itself in chunks of equal size (as few as fit), chunk ``c``
    drawing with seed :func:`chunk_seed` ``(seed, c)``; a pair that fits keeps
    its own seed, so grouping never changes its samples.
    """
    seeds = list(seeds) if seeds is not None else None
    cost = [num_samples * (len(t.encode("utf-8")) + 1) * position_bytes for t in texts]
    groups: list[Group] = []
    pending: list[int] = []
    used = 0

    def flush() -> None:
        nonlocal pending, used
        if pending:
            groups.append((pending, num_samples, None if seeds is None else [seeds[g] for g in pending]))
        pending, used = [], 0

    for g, c in enumerate(cost):
        if c > budget:
            flush()
            chunks = min(num_samples, math.ceil(c / budget))
            size = math.ceil(num_samples / chunks)
            sizes = [size] * (num_samples // size) + ([num_samples % size] if num_samples % size else [])
            for k, n in enumerate(sizes):
                groups.append(([g], n, None if seeds is None else [chunk_seed(seeds[g], k)]))
            continue
        if pending and used + c > budget:
            flush()
        pending.append(g)
        used += c
    flush()
    return groups


def chunk_seed(seed: int, chunk: int) -> int:
    """The seed of chunk ``chunk`` of a pair with seed ``seed`` that runs in chunks (31 bits)."""
    return (seed * 1_000_003 + 7_919 * (chunk + 1)) % (1 << 31)
