"""The string tasks on Ray: ``ppl-tok conditional|next|generate --input FILE --out DIR --ray`` and
``ppl-tok surprisal FILE --out DIR --ray``.

**Every task** (:func:`run_items_ray`). The same batches as a single process
(:func:`~ppl_tok.strings.batch.pending_batches`: fixed by position, so the prefill of a batch is the
same whatever is stored) go to actors that each hold the members (one LM or an ensemble:
:class:`MembersLoader`); an actor answers its batch (:func:`~ppl_tok.strings.batch.answer_batch`)
and the driver appends the records to the run folder. The folder's settings are computed by an
actor (the LMs' identities) before any batch is dealt, and are those a single-process run records,
so either kind of run resumes the other's folder (on the same kind of device). Surprisal's items (a task that
walks a batch together) are walked in lockstep within a batch only to share LM calls: an item's figures do not
depend on the worker or on the other items, up to float32 rounding of a batched forward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.common.distributed import ActorPool, connect
from ppl_tok.lm.loader import LMLoader
from ppl_tok.strings.batch import (BatchRun, Item, Members, Options, StringsStore, answer_batch, batch_settings,
                                   check_batch_size, pending_batches)

# ------------------------------------------------------------------ batch commands
@dataclass(frozen=True)
class MembersLoader:
    """Builds the members inside an actor: each LM from its loader, combined as the run asks."""

    loaders: tuple[LMLoader, ...]
    kind: str = "mixture"
    weights: tuple[float, ...] | None = None

    def __call__(self) -> Members:
        return Members(tuple(load() for load in self.loaders), self.kind, self.weights)


def _run_settings(task: str, options: Options, settings_args: dict[str, Any], members: Members, _: Any
                  ) -> dict[str, Any]:
    """An actor's answer to the driver's first question: the folder's settings, once ``--context`` is known
    to have a tokenization under every member."""
    from ppl_tok.mdd import compile_mdd

    if options.context:
        for lm in members.lms:
            try:
                compile_mdd(options.context, lm.vocab)
            except ValueError as err:
                raise ValueError(f"--context: {err}") from None
    return batch_settings(task, members, options, **settings_args)


def _answer(task: str, options: Options, members: Members, job: tuple[list[Item], list[Item]]
            ) -> list[dict[str, Any]]:
    chunk, todo = job
    return answer_batch(task, members, chunk, todo, options)


def run_items_ray(task: str, loader: MembersLoader, items: Sequence[Item], options: Options, *, out: str,
                  settings_args: dict[str, Any] | None = None, batch_size: int = 8, workers: int | None = None,
                  address: str | None = None, max_retries: int = 3,
                  on_records: Callable[[list[dict[str, Any]]], None] | None = None) -> BatchRun:
    """:func:`~ppl_tok.strings.batch.run_items` on ``workers`` Ray actors, the driver the single writer of ``out``.

    ``settings_args``: :func:`~ppl_tok.strings.batch.batch_settings`'s keyword arguments (``batch_size`` is
    this function's); ``on_records``: called in the driver with each batch's records as it is stored (in the
    order batches finish).
    """
    import time

    check_batch_size(batch_size)
    start = time.perf_counter()
    connect(address)
    computed = 0
    with ActorPool(loader, workers) as pool:
        settings = pool.call(functools.partial(_run_settings, task, options,
                                               {**(settings_args or {}), "batch_size": batch_size}), None)
        store = StringsStore.open(out, settings)
        try:
            done = {r["index"]: r for r in store.records}

            def stored(_c: int, records: list[dict[str, Any]], seconds: float, slot: int) -> None:
                nonlocal computed
                store.append(records, timing={"items": len(records), "seconds": seconds, "worker": slot})
                done.update((r["index"], r) for r in records)
                computed += len(records)
                if on_records is not None:
                    on_records(records)

            batches = pending_batches(items, set(done), batch_size)
            pool.deal(batches, functools.partial(_answer, task, options), stored, max_retries=max_retries)
        finally:
            store.close()
    return BatchRun.of(items, done, computed, start)
