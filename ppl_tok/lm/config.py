"""The engine's memory and batching limits (:class:`EngineConfig`), by default derived from the device's memory.

Words: a *forward call* runs one batch of rows (prefixes or one-token extensions) through the model; the
*KV blocks* are the KV pool's units of growth (:mod:`ppl_tok.lm.kvpool`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: Upper bounds of :class:`EngineConfig`'s byte budgets: beyond any one machine's memory, so a larger value
#: is a typo that would otherwise fail at first use with an allocator error naming no setting.
MAX_ENGINE_BYTES = 1 << 40
MAX_KV_BLOCK_BYTES = 1 << 36


@dataclass
class EngineConfig:
    """Memory and batching limits of an LM's engine (validated).

    The field defaults suit a CPU; :meth:`for_device` derives them from a GPU's memory.

    :param cache_bytes: the prefix cache's budget: the bytes of the KV entries of
        the cached prefixes (least recently used ones are evicted beyond it).
    :param row_bytes: the budget for full next-token rows kept in memory.
    :param max_batch: the most rows in one forward call (larger batches are split).
    :param particle_bytes: the KV memory the particles of one importance-sampling
        run may hold at once, counted at the worst case of one token per byte
        of text; :func:`~ppl_tok.infer.importance.marginals` runs larger workloads
        in groups of particles that fit (long texts: a few particles at a time).
    :param kv_block_bytes: the KV pool's unit of growth (:mod:`ppl_tok.lm.kvpool`):
        the pool overshoots what it uses by at most this; fewer, larger blocks
        mean fewer gather operations per forward call. On the CPU a block's pages are
        mapped only when its slots are first written, so the overshoot costs
        address space, not memory: the default, 1 GiB (about 23,000 SmolLM2
        positions in fp32), keeps a QA batch's past in one block, where a gather
        is one ``index_select`` (with 128 MiB blocks a 16-question batch spans three
        and two thirds of its gathered positions took the slower multi-block path).
    """

    cache_bytes: int = 2 << 30
    row_bytes: int = 64 << 20
    max_batch: int = 512
    particle_bytes: int = 3 << 29
    kv_block_bytes: int = 1 << 30

    @classmethod
    def for_device(cls, device: torch.device | str, model_bytes: int = 0, **overrides: Any) -> EngineConfig:
        """The defaults for ``device``, any field overridden by ``overrides``.

        The CPU (and MPS) get the class defaults. A CUDA device with ``M`` bytes of
        memory of which the model holds ``model_bytes`` leaves ``F = M - model_bytes``:
        the prefix cache and the particles may each hold ``F / 4``, the rows ``F / 32``,
        a KV block is ``F / 64`` (at least 128 MiB, at most 2 GiB), and a forward
        takes up to 1,024 rows (512 below 16 GiB free). On an 80 GB H100 with
        SmolLM2 that is 20 GB, 20 GB, 2.5 GB, 1.2 GB and 1,024.
        """
        from ppl_tok.lm.device import total_memory

        memory = total_memory(device)
        if memory is None:
            return cls(**overrides)
        free = max(memory - model_bytes, 1 << 30)
        derived = {"cache_bytes": free // 4, "particle_bytes": free // 4, "row_bytes": free // 32,
                   "kv_block_bytes": min(max(free // 64, 128 << 20), 2 << 30),
                   "max_batch": 1024 if free >= 16 << 30 else 512}
        return cls(**{**derived, **overrides})

    def __post_init__(self) -> None:
        if not isinstance(self.kv_block_bytes, int) or not 1 <= self.kv_block_bytes <= MAX_KV_BLOCK_BYTES:
            raise ValueError(f"kv_block_bytes must be a number of bytes in 1..{MAX_KV_BLOCK_BYTES} (64 GiB), "
                             f"got {self.kv_block_bytes!r}")
        if not isinstance(self.particle_bytes, int) or not 1 <= self.particle_bytes <= MAX_ENGINE_BYTES:
            raise ValueError(f"particle_bytes must be a number of bytes in 1..{MAX_ENGINE_BYTES} (1 TiB), "
                             f"got {self.particle_bytes!r}")
        for name in ("cache_bytes", "row_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= MAX_ENGINE_BYTES:
                raise ValueError(f"{name} must be a number of bytes in 0..{MAX_ENGINE_BYTES} (1 TiB), got {value!r}")
        if not isinstance(self.max_batch, int) or self.max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {self.max_batch!r}")
