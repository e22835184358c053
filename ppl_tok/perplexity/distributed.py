"""Perplexity on Ray: ``ppl-tok perplexity FILE --out DIR --ray [ADDRESS] --workers K``.

The driver reads the corpus, asks one actor for its LM's facts (name, BOS id,
window: :class:`~ppl_tok.perplexity.run.LMFacts`; the driver loads no LM) and
whether the LM covers every document's bytes, opens the run folder with the
settings a single-process run records (so either kind of run resumes the
other's folder), and deals the documents not stored yet, ``batch_docs`` at a
time, to K actors (:class:`~ppl_tok.common.distributed.ActorPool`), each holding
one LM. An actor returns a batch's records
(:func:`~ppl_tok.scorings.documents.score_documents`, the single-process code);
the driver appends them, the store's single writer. So: a batch is stored whole
or not at all; a lost worker's batch is dealt again (``max_retries``); a killed
driver's run resumes with the same command.

Figures. A document's records do not depend on the worker that scored it or
on the order batches finish in (``canonical+rest`` seeds its particles per
document and window). They can depend on which documents share a batch:
``canonical`` scores all windows of a batch in batched forwards, and a
transformer's float32 forward of a row differs by rounding with the batch it
runs in. With the toy LMs the records are equal to a single-process run's;
with SmolLM2 on the CPU they agree within :data:`TOLERANCE` nats per document
(docs/ray.md gives the measured differences).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ppl_tok.common.distributed import ActorPool, connect
from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.spec import LMSpec
from ppl_tok.perplexity.corpus import Corpus, CorpusError, Document, check_coverage
from ppl_tok.perplexity.run import LMFacts, batch_timing, open_run, progress_bar, run_settings
from ppl_tok.scorings.documents import DocumentScore, ScoringConfig, cap_prefix_cache, score_documents

#: The stated agreement of a Ray run's figures with a single-process run's, in nats per document (log-likelihood,
#: canonical and the beam's bracket): batched float32 forwards of another batch composition.
TOLERANCE = 1e-4


def describe(config: ScoringConfig, lm: LanguageModel, corpus: Corpus) -> LMFacts | str:
    """An actor's first work: the LM's facts, or the one-line message of a document it cannot score."""
    try:
        check_coverage(corpus, lm.vocab)
    except CorpusError as err:
        return str(err)
    return LMFacts.of(lm, config)


def score_batch(config: ScoringConfig, lm: LanguageModel, docs: Sequence[Document]) -> list[dict[str, Any]]:
    """An actor's work: the records of a batch of documents (the beam's prefix cache capped as a CLI run caps it)."""
    if config.scoring == "beam":
        cap_prefix_cache(lm)
    return [s.to_record() for s in score_documents(lm, docs, config)]


def run_perplexity_ray(loader: Callable[[], LanguageModel], corpus: Corpus, config: ScoringConfig, *,
                       out: str | Path, model: str | None = None, workers: int | None = None,
                       address: str | None = None, batch_docs: int = 8, progress: bool = True,
                       max_retries: int = 3, field: str | None = None, split: str = "none",
                       spec: LMSpec | None = None,
                       on_append: Callable[[Sequence[Document]], None] | None = None) -> list[DocumentScore]:
    """:func:`~ppl_tok.perplexity.run.run_perplexity` with the batches scored by ``workers`` Ray actors.

    :param loader: builds the LM inside each actor (picklable: :class:`~ppl_tok.lm.loader.LMLoader`).
    :param out: the run folder (required: the store is what makes a distributed run resumable).
    :param workers: actors (default: one per GPU of the cluster, else one per CPU); at most one per batch.
    :param address: the Ray cluster (default: a local Ray, unless Ray is already initialised here).
    :param max_retries: how often one batch may be lost to a dead worker before the run stops.
    :param on_append: called after each batch is stored (tests stop the driver with it).
    :returns: the scores of ``corpus``'s documents, in document order.
    """
    if batch_docs < 1:
        raise ValueError(f"batch_docs must be >= 1, got {batch_docs}")
    connect(address)
    with ActorPool(loader, workers) as pool:
        facts = pool.call(functools.partial(describe, config), corpus)
        if isinstance(facts, str):
            raise CorpusError(facts)
        settings = run_settings(corpus, model, config, facts, field=field, split=split, spec=spec)
        store, scores = open_run(out, settings, corpus)
        todo = [d for d in corpus.documents if d.index not in scores]
        batches = [todo[lo: lo + batch_docs] for lo in range(0, len(todo), batch_docs)]
        bar = progress_bar(corpus, todo, config, progress)
        last = time.perf_counter()

        def done(c: int, records: list[dict[str, Any]], worker_seconds: float, slot: int) -> None:
            nonlocal last
            now = time.perf_counter()
            store.append(records, timing=batch_timing(batches[c], now - last, worker_seconds=worker_seconds,
                                                      worker=slot))
            last = now
            scores.update((r["index"], DocumentScore.from_record(r)) for r in records)
            bar.update(sum(d.n_bytes for d in batches[c]))
            if on_append is not None:
                on_append(batches[c])

        try:
            pool.deal(batches, functools.partial(score_batch, config), done, max_retries=max_retries)
        finally:
            store.close()
            bar.close()
    return [scores[i] for i in sorted(scores)]
