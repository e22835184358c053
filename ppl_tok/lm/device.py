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

:func:`parse_device`, :func:`resolve_device` and :func:`resolve_dtype` turn the
names users give (``"cuda:1"``, ``"bfloat16"``) into torch's values, with errors
that name the argument: the one place device and dtype names are parsed.

:func:`synchronize`, :func:`reset_peak_memory` and :func:`peak_memory_mb` make
timings and memory figures device-true (a CUDA kernel launch returns before the
kernel runs; host RSS misses device memory).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from typing import Any

import torch

from ppl_tok.lm.spec import DTYPES

#: the label of the deliberate read in progress (see :func:`to_host`); read by :mod:`ppl_tok.lm.syncs`
READING: contextvars.ContextVar[str | None] = contextvars.ContextVar("ppl_tok_reading", default=None)


def parse_device(device: Any) -> torch.device:
    """``device`` (a name such as ``"cpu"``, ``"cuda:1"``, or a ``torch.device``) as a ``torch.device``.

    Only the name is checked; :func:`resolve_device` also checks that the device exists here.
    """
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}: expected e.g. 'cpu', 'cuda', 'cuda:0' or 'mps'") from err


def device_kind(device: Any) -> str:
    """The kind of a device as run folders record it: ``"cpu"``, ``"cuda"`` or ``"mps"`` (no index: the index
    changes no number, the kind does)."""
    return parse_device(device).type


def lm_identity(spec: dict[str, Any] | None) -> dict[str, Any]:
    """``backend``, ``dtype`` and the ``device`` kind of an ``LMSpec.to_dict()`` (all ``None`` without one).

    The device's kind (``"cpu"``, ``"cuda"``), not its index: the index changes no number, the kind does.
    """
    if spec is None:
        return {"backend": None, "dtype": None, "device": None}
    return {"backend": spec.get("backend"), "dtype": spec.get("dtype"),
            "device": device_kind(spec.get("device") or "cpu")}


def identity_of(lm: Any) -> dict[str, Any]:
    """The :data:`~ppl_tok.lm.spec.IDENTITY` of a loaded LM: its name, :func:`lm_identity` of its spec, its BOS id.

    ``model`` is the spec's model where the LM was loaded from one (``lm.name`` for an LM built in Python).
    """
    spec = getattr(lm, "spec", None)
    return {"model": spec.model if spec is not None else lm.name,
            **lm_identity(None if spec is None else spec.to_dict()), "bos_id": lm.bos_id}


def resolve_device(device: Any) -> torch.device:
    """A ``torch.device`` that exists on this machine (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``)."""
    dev = parse_device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} is not available: torch finds no CUDA GPU on this machine "
                             f"(torch {torch.__version__}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} is not available: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device {device!r} is not available on this machine; use --device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r} is not supported: use 'cpu', 'cuda' or 'mps'")
    return dev


def resolve_dtype(dtype: Any) -> torch.dtype:
    """A ``torch.dtype`` from ``"float32"``/``"bfloat16"``/``"float16"`` or one of those dtypes."""
    allowed = {name: getattr(torch, name) for name in DTYPES}
    if isinstance(dtype, torch.dtype):
        if dtype not in allowed.values():
            raise ValueError(f"dtype {dtype} is not one of {DTYPES}")
        return dtype
    if dtype not in allowed:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of {DTYPES} (or the torch dtype)")
    return allowed[dtype]


def dtype_name(dtype: Any) -> str:
    """The name (``"bfloat16"``) of a dtype given by name or as a ``torch.dtype`` (:func:`resolve_dtype`'s checks)."""
    return str(resolve_dtype(dtype)).removeprefix("torch.")


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
