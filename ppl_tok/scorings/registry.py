"""The scorings: every way ppl-tok turns a text into one log-likelihood, each defined once.

A *scoring* names an estimator of ``log p(x | c)`` (or, for ``mixture``, of an
answer's log-probability among a question's answers). The same name means the
same estimator everywhere it is accepted:

* ``document`` level: a whole text, conditioned on BOS (``ppl-tok perplexity``,
  :func:`ppl_tok.perplexity.score_documents`, lm-eval's ``loglikelihood_rolling``);
* ``pair`` level: one (context, continuation) request (lm-eval's ``loglikelihood``);
* ``question`` level: the answers of a multiple-choice question, as classifiers
  of the QA study (``ppl-tok qa report``; their report names are
  :attr:`Scoring.classifiers`).

Every dispatcher looks a name up here (:func:`scoring`) and so rejects an
unknown one with a :class:`ValueError` naming the known ones. A new scoring is
one entry of :data:`SCORINGS` plus its implementation at each level it names.

Old names still accepted (:data:`ALIASES`, per level): ``marginal`` named the
byte-synchronous beam at the document level (stored perplexity run folders and
documented commands use it) and the importance-sampling estimate at the pair
level (documented ``--model_args``); they now mean ``beam`` and ``importance``.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCUMENT = "document"
PAIR = "pair"
QUESTION = "question"
LEVELS = (DOCUMENT, PAIR, QUESTION)
#: what the levels are, for error messages
LEVEL_NAMES = {DOCUMENT: "documents (perplexity, lm-eval loglikelihood_rolling)",
               PAIR: "(context, continuation) requests (lm-eval loglikelihood)",
               QUESTION: "multiple-choice questions (the QA study's classifiers)"}

NATS = "nats: log p(x | c)"


@dataclass(frozen=True)
class Scoring:
    """One scoring.

    :param name: its name (what ``--scoring``, ``scoring=`` and stored settings say).
    :param estimator: the estimator, and where it is implemented.
    :param levels: where it is defined (:data:`DOCUMENT`, :data:`PAIR`, :data:`QUESTION`).
    :param floor: whether it records a certified floor on ``log p(x | c)`` beside its figure
        (a lower bound that holds whatever the run's settings).
    :param ceiling: whether it records a certified ceiling (an upper bound) too.
    :param unit: what its figure is.
    :param doc: one line: what it computes.
    :param classifiers: the QA report's names of the classifiers built on it (``question`` level).
    """

    name: str
    estimator: str
    levels: tuple[str, ...]
    floor: bool
    ceiling: bool
    unit: str
    doc: str
    classifiers: tuple[str, ...] = ()


_TABLE = (
    Scoring("canonical", "the tokenizer's own tokenization v* (ppl_tok.lm.base.LanguageModel)",
            (DOCUMENT, PAIR, QUESTION), floor=False, ceiling=False, unit=NATS,
            doc="log p(v* | c), the canonical tokens only (documents: lm-eval's rolling windows)",
            classifiers=("canonical",)),
    Scoring("importance", "importance sampling, look-ahead proposal (ppl_tok.infer.importance.marginals)",
            (PAIR, QUESTION), floor=False, ceiling=False, unit=NATS,
            doc="log mean(p(v_i) / q(v_i)): the importance-sampling estimate of log p(x | c) over N particles "
                "(QA: 'marginal' uses the first k, k tuned; 'marginal-all' all N)",
            classifiers=("marginal", "marginal-all")),
    Scoring("beam", "the byte-synchronous beam (ppl_tok.strings.string_marginals, StringSearchConfig)",
            (DOCUMENT,), floor=True, ceiling=True, unit=NATS,
            doc="the mass of the tokenizations the beam found (a certified floor on log p(x | c)), with the "
                "pruned mass as a certified ceiling"),
    Scoring("prefix", "the LM over strings' prefix probability by the byte-synchronous beam "
                      "(ppl_tok.strings.events.string_events, StringSearchConfig)",
            (DOCUMENT,), floor=True, ceiling=True, unit=NATS,
            doc="log P(the output starts with x | c): every token sequence whose spelling starts with x, the last "
                "token allowed to run past its end; a certified bracket (the mass found, plus the pruned mass)"),
    Scoring("with-end", "the LM over strings' probability of the whole output by the byte-synchronous beam "
                        "(ppl_tok.strings.events.string_events, StringSearchConfig)",
            (DOCUMENT,), floor=True, ceiling=True, unit=NATS,
            doc="log P(the output is exactly x | c): every tokenization v of x times p(end | c, v), the end being "
                "EOS or another token without a surface; a certified bracket"),
    Scoring("mixture", "importance sampling, split into canonical and non-canonical answer distributions "
                       "(ppl_tok.qa.classify.mixture_scores)",
            (PAIR, QUESTION), floor=False, ceiling=False,
            unit="nats: log-probability of the answer among the question's answers",
            doc="log(alpha P_can + (1 - alpha) P_non), the paper's mixture (alpha: QA tuned, lm-eval 'alpha')",
            classifiers=("mixture",)),
    Scoring("canonical+rest", "the canonical term exact, importance sampling for the rest "
                              "(ppl_tok.infer.importance.marginals)",
            (DOCUMENT, PAIR, QUESTION), floor=True, ceiling=False, unit=NATS,
            doc="log(p(v* | c) + m), m the unbiased importance estimate of the non-canonical mass; the canonical "
                "term is its certified floor",
            classifiers=("canonical+rest",)),
    Scoring("exact", "the best-first certified bracket (ppl_tok.infer.search.marginal_bounds_many)",
            (PAIR, QUESTION), floor=True, ceiling=True, unit=NATS,
            doc="the midpoint of a certified bracket lower <= log p(x | c) <= upper (the upper bound where "
                "nothing was found)",
            classifiers=("exact",)),
    Scoring("stratified", "stratified importance sampling (guide 'stratified', ppl_tok.infer.importance)",
            (PAIR, QUESTION), floor=False, ceiling=False, unit=NATS,
            doc="the stratified estimate of log p(x | c): the enumerated part exact, the rest sampled",
            classifiers=("stratified",)),
    Scoring("conditional", "the LM over strings' conditional, canonical-head prefill by default "
                           "(ppl_tok.strings.conditional.conditionals_many)",
            (PAIR,), floor=True, ceiling=True, unit=NATS,
            doc="log p(x | c) = log P(c x) - log P(c) over strings: every tokenization of the context and of "
                "context plus continuation, tokens spanning the join included; a certified interval"),
    Scoring("canonical-local", "the LM over canonical tokenizations, locally normalised "
                               "(ppl_tok.infer.canonical_lm.canonical_lm_scores, mode 'local')",
            (DOCUMENT, PAIR), floor=False, ceiling=False, unit=NATS,
            doc="log l(v* | c) = log p(v* | c) - sum_t log Z_t: each step renormalised over the tokens that keep the "
                "prefix canonical (exact; never below canonical)"),
    Scoring("canonical-global", "the LM over canonical tokenizations, globally normalised "
                                "(ppl_tok.infer.canonical_lm.canonical_lm_scores, mode 'global')",
            (DOCUMENT, PAIR), floor=False, ceiling=False, unit=NATS,
            doc="log p(v* | c) + log Z(c v*) - log Z(c): P(the output starts with v* | the output canonical), the "
                "normalisers Z estimated by importance sampling with the local model as the proposal"),
    Scoring("most-likely", "the most likely tokenization (ppl_tok.infer.search)", (QUESTION,),
            floor=False, ceiling=False, unit=NATS,
            doc="log p(v^ | c) of the most probable tokenization v^ of the answer",
            classifiers=("most-likely",)),
)

#: Every scoring by name, in report order.
SCORINGS: dict[str, Scoring] = {s.name: s for s in _TABLE}

#: Old names still accepted, per level: ``{level: {old name: scoring}}``.
ALIASES: dict[str, dict[str, str]] = {DOCUMENT: {"marginal": "beam"}, PAIR: {"marginal": "importance"}}


def names(level: str) -> tuple[str, ...]:
    """The scorings defined at ``level``, in table order (aliases not included)."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}: expected one of {', '.join(LEVELS)}")
    return tuple(s.name for s in SCORINGS.values() if level in s.levels)


