"""``most-likely``: ``log p(v^ | c)`` of the most likely tokenization ``v^`` of an answer (the QA study's classifier).

(:func:`ppl_tok.infer.search.most_likely`, anytime branch and bound; the study stores each answer's
``"most-likely"`` record, ``ppl_tok.qa.run``.)
"""

from __future__ import annotations

from ppl_tok.scorings.registry import QUESTION, Scoring, register


@register
class MostLikely(Scoring):
    """A classifier over the answers' most likely tokenizations."""

    name = "most-likely"
    estimator = "the most likely tokenization (ppl_tok.infer.search)"
    levels = (QUESTION,)
    doc = "log p(v^ | c) of the most probable tokenization v^ of the answer"
    classifiers = ("most-likely",)
    record_kind = "most-likely"
