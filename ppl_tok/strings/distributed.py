"""The strings commands on Ray: ``ppl-tok surprisal FILE --out FILE --ray`` and
``ppl-tok conditional|next|generate --input FILE --out DIR --ray``.

**Surprisal.** The items not stored yet go, ``batch_items`` at a time, to K actors
(:class:`~ppl_tok.common.distributed.ActorPool`), each holding one LM; an actor
returns each item's units (:func:`~ppl_tok.strings.surprisal.surprisal_batch`, the
single-process code: a batch's items walked together) and the driver alone appends them to ``--out``, item by
item, as batches finish. A lost worker's batch is dealt again, a killed
driver's run resumes from ``--out``, and the command then prints every row in
item order, read back from the file. An item's figures do not depend on the worker or on the other items (each item is its own beam
walk from BOS and the context, walked with its batch only to share LM calls; the prefix
cache only saves work), so the rows equal a single-process run's up to float32 rounding of a
batched forward. An item that fails (a byte no token covers) does not stop the others: every
other item is stored, then the run ends in an error naming the first failed item.

**Batch commands** (:func:`run_items_ray`). The same batches as a single process
(:func:`~ppl_tok.strings.batch.pending_batches`: fixed by position, so the prefill of a batch is the
same whatever is stored) go to actors that each hold the members (one LM or an ensemble:
:class:`MembersLoader`); an actor answers its batch (:func:`~ppl_tok.strings.batch.answer_batch`)
and the driver appends the records to the run folder. The folder's settings are computed by an
actor (the LMs' identities) before any batch is dealt, and are those a single-process run records,
so either kind of run resumes the other's folder (on the same kind of device).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ppl_tok.common.distributed import ActorPool, connect
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.lm.loader import LMLoader
from ppl_tok.strings.batch import (BatchRun, Item, Members, Options, StringsStore, answer_batch, batch_settings,
                                   check_batch_size, pending_batches)
from ppl_tok.strings.surprisal import WordRules, surprisal_batch

#: One item to score: ``(item number, text, units)``; units as :func:`~ppl_tok.strings.surprisal.surprisals` takes.
SurprisalItem = tuple[int, str, Any]


@dataclass(frozen=True)
class SurprisalJob:
    """What every item of a run shares (the keyword arguments of :func:`~ppl_tok.strings.surprisal.surprisals`)."""

    context: str = ""
    config: StringSearchConfig = field(default_factory=StringSearchConfig)
    rules: WordRules = field(default_factory=WordRules)
    wide: float = 3.0
    final: str | None = None


def score_items(job: SurprisalJob, lm: LanguageModel, batch: Sequence[SurprisalItem]
                ) -> list[tuple[int, list[dict] | None, str | None]]:
    """An actor's work: the batch's items walked together (:func:`~ppl_tok.strings.surprisal.surprisal_batch`),
    each as ``(item, units as dicts, None)`` or, where it failed, ``(item, None, the error's message)``."""
    found = surprisal_batch(lm, [text for _, text, _ in batch], units=[units for _, _, units in batch],
                            contexts=[job.context] * len(batch), config=job.config, rules=job.rules, wide=job.wide,
                            final=job.final)
    return [(item, None, f"{type(rows).__name__}: {rows}") if isinstance(rows, Exception)
            else (item, [u.to_dict() for u in rows], None) for (item, _, _), rows in zip(batch, found)]


def surprisals_ray(loader: Callable[[], LanguageModel], job: SurprisalJob, items: Sequence[SurprisalItem],
                   done: Callable[[int, list[dict]], None], *, workers: int | None = None,
                   address: str | None = None, batch_items: int = 4, max_retries: int = 3) -> None:
    """Score ``items`` on ``workers`` Ray actors; ``done(item, units)`` is called in the driver as each item's
    batch finishes (in the order batches finish), where the caller appends it to its store."""
    if batch_items < 1:
        raise ValueError(f"batch_items must be >= 1, got {batch_items}")
    if not items:
        return
    connect(address)
    batches = [list(items[lo: lo + batch_items]) for lo in range(0, len(items), batch_items)]

    failed: dict[int, str] = {}

    def stored(_c: int, result: list[tuple[int, list[dict] | None, str | None]], _seconds: float, _slot: int
               ) -> None:
        for item, units, error in result:
            if error is None:
                done(item, units)
            else:
                failed[item] = error

    with ActorPool(loader, workers) as pool:
        pool.deal(batches, functools.partial(score_items, job), stored, max_retries=max_retries)
    if failed:  # every other item is stored by now
        first = min(failed)
        raise ValueError(f"item {first}: {failed[first]}" + (f" ({len(failed) - 1} more items failed)"
                                                             if len(failed) > 1 else ""))


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