def accepted(level: str) -> tuple[str, ...]:
    """The names accepted at ``level``: :func:`names` and then the old names of :data:`ALIASES`."""
    return names(level) + tuple(ALIASES.get(level, {}))


def is_defined(name: str, level: str) -> bool:
    """Whether ``name`` (or an old name) is a scoring at ``level``."""
    return name in accepted(level)


def scoring(name: str, level: str) -> Scoring:
    """The scoring ``name`` (an old name resolved) at ``level``.

    :raises ValueError: ``name`` is not a scoring of ``level``; the message names it and the known ones.
    """
    known = names(level)
    resolved = ALIASES.get(level, {}).get(name, name)
    if resolved not in known:
        aliases = ALIASES.get(level, {})
        old = f" (old names: {', '.join(f'{a} = {b}' for a, b in aliases.items())})" if aliases else ""
        raise ValueError(f"unknown scoring {name!r} for {LEVEL_NAMES[level]}: expected one of "
                         f"{', '.join(known)}{old}")
    return SCORINGS[resolved]


def classifiers() -> tuple[str, ...]:
    """The QA report's classifier names, in report order."""
    return tuple(c for s in SCORINGS.values() if QUESTION in s.levels for c in s.classifiers)


def classifier_scoring(classifier: str) -> Scoring:
    """The scoring a QA classifier is built on.

    :raises ValueError: no scoring names ``classifier``.
    """
    for s in SCORINGS.values():
        if classifier in s.classifiers:
            return s
    raise ValueError(f"unknown QA classifier {classifier!r}: expected one of {', '.join(classifiers())}")


__all__ = ["ALIASES", "DOCUMENT", "LEVELS", "PAIR", "QUESTION", "SCORINGS", "Scoring", "accepted",
           "classifier_scoring", "classifiers", "is_defined", "names", "scoring"]
