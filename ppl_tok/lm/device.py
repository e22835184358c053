"""What crosses between the host and the model's device, and the device's own clocks and memory.

The engine keeps everything the model reads on its device. What must cross
goes through two functions, so that it is visible (and countable,
:mod:`ppl_tok.lm.syncs`):

* :func:`to_device`: host -> device. On CUDA the host tensor is first copied
  into pinned (page-locked) memory and sent with ``non_blocking=True``: the copy
  is queued on the stream and the host does not wait. (A blocking copy from
  pageable memory waits for the stream to drain: a synchronisation.) On the CPU
  it returns the tensor itself.
* :func:`to_host`: device -> host, the engine's deliberate reads (the gathered
  log-probs, the sampled tokens); each waits for the device: a synchronisation.

:func:`synchronize`, :func:`reset_peak_memory` and :func:`peak_memory_mb` make
timings and memory figures device-true (a CUDA kernel launch returns before the
kernel runs; host RSS misses device memory).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

#: the label of the deliberate read in progress (see :func:`to_host`); read by :mod:`ppl_tok.lm.syncs`
READING: contextvars.ContextVar[str | None] = contextvars.ContextVar("ppl_tok_reading", default=None)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the host) on ``device``: pinned and non-blocking on CUDA, itself elsewhere.

    The host tensor must not be modified afterwards (the copy may still be in flight).
    """
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


@contextlib.contextmanager
def reading(label: str) -> Iterator[None]:
    """Mark the device -> host reads inside as the deliberate ones named ``label``."""
    token = READING.set(label)
    try:
        yield
    finally:
        READING.reset(token)


def to_host(tensor: torch.Tensor, label: str) -> torch.Tensor:
    """``tensor`` on the host (a synchronisation on a GPU): one of the engine's deliberate reads."""
    with reading(label):
        return tensor.cpu()


def synchronize(device: torch.device | str | None) -> None:
    """Wait for the device's queued work (CUDA); a no-op on the CPU."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device | str | None) -> None:
    """Start a new peak-memory measurement on ``device`` (CUDA; a no-op elsewhere)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device | str | None) -> float | None:
    """The most memory allocated on ``device`` since the last reset, in MiB (``None`` off CUDA)."""
    if device is not None and torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return None


def total_memory(device: torch.device | str | None) -> int | None:
    """The device's memory in bytes (CUDA; ``None`` for the CPU, whose budgets are the fixed defaults)."""
    if device is not None and torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    return None


def to_device_all(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Many host tensors on ``device`` in one copy per dtype (packed, then split into views there)."""
    if not tensors:
        return []
    out: list[torch.Tensor | None] = [None] * len(tensors)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    for members in by_dtype.values():
        packed = to_device(torch.cat([tensors[i].reshape(-1) for i in members]), device)
        at = 0
        for i in members:
            n = tensors[i].numel()
            out[i] = packed[at: at + n].view(tensors[i].shape)
            at += n
    return out  # type: ignore[return-value]
