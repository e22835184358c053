"""The registry of scorings: every way ppl-tok turns a text into one log-likelihood, each a registered object.

A *scoring* names an estimator of ``log p(x | c)`` (or, for ``mixture``, of an
answer's log-probability among a question's answers). The same name means the
same estimator everywhere it is accepted:

* ``document`` level: a whole text, conditioned on BOS (``ppl-tok perplexity``,
  :func:`ppl_tok.perplexity.score_documents`, lm-eval's ``loglikelihood_rolling``);
* ``pair`` level: one (context, continuation) request (lm-eval's ``loglikelihood``);
* ``question`` level: the answers of a multiple-choice question, as classifiers
  of the QA study (``ppl-tok qa report``; their report names are
  :attr:`Scoring.classifiers`).

Each scoring is one :class:`Scoring` subclass in its own module of :mod:`ppl_tok.scorings`, registered once
(:func:`register`). Every consumer looks a name up here (:func:`scoring`), so rejects an unknown one with a
:class:`ValueError` naming the known ones, and calls the scoring's own method: a new scoring is one module and
one registration, whatever consumes it (docs/architecture.md, "Adding a scoring").

Old names still accepted (:data:`ALIASES`, per level): ``marginal`` named the
byte-synchronous beam at the document level (stored perplexity run folders and
documented commands use it) and the importance-sampling estimate at the pair
level (documented ``--model_args``); they now mean ``beam`` and ``importance``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ppl_tok.common.registry import Registry, class_registrar
from ppl_tok.strings.beam import StringSearchConfig

if TYPE_CHECKING:  # the registry and its names are read without torch (ppl-tok --help); a scoring runs with it
    from ppl_tok.lm.base import LanguageModel
    from ppl_tok.scorings.pairs import Pair, PairScore
    from ppl_tok.scorings.results import DocumentScore, ScoredText

DOCUMENT = "document"
PAIR = "pair"
QUESTION = "question"
LEVELS = (DOCUMENT, PAIR, QUESTION)
#: what the levels are, for error messages
LEVEL_NAMES = {DOCUMENT: "documents (perplexity, lm-eval loglikelihood_rolling)",
               PAIR: "(context, continuation) requests (lm-eval loglikelihood)",
               QUESTION: "multiple-choice questions (the QA study's classifiers)"}

NATS = "nats: log p(x | c)"


class Scoring:
    """One scoring: what it computes (its metadata) and how, at each level it is defined at.

    A scoring is a subclass that sets the class attributes below and implements the method of each of its
    ``levels``, registered once (:func:`register`); every consumer (perplexity, lm-eval, the QA study) finds it
    by name (:func:`scoring`) and calls the same method.

    * ``document`` level: :meth:`score_documents` (``log p(x | BOS)`` of whole texts, in windows);
    * ``pair`` level: :meth:`score_pairs` (``log p(continuation | context)`` of requests);
    * ``question`` level: the QA study's classifiers (:attr:`classifiers`), computed by the study from the
      records its run stores: the record of :attr:`record_kind`, or, where that is ``None``, the figures of
      :meth:`score_pairs` stored under the scoring's name (``ppl_tok.qa.run``).

    :cvar name: its name (what ``--scoring``, ``scoring=`` and stored settings say).
    :cvar estimator: the estimator, and where it is implemented.
    :cvar levels: where it is defined (:data:`DOCUMENT`, :data:`PAIR`, :data:`QUESTION`).
    :cvar floor: whether it records a certified floor on ``log p(x | c)`` beside its figure
        (a lower bound that holds whatever the run's settings).
    :cvar ceiling: whether it records a certified ceiling (an upper bound) too.
    :cvar unit: what its figure is.
    :cvar doc: one line: what it computes.
    :cvar classifiers: the QA report's names of the classifiers built on it (``question`` level).
    :cvar settings_fields: the :class:`ScoringConfig` fields its figures depend on
        beyond ``scoring`` and ``window`` (a run's stored settings: a resume under others is refused).
    :cvar rolling: what lm-eval's ``loglikelihood_rolling`` computes under this scoring where it is no
        document-level scoring itself (``None``: itself, or nothing).
    :cvar record_kind: the QA study's stored record its classifiers are computed from (``None``: the figures
        of :meth:`score_pairs`, stored under its name).
    :cvar checkpoints: whether :meth:`score_documents` takes ``partial=``, the checkpoints of a long walk that a
        stopped run resumes from (:class:`ppl_tok.perplexity.partial.Partial`).
    """

    name: ClassVar[str]
    estimator: ClassVar[str]
    levels: ClassVar[tuple[str, ...]]
    floor: ClassVar[bool] = False
    ceiling: ClassVar[bool] = False
    unit: ClassVar[str] = NATS
    doc: ClassVar[str] = ""
    classifiers: ClassVar[tuple[str, ...]] = ()
    settings_fields: ClassVar[tuple[str, ...]] = ()
    rolling: ClassVar[str | None] = None
    record_kind: ClassVar[str | None] = None
    checkpoints: ClassVar[bool] = False

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        """The figures of whole documents (``document`` level); ``on_bytes`` reports progress inside them."""
        raise NotImplementedError(f"scoring {self.name!r} has no document-level implementation")

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        """The figures of (context, continuation) requests (``pair`` level), in order."""
        raise NotImplementedError(f"scoring {self.name!r} has no request-level implementation")

    def check(self, lm: LanguageModel) -> None:
        """What the scoring needs of the LM, checked before a run makes its folder (a ``ValueError`` naming the
        fix); by default nothing."""

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        """What a run's stored figures depend on: the name, the window and :attr:`settings_fields`."""
        return {"scoring": self.name, "window": config.window,
                **{f: getattr(config, f) for f in self.settings_fields}}

    def __repr__(self) -> str:
        return f"<scoring {self.name!r} ({', '.join(self.levels)})>"


#: The built-in scorings' modules, in report order: each registers its scoring as it is imported, on the first use
#: of :data:`SCORINGS` (so that reading the registry's levels and defaults imports no scoring).
BUILT_IN: tuple[str, ...] = tuple(f"ppl_tok.scorings.{m}" for m in (
    "canonical", "importance", "beam", "events", "mixture", "canonical_rest", "exact", "stratified", "conditional",
    "canonical_lm", "most_likely"))

#: Every scoring by name, in registration (report) order (:class:`~ppl_tok.common.registry.Registry`);
#: :func:`register` adds to it.
SCORINGS: Registry[Scoring] = Registry("scoring", builtins=BUILT_IN)

#: Old names still accepted, per level: ``{level: {old name: scoring}}``.
ALIASES: dict[str, dict[str, str]] = {DOCUMENT: {"marginal": "beam"}, PAIR: {"marginal": "importance"}}


def _checked(scoring_class: type[Scoring]) -> Scoring:
    """An instance of ``scoring_class`` whose metadata are complete (:func:`register`)."""
    obj = scoring_class()
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{scoring_class.__qualname__}: set the class attribute name (a non-empty str)")
    if any(name in old for old in ALIASES.values()):
        raise ValueError(f"scoring {name!r} is an old name of another scoring (ppl_tok.scorings.ALIASES)")
    levels = getattr(obj, "levels", ())
    if not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"scoring {name!r}: levels must be some of {', '.join(LEVELS)}, got {levels!r}")
    for level, method in ((DOCUMENT, "score_documents"), (PAIR, "score_pairs")):
        if level in levels and getattr(scoring_class, method) is getattr(Scoring, method):
            raise ValueError(f"scoring {name!r} names the {level} level but does not implement {method}")
    if QUESTION in levels and not obj.classifiers:
        raise ValueError(f"scoring {name!r} names the {QUESTION} level but no classifiers")
    if QUESTION in levels and obj.record_kind is None and PAIR not in levels:
        raise ValueError(f"scoring {name!r}: a question-level scoring without a record kind is classified "
                         "through score_pairs; name the pair level too")
    return obj


