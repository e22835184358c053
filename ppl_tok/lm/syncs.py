"""Counting host <-> device transfers and synchronisations, on any device (the CPU included).

On a GPU the host queues kernels and runs ahead; it stops and waits for the
device (a *synchronisation*) whenever it needs a value the device computed, or
hands the device pageable memory to copy. On an H100 each costs microseconds
to tens of microseconds, which at small batches is more than the forward. The
engine is meant to synchronise only for its deliberate reads (the gathered
log-probs, the sampled tokens: :func:`ppl_tok.lm.device.to_host`), and to send
what the model needs in pinned, non-blocking copies
(:func:`ppl_tok.lm.device.to_device`).

:class:`TransferCounter` is a ``TorchFunctionMode`` that sees every torch call
and records, per call, what it would cost on a GPU:

* ``sync``: a device value read on the host (``.item()``, ``bool()``, ``int()``,
  ``float()``, ``.tolist()``, ``.cpu()``, ``.numpy()``); an op whose output size
  depends on device data (``nonzero``, ``unique``, ``masked_select``, indexing
  with a boolean mask, ...); a blocking host -> device copy (``.to(device)``
  without ``non_blocking``, ``torch.tensor(data, device=...)``); an op that mixes
  a host tensor with device tensors (indexing a device tensor by a host index
  copies it first, most other ops fail on CUDA);
* ``read:<label>``: a device -> host read made through ``to_host(t, label)``,
  the engine's deliberate ones;
* ``async``: a non-blocking host -> device copy (no wait).

Which tensors are "on the device"? On CUDA, those on it. On the CPU the host and
the device are the same memory, so the counter tracks *provenance*: the
model's parameters and buffers and the KV pool's blocks (:meth:`watch`), the
outputs of factories called with ``device=`` the model's device, of copies to
it, and of every op with such an input. Everything else is host data. So a CPU
run counts the transfers and synchronisations the same code makes on a GPU
(``tests/lm/test_syncs.py`` bounds them per engine step).
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ppl_tok.lm.device import READING

#: reads of a device value on the host
_READS = {"__bool__", "__int__", "__float__", "__index__", "__complex__", "item", "tolist", "cpu", "numpy",
          "__array__", "__format__", "__repr__"}
#: ops whose output size depends on the values: the host waits for them to know it
_DATA_SHAPED = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "_unique2", "nonzero_static"}
#: ops that index: a boolean mask index makes them data-shaped
_INDEXING = {"__getitem__", "__setitem__", "index_put", "index_put_", "index"}
_FACTORIES_FROM_DATA = {"tensor", "as_tensor", "asarray", "from_numpy"}


def _where() -> str:
    """``file:line`` of the innermost caller outside torch and this module."""
    frame = sys._getframe(2)
    here = __file__
    while frame is not None:
        name = frame.f_code.co_filename
        if name != here and "/torch/" not in name and "contextlib" not in name:
            return f"{name.rsplit('/', 2)[-2]}/{name.rsplit('/', 1)[-1]}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


#: code that runs on the host whatever the device (on the CPU, its ``device="cpu"`` means the host)
HOST_CODE = ("/pyro/",)


def _from_host_code() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and "/torch/" not in name and "contextlib" not in name:
            return any(h in name for h in HOST_CODE)
        frame = frame.f_back
    return False


class TransferCounter(TorchFunctionMode):
    """Counts what crosses between host and ``device`` while active (``with TransferCounter(device) as c``).

    :attr:`events` counts ``(kind, op, where)``; :attr:`syncs` is the number of
    synchronisations that are not deliberate reads, :attr:`reads` the deliberate
    ones by label, :attr:`async_copies` the non-blocking host -> device copies.
    """

    def __init__(self, device: torch.device | str):
        super().__init__()
        self.device = torch.device(device)
        self.provenance = self.device.type == "cpu"  # the CPU: track which tensors stand for device ones
        self._tagged: dict[int, weakref.ref] = {}
        self.events: Counter[tuple[str, str, str]] = Counter()

    # ------------------------------------------------------------ tagging
    def on_device(self, t: torch.Tensor) -> bool:
        if not self.provenance:
            return t.device == self.device or (t.device.type == self.device.type and self.device.index is None)
        ref = self._tagged.get(id(t))
        return ref is not None and ref() is t

    def _tag(self, t: torch.Tensor) -> None:
        key = id(t)
        try:
            self._tagged[key] = weakref.ref(t, lambda _, k=key, d=self._tagged: d.pop(k, None))
        except TypeError:  # a tensor type without weak references: cannot be followed
            pass

    def watch(self, *things: Any) -> TransferCounter:
        """Mark tensors (or the parameters and buffers of modules, or an LM's model, pool and rows) as on the device."""
        for thing in things:
            if isinstance(thing, torch.nn.Module):
                for t in list(thing.parameters()) + list(thing.buffers()):
                    self._tag(t)
            elif torch.is_tensor(thing):
                self._tag(thing)
            elif hasattr(thing, "model") and hasattr(thing, "pool"):  # an HFLanguageModel
                self.watch(thing.model)
                for block in thing.pool.blocks:
                    if block is not None:
                        self.watch(*block[0], *block[1])
                self.watch(*[s for s in thing.pool._scratch if s is not None])
                self.watch(*[s.rows for s in thing._rows.values() if s.rows is not None])
        return self

    # ------------------------------------------------------------ results
    @property
    def syncs(self) -> int:
        return sum(n for (kind, _, _), n in self.events.items() if kind == "sync")

    @property
    def reads(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for (kind, _, _), n in self.events.items():
            if kind.startswith("read:"):
                out[kind[5:]] += n
        return out

    @property
    def async_copies(self) -> int:
        return sum(n for (kind, _, _), n in self.events.items() if kind == "async")

    def report(self, kind: str = "sync") -> str:
        """One line per ``(op, where)`` of ``kind``, most frequent first."""
        rows = [(n, op, where) for (k, op, where), n in self.events.items() if k == kind]
        return "\n".join(f"{n:6d}  {op:22} {where}" for n, op, where in sorted(rows, reverse=True))

    def reset(self) -> None:
        self.events.clear()

    # ------------------------------------------------------------ the mode
    def _record(self, kind: str, op: str) -> None:
        if kind == "sync" and READING.get() is not None:
            kind = "read:" + READING.get()
        self.events[(kind, op, _where())] += 1

    def _is_device(self, spec: Any) -> bool:
        try:
            dev = torch.device(spec)
        except (RuntimeError, TypeError):
            return False
        return dev.type == self.device.type and (dev.index is None or self.device.index is None
                                                 or dev.index == self.device.index)

    def _target(self, args: tuple, kwargs: dict) -> Any:
        """The device a ``.to(...)`` call names (``None``: a dtype change only)."""
        if "device" in kwargs:
            return kwargs["device"]
        for a in args[1:]:
            if isinstance(a, (str, torch.device)):
                return a
            if torch.is_tensor(a):
                return a.device if not self.provenance or not self.on_device(a) else self.device
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = getattr(func, "__name__", str(func))
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if torch.is_tensor(t)]
        ondev = [t for t in tensors if self.on_device(t)]
        host = [t for t in tensors if not self.on_device(t) and t.dim() > 0]
        to_device = False
        if op in _READS and args and torch.is_tensor(args[0]) and self.on_device(args[0]):
            self._record("sync", op)
        elif op in ("to", "cuda") and args and torch.is_tensor(args[0]):
            target = self._target(args, kwargs) if op == "to" else "cuda"
            if target is not None and not self.on_device(args[0]) and self._is_device(target):
                to_device = True
                blocking = not kwargs.get("non_blocking", any(a is True for a in args[1:]))
                self._record("sync" if blocking else "async", op)
            elif target is not None and self.on_device(args[0]) and not self.provenance and not self._is_device(target):
                self._record("sync", op)
        elif op in _FACTORIES_FROM_DATA:
            if "device" in kwargs and self._is_device(kwargs["device"]) and not (self.provenance and _from_host_code()):
                to_device = True
                self._record("sync", op)
        elif op == "copy_" and len(args) >= 2 and torch.is_tensor(args[1]):
            dest, src = args[0], args[1]
            if self.on_device(dest) and not self.on_device(src):
                self._record("async" if kwargs.get("non_blocking", len(args) > 2 and args[2]) else "sync", op)
            elif not self.on_device(dest) and self.on_device(src):
                self._record("sync", op)
        elif ondev and op in _DATA_SHAPED:
            self._record("sync", op)
        elif ondev and op in _INDEXING and any(t.dtype == torch.bool and t.dim() > 0 for t in tensors[1:]):
            self._record("sync", op + "[bool mask]")
        elif ondev and op == "repeat_interleave" and "output_size" not in kwargs \
                and len(args) > 1 and torch.is_tensor(args[1]):
            self._record("sync", op)
        elif ondev and host:
            self._record("sync", op + "[host operand]")
        elif op == "where" and len(args) == 1 and ondev:
            self._record("sync", op)
        out = func(*args, **kwargs)
        made_here = "device" in kwargs and kwargs["device"] is not None and self._is_device(kwargs["device"]) \
            and op not in ("to",) and not (self.provenance and _from_host_code())
        if self.provenance and torch.is_tensor(out) and tensors and out is tensors[0] and (to_device or op == "cpu"):
            out = out.view(out.shape)  # the CPU returns the tensor itself: a new object stands for the copy
        read = op in _READS or (op == "copy_" and not self.on_device(args[0]))
        if (ondev or to_device or made_here) and not read:
            if not self.provenance:
                return out
            for t in tree_flatten(out)[0]:
                if torch.is_tensor(t):
                    self._tag(t)
        return out
