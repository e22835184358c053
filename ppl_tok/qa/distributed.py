"""The QA study scaled out on Ray: ``ppl-tok qa run ... --ray [ADDRESS] [--workers K]``.

The driver opens the run folder (:class:`~ppl_tok.qa.store.ScoreStore`), finds
the questions whose records are not all stored, and deals them, in batches of
``batch_questions``, to K Ray actors, each holding one LM (one GPU each when
the cluster has GPUs). An actor only computes: it returns the records of a
batch (:func:`~ppl_tok.qa.run.score_batch`, the single-process code) and the
driver appends them. The store stays the single writer, so its guarantees
carry over unchanged:

* a batch is stored whole or not at all (one write, flush, fsync);
* a worker that dies (killed process, lost node) loses only its batch in
  flight: the driver starts a new actor in its place and deals the batch
  again (at most ``max_retries`` times per batch);
* a driver that dies loses the batches in flight; running the same command
  again computes only what is missing;
* every pair's particles have their own seed, so which worker scores a
  question, and in which order batches finish, does not change any number:
  the records (and ``qa report``) equal a single-process run's. Only the
  order of lines in ``scores.jsonl`` can differ.

``timing.jsonl`` gets, per batch, the driver's wall-clock seconds since the
previous append (so the report's questions/min is the cluster's throughput),
the actor's own seconds and the worker slot.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ppl_tok.common.distributed import (  # noqa: F401 - the names the QA study has always exported
    ActorPool,
    DistributedError,
    RayMissingError,
    check_address,
    connect,
    default_workers,
    import_ray,
)
from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.loader import LMLoader  # noqa: F401 - the loader --ray gives the actors
from ppl_tok.qa.data import Study
from ppl_tok.qa.run import Pending, batch_timing, pending_batches, progress_bar, score_batch
from ppl_tok.qa.store import ScoreStore


def _score(settings: dict[str, Any], lm: LanguageModel, batch: list[Pending]) -> list[dict[str, Any]]:
    """An actor's work: the records of one batch of pending questions (:func:`~ppl_tok.qa.run.score_batch`)."""
    return score_batch(lm, [item for item, _ in batch], settings, [todo for _, todo in batch])


def run_study_ray(study: Study, loader: Callable[[], LanguageModel], out: str | Path, settings: dict[str, Any], *,
                  workers: int | None = None, address: str | None = None, batch_questions: int = 8,
                  progress: bool = True, max_retries: int = 3,
                  on_append: Callable[[list[Pending]], None] | None = None) -> ScoreStore:
    """:func:`~ppl_tok.qa.run.run_study` with the batches scored by ``workers`` Ray actors
    (:class:`~ppl_tok.common.distributed.ActorPool`).

    :param loader: builds the LM inside each actor (picklable; :class:`LMLoader` for a card, folder or hub id).
    :param workers: actors (default: one per GPU of the cluster, else one per CPU); at most one per batch.
    :param address: the Ray cluster (``"auto"``, ``"ray://host:10001"``, ...; default: a local Ray,
        unless Ray is already initialised in this process).
    :param max_retries: how often one batch may be lost to a dead worker before the run stops.
    :param on_append: called after each batch is stored (tests use it to stop the driver mid-run).
    """
    connect(address)
    store = ScoreStore.open(out, settings)
    total, chunks = pending_batches(study, store, batch_questions)
    if not chunks:
        store.close()
        return store
    bar = progress_bar(study, total, chunks, enabled=progress)
    last = time.perf_counter()

    def done(c: int, records: list[dict[str, Any]], worker_seconds: float, slot: int) -> None:
        nonlocal last
        now = time.perf_counter()
        store.append(records, timing=batch_timing(chunks[c], now - last, worker_seconds=worker_seconds, worker=slot))
        last = now
        bar.update(len(chunks[c]))
        if on_append is not None:
            on_append(chunks[c])

    try:
        with ActorPool(loader, workers) as pool:
            pool.deal(chunks, functools.partial(_score, store.settings), done, max_retries=max_retries)
    finally:
        store.close()
        bar.close()
    return store


def benchmark(study: Study, loader: Callable[[], LanguageModel], settings: dict[str, Any], workers: list[int],
              folder: str | Path, *, batch_questions: int = 1) -> list[dict[str, Any]]:
    """Questions/min of a fresh Ray run of ``study`` with each number of ``workers`` (one run folder each).

    Wall-clock from the first dealt batch to the last append, so LM loading in
    the actors is included once per run; the actors' start-up is reported apart.
    """
    ray = connect()
    rows = []
    for k in workers:
        out = Path(folder) / f"workers-{k}"
        t0 = time.perf_counter()
        run_study_ray(study, loader, out, settings, workers=k, batch_questions=batch_questions, progress=False)
        wall = time.perf_counter() - t0
        questions = sum(len(qs) for qs in study.splits.values())
        rows.append({"workers": k, "questions": questions, "seconds": wall,
                     "questions_per_minute": 60 * questions / wall, "cpus": ray.cluster_resources().get("CPU")})
    return rows