#: Register a :class:`Scoring` subclass (a class decorator: ``@register``, or ``@register(replace=True)`` to shadow
#: a scoring of the same name, a built-in included); :func:`scoring` returns its instance. Raises ``ValueError``:
#: its name is another scoring's (without ``replace=True``) or an old name, its levels are empty or unknown, or it
#: names a level whose method it does not implement (or the question level without classifiers).
register = class_registrar(SCORINGS, _checked)


def unregister(name: str) -> None:
    """Remove a registered scoring (a test's toy scoring, say); the built-in it shadowed is registered again."""
    SCORINGS.unregister(name)


def names(level: str) -> tuple[str, ...]:
    """The scorings defined at ``level``, in registration order (aliases not included)."""
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


#: The lazy-extension shares of the ``beam`` scoring of documents by default (:class:`ScoringConfig`; the
#: ``extend_threshold``, ``boundary_threshold`` and ``rejoin_threshold`` of
#: :class:`~ppl_tok.strings.StringSearchConfig`): the cheapest setting that kept at least 90% of the exhaustive
#: beam's gain over canonical on held-out text (``benchmarks/perplexity_defaults.py``, docs/perplexity.md).
BEAM_LAZY_DEFAULT: dict[str, float | None] = {"extend_threshold": 0.2, "boundary_threshold": 1e-4,
                                              "rejoin_threshold": 1e-6}


def default_search(scoring_name: str, level: str = DOCUMENT, exhaustive: bool = False,
                   **beam: Any) -> StringSearchConfig:
    """The beam's search when none is given: :data:`BEAM_LAZY_DEFAULT`'s lazy extension for the ``beam`` scoring of
    documents, every kept prefix run otherwise (``exhaustive``, the other scorings, and requests). ``beam``: the
    other :class:`~ppl_tok.strings.StringSearchConfig` fields (``beam``, ``prune``, ``budget``)."""
    lazy = level == DOCUMENT and scoring_name == "beam" and not exhaustive
    return StringSearchConfig(**beam, **(BEAM_LAZY_DEFAULT if lazy else {}))


