"""Surprisal on Ray: ``ppl-tok surprisal FILE --out FILE --ray [ADDRESS] --workers K``.

The items not stored yet go, ``batch_items`` at a time, to K actors
(:class:`~ppl_tok.common.distributed.ActorPool`), each holding one LM; an actor
returns each item's units (:func:`~ppl_tok.strings.surprisal.surprisals`, the
single-process code) and the driver alone appends them to ``--out``, item by
item, as batches finish. A lost worker's batch is dealt again, a killed
driver's run resumes from ``--out``, and the command then prints every row in
item order, read back from the file. An item's figures do not depend on the
worker or on the other items (each item is one beam walk from BOS and the
context; the prefix cache only saves work), so the rows equal a single-process
run's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ppl_tok.common.distributed import ActorPool, connect
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.surprisal import WordRules, surprisals

#: One item to score: ``(item number, text, units)``; units as :func:`~ppl_tok.strings.surprisal.surprisals` takes.
Item = tuple[int, str, Any]


@dataclass(frozen=True)
class SurprisalJob:
    """What every item of a run shares (the keyword arguments of :func:`~ppl_tok.strings.surprisal.surprisals`)."""

    context: str = ""
    config: StringSearchConfig = field(default_factory=StringSearchConfig)
    rules: WordRules = field(default_factory=WordRules)
    wide: float = 3.0


def score_items(job: SurprisalJob, lm: LanguageModel, batch: Sequence[Item]) -> list[tuple[int, list[dict]]]:
    """An actor's work: each item's units as dicts (:meth:`~ppl_tok.strings.surprisal.UnitSurprisal.to_dict`)."""
    return [(item, [u.to_dict() for u in surprisals(lm, text, units=units, context=job.context, config=job.config,
                                                     rules=job.rules, wide=job.wide)])
            for item, text, units in batch]


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

    def stored(_c: int, result: list[tuple[int, list[dict]]], _seconds: float, _slot: int) -> None:
        for item, units in result:
            done(item, units)

    with ActorPool(loader, workers) as pool:
        pool.deal(batches, functools.partial(score_items, job), stored, max_retries=max_retries)
