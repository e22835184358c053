"""``conditional``: ``log p(x | c) = log P(c x) - log P(c)`` over strings, a certified interval.

``P`` is the LM over strings' prefix probability (every tokenization of the context and of context plus
continuation, tokens spanning the join included; :func:`ppl_tok.strings.conditional.conditionals_many`),
the context conditioned on as ``config.search.prefill`` says (default ``canonical-head``:
:mod:`ppl_tok.strings.prefill`). Free of the prompt boundary: the score is the same wherever whitespace sits
between context and continuation (the caller moves the context's trailing whitespace first,
:func:`ppl_tok.integrations.lm_eval.move_trailing_space`), and no continuation is ever empty of tokens.
Under lm-eval's ``loglikelihood_rolling`` (a document after BOS alone) it is ``prefix`` (:attr:`rolling`).

The event (``ScoringConfig.event``, :data:`~ppl_tok.strings.conditional.EVENTS`): ``"boundary"`` (the default)
scores the continuation followed by a boundary character or the end,

    log p(x, boundary | c) = log [ sum over b in B of P(c x b) + P(c x, end) ] - log P(c),

``B`` the word-end set of :class:`~ppl_tok.strings.units.WordRules` (ASCII whitespace and punctuation other
than ``'`` and ``-``), so an answer is not credited with every longer word it begins (" lever" with
" levers"); ``"prefix"`` scores ``log P(c x) - log P(c)``. Each score carries whether greedy byte decoding
writes the continuation under the same event (:attr:`~ppl_tok.scorings.pairs.PairScore.greedy`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.scorings.registry import ScoringConfig
from ppl_tok.scorings.pairs import Pair, PairScore
from ppl_tok.common.params import param
from ppl_tok.scorings.registry import PAIR, Scoring, SearchParams, register
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.conditional import CONDITIONAL_EXTEND_THRESHOLD, StringConditional, conditionals_many
from ppl_tok.strings.conditional_event import DEFAULT_EVENT, EventParams
from ppl_tok.strings.conditional_tree import conditionals_tree
from ppl_tok.strings.tree import SEARCHES, TokenTree, search_tree

LOG = logging.getLogger(__name__)


def conditional_scores(lm: LanguageModel, contexts: Sequence[str], continuations: Sequence[str],
                       config: StringSearchConfig, labels: Sequence[Any] | None = None, event: str = DEFAULT_EVENT,
                       greedy: bool = False, search: str | TokenTree = "walk") -> list[StringConditional]:
    """``log p(continuation | context)`` over strings of each request, every certified interval logged
    (logger ``ppl_tok.scorings.conditional``, level INFO).

    One batched walk (:func:`~ppl_tok.strings.conditional.conditionals_many`): the answers of a question
    share its context's walk; or, with ``search`` ``"tree"`` (or a :class:`~ppl_tok.strings.tree.TokenTree`), the
    token tree (:func:`~ppl_tok.strings.conditional_tree.conditionals_tree`, its own estimand).
    """
    tree = search_tree(search)
    if tree is None:
        results = conditionals_many(lm, list(contexts), list(continuations), config=config, event=event, greedy=greedy)
    else:  # the token tree's estimand (greedy not computed: None)
        results = conditionals_tree(lm, list(contexts), list(continuations), config=config, event=event, tree=tree)
    for i, r in enumerate(results):
        label = labels[i] if labels is not None else i
        LOG.info("request %s: log p(%r%s | %r) = %.6f, certified in [%.6f, %.6f]%s", label, r.text, ", boundary" if event == "boundary" else "", r.prompt[-40:],
                 r.estimate, r.lower, r.upper, "" if r.hint is None else f" ({r.hint})")
    return results


@dataclass(frozen=True)
class ConditionalParams(SearchParams, EventParams):
    """``conditional``'s search and event. Its defaults are lm-eval's and Python's alike: the context's canonical
    head prefilled (``prefill="canonical-head"``) and lazy extension at
    :data:`~ppl_tok.strings.conditional.CONDITIONAL_EXTEND_THRESHOLD`, none under ``prefill="exact"``; the event
    (:class:`~ppl_tok.strings.conditional_event.EventParams`, declared once: ``boundary``)."""

    documents = False

    prefill: str = param("canonical-head", "how the context is conditioned on (ppl_tok.strings.prefill)",
                         flag="--prefill", choices=("canonical-head", "exact", "auto"))
    searcher: str = param("walk", "how the events are found: walk (the byte-synchronous walk) or tree (one branch "
                          "per unit of the continuation off the canonical cache, its own estimand: "
                          "ppl_tok.strings.conditional_tree); lm-eval's search=", flag="--search",
                          choices=SEARCHES)

    @classmethod
    def expand(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`SearchParams.expand`, with ``search`` given as ``"walk"`` or ``"tree"`` taken as :attr:`searcher`."""
        out = dict(values)
        if isinstance(out.get("search"), str):
            if "searcher" in out:
                raise ValueError("give search or searcher, not both")
            out["searcher"] = out.pop("search")
        return super().expand(out)

    @property
    def lazy(self) -> dict[str, float | None]:
        """The shares given; else none under ``prefill="exact"`` or ``exhaustive``, else the measured share."""
        given = super().lazy
        if given or self.exhaustive or self.prefill == "exact" or any(
                getattr(self, f) is not None for f in ("extend_threshold", "boundary_threshold", "rejoin_threshold")):
            return given
        return {"extend_threshold": CONDITIONAL_EXTEND_THRESHOLD}


@register
class Conditional(Scoring):
    """The LM over strings' conditional of a request."""

    name = "conditional"
    estimator = "the LM over strings' conditional, canonical-head prefill by default (ppl_tok.strings.conditional.conditionals_many)"
    levels = (PAIR,)
    floor = ceiling = True
    doc = ("log p(x, boundary | c) over strings: the continuation then a boundary character or the end "
           "(event=prefix: log P(c x) - log P(c)), every tokenization of the context and of context plus "
           "continuation, tokens spanning the join included; a certified interval")
    rolling = "prefix"
    params = ConditionalParams
    settings_fields = ("event", "searcher")

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        results = conditional_scores(lm, [p.context for p in pairs], [p.continuation for p in pairs], config.search,
                                     labels=[(*p.group, p.choice) for p in pairs], event=config.event, greedy=True,
                                     search=config.searcher)
        return [PairScore(r.estimate, lower=r.lower, upper=r.upper, greedy=r.greedy) for r in results]
