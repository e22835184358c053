"""Perplexity over strings: bits per byte of a corpus under canonical or marginal scoring, certified floors.

See ``docs/perplexity.md``. :func:`read_corpus` reads documents,
:func:`score_documents` scores them, :func:`run_perplexity` scores a corpus
into a resumable store, :func:`corpus_figures` aggregates.
"""

from ppl_tok.perplexity.corpus import Corpus, CorpusError, Document, check_coverage, corpus_from_texts, read_corpus
from ppl_tok.perplexity.metrics import bits_per_byte, byte_perplexity, count_words, word_perplexity
from ppl_tok.scorings.documents import SCORINGS, DocumentScore, ScoringConfig, score_documents
from ppl_tok.scorings.windows import rolling_windows, text_windows

__all__ = ["SCORINGS", "Corpus", "CorpusError", "Document", "DocumentScore", "ScoringConfig", "bits_per_byte",
           "byte_perplexity", "check_coverage", "corpus_from_texts", "count_words", "read_corpus",
           "rolling_windows", "score_documents", "text_windows", "word_perplexity"]
