"""Perplexity over strings: bits per byte of a corpus under canonical or marginal scoring, certified floors.

See ``docs/perplexity.md``. :func:`read_corpus` reads documents,
:func:`score_documents` scores them, :func:`run_perplexity` scores a corpus
into a resumable store, :func:`corpus_figures` aggregates.
"""

from typing import TYPE_CHECKING

from ppl_tok.common.lazy import lazy_names

#: each public name -> its module, imported on first use (:mod:`ppl_tok.common.lazy`)
_LAZY: dict[str, str] = {
    "Corpus": "ppl_tok.perplexity.corpus",
    "CorpusError": "ppl_tok.perplexity.corpus",
    "Document": "ppl_tok.perplexity.corpus",
    "check_coverage": "ppl_tok.perplexity.corpus",
    "corpus_from_texts": "ppl_tok.perplexity.corpus",
    "read_corpus": "ppl_tok.perplexity.corpus",
    "bits_per_byte": "ppl_tok.perplexity.metrics",
    "byte_perplexity": "ppl_tok.perplexity.metrics",
    "count_words": "ppl_tok.perplexity.metrics",
    "word_perplexity": "ppl_tok.perplexity.metrics",
    "score_documents": "ppl_tok.scorings.documents",
    "DocumentScore": "ppl_tok.scorings.results",
    "ScoringConfig": "ppl_tok.scorings.registry",
    "rolling_windows": "ppl_tok.scorings.windows",
    "text_windows": "ppl_tok.scorings.windows",
}

if TYPE_CHECKING:
    from ppl_tok.perplexity.corpus import Corpus, CorpusError, Document, check_coverage, corpus_from_texts, read_corpus
    from ppl_tok.perplexity.metrics import bits_per_byte, byte_perplexity, count_words, word_perplexity
    from ppl_tok.scorings.documents import score_documents
    from ppl_tok.scorings.results import DocumentScore
    from ppl_tok.scorings.registry import ScoringConfig
    from ppl_tok.scorings.windows import rolling_windows, text_windows

__all__ = ["Corpus", "CorpusError", "Document", "DocumentScore", "ScoringConfig", "bits_per_byte",
           "byte_perplexity", "check_coverage", "corpus_from_texts", "count_words", "read_corpus",
           "rolling_windows", "score_documents", "text_windows", "word_perplexity"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
