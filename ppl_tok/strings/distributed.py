"""Surprisal on Ray: ``ppl-tok surprisal FILE --out FILE --ray [ADDRESS] --workers K``.

The items not stored yet go, ``batch_items`` at a time, to K actors
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
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ppl_tok.common.distributed import ActorPool, connect
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.surprisal import WordRules, surprisal_batch

#: One item to score: ``(item number, text, units)``; units as :func:`~ppl_tok.strings.surprisal.surprisals` takes.
Item = tuple[int, str, Any]


@dataclass(frozen=True)
class SurprisalJob:
    """What every item of a run shares (the keyword arguments of :func:`~ppl_tok.strings.surprisal.surprisals`)."""

    context: str = ""
    config: StringSearchConfig = field(default_factory=StringSearchConfig)
    rules: WordRules = field(default_factory=WordRules)
    wide: float = 3.0


def score_items(job: SurprisalJob, lm: LanguageModel, batch: Sequence[Item]
                ) -> list[tuple[int, list[dict] | None, str | None]]:
    """An actor's work: the batch's items walked together (:func:`~ppl_tok.strings.surprisal.surprisal_batch`),
    each as ``(item, units as dicts, None)`` or, where it failed, ``(item, None, the error's message)``."""
    found = surprisal_batch(lm, [text for _, text, _ in batch], units=[units for _, _, units in batch],
                            contexts=[job.context] * len(batch), config=job.config, rules=job.rules, wide=job.wide)
    return [(item, None, f"{type(rows).__name__}: {rows}") if isinstance(rows, Exception)
            else (item, [u.to_dict() for u in rows], None) for (item, _, _), rows in zip(batch, found)]


def surprisals_ray(loader: Callable[[], LanguageModel], job: SurprisalJob, items: Sequence[Item],
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