@dataclass(frozen=True)
class ScoringConfig:
    """What a scoring computes, at one level (validated); each scoring reads the fields it needs.

    :param scoring: a scoring's name at ``level`` (:mod:`ppl_tok.scorings`; old names resolved: ``marginal`` is
        ``beam`` for documents and ``importance`` for requests).
    :param window: positions per forward (``None``: the model's context length; no limit for toy LMs).
    :param search: the byte-synchronous beam of ``beam``, ``prefix``, ``with-end`` and ``conditional`` (its
        ``beam``, ``prune``, ``budget`` and lazy-extension shares). ``None`` (the default): :func:`default_search`,
        for the ``beam`` scoring of documents the lazy extension of :data:`BEAM_LAZY_DEFAULT` (within 90% of the
        exhaustive beam's gain at a fraction of its forwards, docs/perplexity.md), else
        :class:`~ppl_tok.strings.StringSearchConfig`'s defaults (every kept prefix run).
    :param exhaustive: run every kept prefix (lazy extension off: the search of ``search=None`` is
        :class:`~ppl_tok.strings.StringSearchConfig`'s defaults); a ``search`` with lazy extension is then an error.
    :param num_samples: importance particles (``canonical+rest``, ``importance``, ``stratified``, ``mixture``).
    :param seed: the seed the particles of (document, window) derive from (requests carry their own).
    :param exact_tolerance: ``exact``: the bracket's width at which the search stops (nats).
    :param exact_budget: ``exact``: the search's forwards at most.
    :param alpha: ``mixture``: the canonical distribution's weight.
    :param proposal: the importance proposal of ``canonical+rest``, ``importance`` and ``mixture``, a record of
        :func:`ppl_tok.proposals.proposal_settings` (``None``: the look-ahead); a learned one is stored in a run's
        settings with its file's checksum and weights.
    :param level: :data:`~ppl_tok.scorings.DOCUMENT` (perplexity, ``loglikelihood_rolling``) or
        :data:`~ppl_tok.scorings.PAIR` (``loglikelihood``).
    :param event: ``conditional``: what a continuation's probability is of, ``"boundary"`` (the continuation
        then a boundary character or the end) or ``"prefix"`` (the output begins with it);
        :data:`ppl_tok.strings.conditional.EVENTS`.
    """

    scoring: str = "canonical"
    window: int | None = None
    search: StringSearchConfig | None = None
    num_samples: int = 64
    seed: int = 0
    exact_tolerance: float = 1e-3
    exact_budget: int = 2000
    alpha: float = 0.5
    proposal: dict[str, Any] | None = None
    level: str = DOCUMENT
    exhaustive: bool = False
    event: str = "boundary"

    def __post_init__(self) -> None:
        from ppl_tok.strings.conditional import EVENTS

        if self.event not in EVENTS:
            raise ValueError(f"event must be one of {', '.join(EVENTS)}, got {self.event!r}")
        object.__setattr__(self, "scoring", scoring(self.scoring, self.level).name)  # old names resolved
        if not isinstance(self.exhaustive, bool):
            raise TypeError(f"exhaustive must be True or False, got {self.exhaustive!r}")
        if self.search is None:
            object.__setattr__(self, "search", default_search(self.scoring, self.level, self.exhaustive))
        if self.window is not None and (not isinstance(self.window, int) or self.window < 3):
            raise ValueError(f"window must be at least 3 positions (BOS, context, text), got {self.window!r}")
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(f"num_samples must be a positive integer, got {self.num_samples!r}")
        if not isinstance(self.search, StringSearchConfig):
            raise TypeError(f"search must be a StringSearchConfig, got {self.search!r}")
        if self.exhaustive and self.search.lazy:
            raise ValueError(f"exhaustive=True runs every kept prefix, but search has lazy extension "
                             f"({self.search.lazy_settings()}): give one or the other")
        if self.level == DOCUMENT and self.search.prune_against != "offset":
            raise ValueError(f"the beam scoring prunes against the offset only, got "
                             f"prune_against={self.search.prune_against!r}")
        if not (self.exact_tolerance > 0 and isinstance(self.exact_budget, int) and self.exact_budget >= 1):
            raise ValueError(f"exact_tolerance must be > 0 and exact_budget a positive integer, got "
                             f"{self.exact_tolerance!r}, {self.exact_budget!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha!r}")

    @property
    def implementation(self) -> Scoring:
        """The registered scoring this config names (:func:`ppl_tok.scorings.scoring`)."""
        return scoring(self.scoring, self.level)

    def settings(self) -> dict[str, Any]:
        """What the stored figures depend on (the store's settings; :meth:`ppl_tok.scorings.Scoring.settings`)."""
        return self.implementation.settings(self)


__all__ = ["ALIASES", "BEAM_LAZY_DEFAULT", "DOCUMENT", "LEVELS", "PAIR", "QUESTION", "SCORINGS", "Scoring",
           "ScoringConfig", "accepted", "classifier_scoring", "classifiers", "default_search", "is_defined", "names",
           "register", "scoring", "unregister"]
