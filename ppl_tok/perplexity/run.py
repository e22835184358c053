"""Score a corpus, document batch by document batch, into a resumable store (or in memory).

Documents whose record is stored are skipped; the rest are scored in batches
of ``batch_docs`` and each batch's records are appended (durably) before the
next batch starts, so a kill loses at most the batch in progress. A document's
figures do not depend on the batch it was scored in (canonical scoring batches
positions, not sums; the marginal scorings run one document at a time), so a
resumed run stores what an uninterrupted one does. The progress bar counts
bytes (bytes/s), inside a document too where the scoring reports them (``beam``,
``prefix``, ``with-end`` as their sweeps go; ``canonical``, ``canonical-local`` and
``canonical-global`` as each forward's tokens are scored; ``canonical+rest`` as each window's
particles finish). ``beam``, ``prefix`` and ``with-end`` also save the state of a document in
progress every ``checkpoint_every`` seconds (``partial.jsonl``,
:mod:`ppl_tok.perplexity.partial`), and a resumed run goes on from there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.spec import LMSpec
from ppl_tok.perplexity.corpus import Corpus, Document, check_coverage
from ppl_tok.perplexity.partial import CHECKPOINT_SECONDS, open_partial
from ppl_tok.scorings.documents import score_documents
from ppl_tok.scorings.results import DocumentScore
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.perplexity.store import RECORDS_VERSION, PerplexityStore, check_documents, lm_identity


@dataclass(frozen=True)
class LMFacts:
    """What a run's settings need of its LM: its name, BOS id, window (:func:`~ppl_tok.scorings.documents.window_length`)
    and the :class:`~ppl_tok.lm.spec.LMSpec` it was loaded from (``None`` for an LM built in Python). Taken where the
    LM is (a Ray actor's, :mod:`ppl_tok.perplexity.distributed`), so the driver need not load one."""

    name: str
    bos_id: int | None
    window: int | None
    spec: LMSpec | None

    @classmethod
    def of(cls, lm: LanguageModel, config: ScoringConfig) -> LMFacts:
        from ppl_tok.scorings.documents import window_length

        return cls(lm.name, lm.bos_id, window_length(lm, config), lm.spec)


def run_settings(corpus: Corpus, model: str | None, config: ScoringConfig, lm: LanguageModel | LMFacts, *,
                 field: str | None = None, split: str = "none", spec: LMSpec | None = None) -> dict[str, Any]:
    """The ``run.json`` of a run: everything its records depend on (compared on resume, :mod:`.store`).

    ``lm``: the LM, or its :class:`LMFacts`. ``model``: its name as given (default: the LM's).
    ``"lm"``: the LM's :class:`~ppl_tok.lm.spec.LMSpec` as a dict (``spec``, else the one ``lm`` was
    loaded from, :func:`~ppl_tok.lm.cards.load_lm`; ``None`` for an LM built in Python), recorded for
    the reader; its ``backend``, ``dtype`` and device kind are also recorded at the top, compared
    (``None`` for an LM built in Python).
    """
    facts = lm if isinstance(lm, LMFacts) else LMFacts.of(lm, config)
    spec = spec if spec is not None else facts.spec
    from ppl_tok.common.version import __version__

    return {"corpus_sha256": corpus.sha256, "source": corpus.source, "documents": len(corpus),
            "bytes": corpus.n_bytes, "model": model or facts.name, "bos_id": facts.bos_id, **config.settings(),
            "window": facts.window, "records_version": RECORDS_VERSION,
            "ppl_tok_version": __version__, "field": field, "split": split,
            **lm_identity(None if spec is None else spec.to_dict()),
            "lm": None if spec is None else spec.to_dict()}


def open_run(out: str | Path, settings: dict[str, Any], corpus: Corpus) -> tuple[PerplexityStore,
                                                                                dict[int, DocumentScore]]:
    """The run folder ``out`` opened for ``settings`` (resumed, checked against ``corpus``'s documents), and the
    stored scores of ``corpus``'s documents (records of other documents stay in the folder, left out here)."""
    store = PerplexityStore.open(out, settings)
    try:
        check_documents(store, {d.index: d.n_bytes for d in corpus.documents})
    except BaseException:
        store.close()
        raise
    wanted = {d.index for d in corpus.documents}
    return store, {r["index"]: DocumentScore.from_record(r) for r in store.records if r["index"] in wanted}


def batch_timing(batch: Sequence[Document], seconds: float, **extra: Any) -> dict[str, Any]:
    """The ``timing.jsonl`` line of a batch of documents that took ``seconds``."""
    return {"documents": len(batch), "bytes": sum(d.n_bytes for d in batch), "seconds": seconds, **extra}


def progress_bar(corpus: Corpus, todo: Sequence[Document], config: ScoringConfig, enabled: bool) -> Any:
    """A tqdm bar over the corpus's bytes (bytes/s), started at those already stored (a no-op if not ``enabled``)."""
    from tqdm.auto import tqdm

    return tqdm(total=corpus.n_bytes, initial=corpus.n_bytes - sum(d.n_bytes for d in todo), unit="B",
                unit_scale=True, desc=f"perplexity ({config.scoring})", disable=not enabled)


def run_perplexity(lm: LanguageModel, corpus: Corpus, config: ScoringConfig, *, out: str | Path | None = None,
                   model: str | None = None, batch_docs: int = 8, progress: bool = True,
                   limit_seconds: float | None = None, field: str | None = None, split: str = "none",
                   spec: LMSpec | None = None, checkpoint_every: float = CHECKPOINT_SECONDS) -> list[DocumentScore]:
    """The scores of the documents of ``corpus`` (those stored in ``out`` first, then the rest), in document order.

    Exactly ``corpus``'s documents: records ``out`` holds of other documents (a run with a larger
    ``--limit``) are kept in the folder and left out of the result.

    ``spec``: how ``lm`` was loaded, recorded in ``run.json`` (default: ``lm.spec``).

    ``field``, ``split``: how the corpus was read (recorded for the reader of the folder).
    ``limit_seconds``: stop starting new batches after this long (the stored part is kept;
    the returned list then holds the documents scored so far).
    ``checkpoint_every``: seconds between two checkpoints of the documents in progress (with ``out``).
    """
    if batch_docs < 1:
        raise ValueError(f"batch_docs must be >= 1, got {batch_docs}")
    check_coverage(corpus, lm.vocab)
    config.implementation.check(lm)  # before a folder is made: a run that cannot score its first document
    store = None
    scores: dict[int, DocumentScore] = {}
    if out is not None:
        settings = run_settings(corpus, model, config, lm, field=field, split=split, spec=spec)
        store, scores = open_run(out, settings, corpus)
    try:
        partial = open_partial(store, checkpoint_every)
    except BaseException:
        if store is not None:
            store.close()
        raise
    todo = [d for d in corpus.documents if d.index not in scores]
    start = time.perf_counter()
    try:
        with progress_bar(corpus, todo, config, progress) as bar:
            for lo in range(0, len(todo), batch_docs):
                if limit_seconds is not None and time.perf_counter() - start > limit_seconds:
                    break
                batch = todo[lo: lo + batch_docs]
                t0 = time.perf_counter()
                shown = [0]  # the bytes of this batch the bar went past inside its documents

                def inside(n: int, bar: Any = bar, shown: list[int] = shown) -> None:
                    shown[0] += n
                    bar.update(n)

                done = score_documents(lm, batch, config, on_bytes=inside, partial=partial)
                if store is not None:
                    store.append([s.to_record() for s in done], timing=batch_timing(batch, time.perf_counter() - t0))
                scores.update((s.index, s) for s in done)
                bar.update(sum(d.n_bytes for d in batch) - shown[0])
    finally:
        partial.close()
        if store is not None:
            store.close()
    return [scores[i] for i in sorted(scores)]
