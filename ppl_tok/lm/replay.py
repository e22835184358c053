"""The raw baseline at the engine's own shapes: record the engine's forwards, replay them through the bare model.

A benchmark that compares the engine with "raw batched decoding" must give the
raw side the same work. The engine's forwards are ragged: forward ``k`` runs
rows ``i = 1..B_k``, each with a past of ``p_i`` positions and a chunk of
``c_i`` new tokens, laid out as ``[left pad][past_i][chunk_i][right pad]``
(width ``W_k = max_i p_i`` for the past, ``T_k = max_i c_i`` for the chunks);
the logits are kept at each chunk's last token (or at every position) and
log-softmaxed. :func:`recording` records ``(p, c, last_only)`` for every forward
of an :class:`~ppl_tok.lm.hf.HFLanguageModel`, and the time the engine spent in
them (building the inputs, the KV pool's gathers and writes, the model, the
log-softmax). :func:`replay` runs the same forwards on the model alone, the way
a plain ``transformers`` decoding loop does: the past in a ``DynamicCache``
(each layer's ``[B_k, heads, W_k, head_dim]`` made beforehand, out of the
timing, and concatenated with the new entries by the cache itself), the same
``input_ids`` shape, the same attention mask and position ids, the same kept
logits and the same ``log_softmax``. So

.. math::

    \\text{ratio} = \\frac{\\sum_k \\sum_i c_i / t_\\text{engine}}{\\sum_k \\sum_i c_i / t_\\text{replay}}
                  = \\frac{t_\\text{replay}}{t_\\text{engine}}

isolates what the engine adds to the model: with ``t_engine`` the time inside
its forwards, the pool's overhead; with the whole run's time, everything
(the MDD walks, Pyro, the cache) as well. Both sides are timed on the wall
clock and, for a CPU shared with other jobs (where the wall clock measures the
scheduler as much as the work), on the process's CPU clock too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ppl_tok.lm.device import synchronize, to_device_all


@dataclass(frozen=True)
class ForwardShape:
    """One engine forward: each row's past length and number of new tokens, and whether only the last
    token's logits were kept."""

    pasts: tuple[int, ...]
    chunks: tuple[int, ...]
    last_only: bool

    @property
    def forwards(self) -> int:
        """Token positions run through the model (the engine's ``stats.forwards`` of this call)."""
        return sum(self.chunks)


@dataclass
class Recording:
    """What :func:`recording` saw: the forwards in order and the seconds spent in them (wall clock,
    and this process's CPU time)."""

    shapes: list[ForwardShape] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def forwards(self) -> int:
        return sum(s.forwards for s in self.shapes)


@contextmanager
def recording(lm: Any) -> Iterator[Recording]:
    """Record every pooled forward of ``lm`` (an :class:`~ppl_tok.lm.hf.HFLanguageModel`) while inside.

    The time of a forward runs from the call of ``_pool_forward`` to the end of
    the ``log_softmax`` of its logits (the device synchronised at both ends).
    """
    if not getattr(lm, "pooled", False):
        raise ValueError(f"{lm.name}: only attention models run on the KV pool; a recurrent model has no "
                         "padded forward to replay")
    rec = Recording()
    forward, log_softmax = lm._pool_forward, lm._log_softmax

    def timed(fn, *args, **kwargs):
        synchronize(lm.device)
        start, cpu = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        synchronize(lm.device)
        rec.seconds += time.perf_counter() - start
        rec.cpu_seconds += time.process_time() - cpu
        return out

    def pool_forward(parents, chunks, last_only):
        rec.shapes.append(ForwardShape(tuple(0 if p is None else len(p) for p in parents),
                                       tuple(len(c) for c in chunks), bool(last_only)))
        return timed(forward, parents, chunks, last_only)

    lm._pool_forward = pool_forward
    lm._log_softmax = lambda logits: timed(log_softmax, logits)
    try:
        yield rec
    finally:
        del lm._pool_forward, lm._log_softmax


def _past_layout(model: Any, device: torch.device) -> list[tuple[tuple[int, int], torch.dtype]]:
    """``((heads, head_dim), dtype)`` of each layer's cached keys, read off a one-token forward."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), past_key_values=cache, use_cache=True)
    return [((layer.keys.shape[1], layer.keys.shape[3]), layer.keys.dtype) for layer in cache.layers]


def model_inputs(shape: ForwardShape, vocab_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The host tensors of a forward of ``shape``, laid out as the engine lays them out (random token ids)."""
    batch, width, steps = len(shape.pasts), max(shape.pasts), max(shape.chunks)
    mask = torch.zeros(batch, width + steps, dtype=torch.bool)
    ids = torch.randint(vocab_size, (batch, steps), generator=generator)
    for i, (p, c) in enumerate(zip(shape.pasts, shape.chunks)):
        mask[i, width - p:] = True  # the right pads too, as the engine masks them (no real position sees them)
    positions = torch.tensor(shape.pasts).unsqueeze(1) + torch.arange(steps).unsqueeze(0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


@dataclass
class Replayed:
    """The time the bare model took for the recorded forwards: wall clock and this process's CPU time."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0


@torch.inference_mode()
def replay(lm: Any, shapes: list[ForwardShape], seed: int = 0, on_call: Any = None) -> Replayed:
    """The time the bare model takes for ``shapes``: each forward as a plain ``transformers`` call on a
    ``DynamicCache`` holding a padded past, then ``log_softmax`` of the kept logits.

    ``on_call(kwargs)``, if given, sees each call's arguments before it runs (tests compare them with the engine's).
    """
    from transformers.cache_utils import DynamicCache

    model, device = lm.model, lm.device
    layout = _past_layout(model, device)
    vocab = model.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(seed)
    keep_arg = getattr(lm, "_keep_arg", None)
    total = Replayed()
    for shape in shapes:
        host = model_inputs(shape, vocab, gen)
        kwargs: dict[str, Any] = dict(zip(host, to_device_all(list(host.values()), device)))
        batch, width, steps = len(shape.pasts), max(shape.pasts), max(shape.chunks)
        last = cols = None
        if shape.last_only and steps > 1:  # the logits at each chunk's last token, as the engine keeps them
            last = torch.tensor([c - 1 for c in shape.chunks])
            if keep_arg:
                keep = torch.unique(last)
                last = torch.searchsorted(keep, last)
                kwargs[keep_arg] = to_device_all([keep], device)[0]
            cols = to_device_all([last], device)[0]
        elif shape.last_only and keep_arg:
            kwargs[keep_arg] = 1
        cache = DynamicCache()
        if width:
            for li, ((heads, dim), dtype) in enumerate(layout):
                past = torch.zeros(batch, heads, width, dim, dtype=dtype, device=device)  # values: no matter
                cache.update(past, past.clone(), li)
        kwargs.update(past_key_values=cache, use_cache=True)
        if on_call is not None:
            on_call(kwargs)
        synchronize(device)
        start, cpu = time.perf_counter(), time.process_time()
        logits = model(**kwargs).logits
        if shape.last_only:
            logits = logits[:, -1] if cols is None else logits[torch.arange(batch, device=device), cols]
        torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1)  # a plain loop's
        synchronize(device)
        total.seconds += time.perf_counter() - start
        total.cpu_seconds += time.process_time() - cpu
        del cache, kwargs
    return total
