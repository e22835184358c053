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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ppl_tok.common.params import NoParams, Params, settings as param_settings, specs, split_values
from ppl_tok.common.registry import Registry, class_registrar
from ppl_tok.scorings.records import CORE, PAIR_SCORE_FIELDS, Check, Item
from ppl_tok.scorings.params import (BEAM_LAZY_DEFAULT, DEFAULT_SAMPLES, LAZY_FIELDS, SearchParams,  # noqa: F401
                                     check_limits, proposal_param, proposal_value, samples_param, seed_param)

if TYPE_CHECKING:  # the registry and its names are read without torch (ppl-tok --help); a scoring runs with it
    import numpy as np

    from ppl_tok.lm.base import LanguageModel
    from ppl_tok.scorings.classify import SplitScores
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
    * ``question`` level: the QA study's classifiers (:attr:`classifiers`), through its QA hooks (defaults that
      serve a scoring stored as its :meth:`score_pairs` figures, so that a new one needs nothing more):
      what ``qa run`` stores per question (:attr:`record_kind`, :attr:`record_fields`, :meth:`question_records`)
      and how ``qa report`` classifies a question from it (:attr:`record_arrays`, :meth:`classify`, and
      :meth:`question_columns`, :meth:`report_section`, :meth:`report_markdown` for what it adds to the report).

    :cvar name: its name (what ``--scoring``, ``scoring=`` and stored settings say).
    :cvar estimator: the estimator, and where it is implemented.
    :cvar levels: where it is defined (:data:`DOCUMENT`, :data:`PAIR`, :data:`QUESTION`).
    :cvar floor: whether it records a certified floor on ``log p(x | c)`` beside its figure
        (a lower bound that holds whatever the run's settings).
    :cvar ceiling: whether it records a certified ceiling (an upper bound) too.
    :cvar searched_floor: whether its certified floor on ``log p(x | c)`` is the mass of the tokenizations a search
        found, so grows with the search's settings: ``perplexity-report --compare`` compares runs of such scorings
        (the gain each certifies over the canonical path, for its forwards) and ``--importance`` sets an estimate
        against such a floor (``prefix`` and ``with-end`` bound other events than ``x``).
    :cvar estimate_field: the key of its document records' ``extra`` holding a plain (uncertified) estimate of
        ``log p(x | c)``, which ``perplexity-report --importance`` sets against a searched floor; ``None``: none.
    :cvar unit: what its figure is.
    :cvar doc: one line: what it computes.
    :cvar classifiers: the QA report's names of the classifiers built on it (``question`` level).
    :cvar params: its own parameters, a frozen :class:`~ppl_tok.common.params.Params` dataclass (each field's
        default, help, flag and check; :class:`NoParams` by default): ``--scoring NAME`` takes their flags,
        lm-eval's ``scoring=NAME`` their ``--model_args``, ``ScoringConfig(NAME, field=...)`` their values, and
        :meth:`settings` records them (:mod:`ppl_tok.common.params`).
    :cvar settings_fields: the fields of :attr:`params` its figures depend on, beyond ``scoring`` and ``window``
        (a run's stored settings: a resume under others is refused); ``None`` (the default): every field.
    :cvar rolling: what lm-eval's ``loglikelihood_rolling`` computes under this scoring where it is no
        document-level scoring itself (``None``: itself, or nothing).
    :cvar record_kind: the QA study's stored record its classifiers are computed from:
        :data:`~ppl_tok.scorings.records.CORE` (the study's own record, always stored), a kind of its own (stored
        by :meth:`question_records` when ``qa run --scores`` names it), or ``None`` (the default: the figures of
        :meth:`score_pairs`, stored under its name; :attr:`stored_kind`).
    :cvar record_fields: per answer, the fields of its record and their checks (``qa run``'s store refuses a record
        that fails one, naming the line); default :data:`~ppl_tok.scorings.records.PAIR_SCORE_FIELDS`.
    :cvar record_arrays: the fields of its record ``qa report`` reads into ``[Q, C]`` arrays
        (``SplitScores.optional[stored_kind][field]``), each with its type (``float``: a log, ``-inf`` padded;
        ``bool``: ``False`` padded); default ``{"estimate": float}``.
    :cvar deterministic: whether its classifiers' scores are a function of the LM and the question alone (no sampled
        particles, tuned constants or time budget): ``qa ensemble --sources`` offers them (:func:`ensemble_sources`).
    :cvar baseline: whether its figure is the canonical figure itself (a report then shows no gain over it).
    :cvar canonical_label: what the canonical figure beside its own is called in a report (``with-end``'s
        includes the end: ``canonical+end``).
    :cvar checkpoints: whether :meth:`score_documents` takes ``partial=``, the checkpoints of a long walk that a
        stopped run resumes from (:class:`ppl_tok.perplexity.partial.Partial`).
    """

    name: ClassVar[str]
    estimator: ClassVar[str]
    levels: ClassVar[tuple[str, ...]]
    floor: ClassVar[bool] = False
    ceiling: ClassVar[bool] = False
    searched_floor: ClassVar[bool] = False
    estimate_field: ClassVar[str | None] = None
    unit: ClassVar[str] = NATS
    doc: ClassVar[str] = ""
    classifiers: ClassVar[tuple[str, ...]] = ()
    params: ClassVar[type[Params]] = NoParams
    settings_fields: ClassVar[tuple[str, ...] | None] = None
    rolling: ClassVar[str | None] = None
    record_kind: ClassVar[str | None] = None
    record_fields: ClassVar[Mapping[str, Check]] = PAIR_SCORE_FIELDS
    record_arrays: ClassVar[Mapping[str, type]] = {"estimate": float}
    checkpoints: ClassVar[bool] = False
    baseline: ClassVar[bool] = False
    deterministic: ClassVar[bool] = False
    canonical_label: ClassVar[str] = "canonical"

    def score_documents(self, lm: LanguageModel, docs: Sequence[ScoredText], config: ScoringConfig, *,
                        on_bytes: Callable[[int], None] | None = None) -> list[DocumentScore]:
        """The figures of whole documents (``document`` level); ``on_bytes`` reports progress inside them."""
        raise NotImplementedError(f"scoring {self.name!r} has no document-level implementation")

    def score_pairs(self, lm: LanguageModel, pairs: Sequence[Pair], config: ScoringConfig) -> list[PairScore]:
        """The figures of (context, continuation) requests (``pair`` level), in order."""
        raise NotImplementedError(f"scoring {self.name!r} has no request-level implementation")

    @property
    def stored_kind(self) -> str:
        """The kind of the QA record its classifiers read: :attr:`record_kind`, else its name."""
        return self.record_kind or self.name

    def question_records(self, lm: LanguageModel, items: Sequence[Item],
                         settings: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The records of :attr:`stored_kind` of the questions ``items`` in a QA run of ``settings`` (its
        ``run.json``), one per item in order (:func:`~ppl_tok.scorings.records.question_record`), each answer's
        fields :attr:`record_fields`.

        By default every answer of ``items`` goes to :meth:`score_pairs` in one call, its parameters those of the
        study (:func:`~ppl_tok.scorings.records.study_values`), answer ``j`` of question ``q`` seeded
        :func:`~ppl_tok.common.seeds.pair_seed` ``(seed, split, q.id, j)`` as the core record's particles; it
        stores each figure as ``{"estimate": log}``.
        """
        from ppl_tok.common.jsonl_store import encode_log
        from ppl_tok.common.seeds import pair_seed
        from ppl_tok.datasets import continuation
        from ppl_tok.scorings.pairs import Pair, PairScore
        from ppl_tok.scorings.records import question_record, study_values
        from ppl_tok.scorings.results import checked_scores

        pairs = [Pair(q.context, continuation(c), pair_seed(settings["seed"], split, q.id, j), (split, index), j)
                 for split, index, q in items for j, c in enumerate(q.choices)]
        config = ScoringConfig(self.name, level=PAIR, **study_values(self.name, self.params, settings))
        scores = iter(checked_scores(self.name, self.score_pairs(lm, pairs, config), len(pairs), PairScore, "pairs"))
        return [question_record(self.stored_kind, item, [{"estimate": encode_log(next(scores).estimate)}
                                                         for _ in item[2].choices]) for item in items]

    def classify(self, classifier: str, t: SplitScores, norm: bool, tuned: Mapping[str, Any]) -> np.ndarray:
        """The score ``s_j`` of each answer under ``classifier`` (one of :attr:`classifiers`), ``[Q, C]``: the QA
        report predicts ``argmax_j s_j``; per byte of the answer if ``norm`` (``acc_norm``). ``tuned``: what the
        report tuned on the tuning split (``k``, ``alpha``, and their ``_norm`` variants).

        By default the stored figure: ``s_j = t.optional[stored_kind]["estimate"][:, j]``.
        """
        return t.per_byte(t.optional[self.stored_kind]["estimate"], norm)

    def question_columns(self, t: SplitScores) -> dict[str, np.ndarray]:
        """What the QA report's per-question rows show of this scoring (``{column: [Q, C] log-scores}``); by
        default nothing."""
        return {}

    def report_section(self, tables: Mapping[str, SplitScores],
                       classify: Callable[[SplitScores, bool], np.ndarray]) -> dict[str, Any] | None:
        """A section of its own in ``report.json``, under its name, from every split's scores (``classify``: its
        first classifier, tuned); by default none."""
        return None

    def report_markdown(self, section: dict[str, Any]) -> list[str]:
        """The lines ``report.md`` shows of :meth:`report_section`'s ``section``; by default none."""
        return []

    def check(self, lm: LanguageModel) -> None:
        """What the scoring needs of the LM, checked before a run makes its folder (a ``ValueError`` naming the
        fix); by default nothing."""

    def settings(self, config: ScoringConfig) -> dict[str, Any]:
        """What a run's stored figures depend on: the name, the window and :attr:`settings_fields` of its
        :attr:`params` (all of them where that is ``None``)."""
        own = param_settings(config.params)
        fields_ = own if self.settings_fields is None else self.settings_fields
        return {"scoring": self.name, "window": config.window, **{f: own[f] for f in fields_}}

    def legacy_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The settings a run folder of this scoring written before they were recorded lacks, where its other
        settings (``settings``, its ``run.json``) make them knowable; each fills in only an absent one
        (:meth:`ppl_tok.perplexity.store.PerplexityStore.complete`). By default none."""
        return {}

    def __repr__(self) -> str:
        return f"<scoring {self.name!r} ({', '.join(self.levels)})>"


#: The built-in scorings' modules, in report order: each registers its scoring as it is imported, on the first use
#: of :data:`SCORINGS` (so that reading the registry's levels and defaults imports no scoring).
BUILT_IN: tuple[str, ...] = tuple(f"ppl_tok.scorings.{m}" for m in (
    "canonical", "importance", "beam", "events", "mixture", "canonical_rest", "exact", "stratified", "conditional",
    "canonical_lm", "most_likely", "tree"))

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
    if not (isinstance(obj.params, type) and issubclass(obj.params, Params)):
        raise ValueError(f"scoring {name!r}: params must be a frozen Params dataclass (ppl_tok.common.params), "
                         f"got {obj.params!r}")
    specs(obj.params)  # every field with a default and help (a TypeError naming the field)
    own = {s.name for s in specs(obj.params)}
    if obj.settings_fields is not None and not set(obj.settings_fields) <= own:
        raise ValueError(f"scoring {name!r}: settings_fields {sorted(set(obj.settings_fields) - own)} are no fields "
                         f"of its params ({', '.join(sorted(own)) or 'none'})")
    if QUESTION in levels and not obj.classifiers:
        raise ValueError(f"scoring {name!r} names the {QUESTION} level but no classifiers")
    own_records = scoring_class.question_records is not Scoring.question_records
    if QUESTION in levels and obj.record_kind is None and PAIR not in levels and not own_records:
        raise ValueError(f"scoring {name!r}: a question-level scoring without a record kind is classified "
                         "through score_pairs; name the pair level too (or implement question_records)")
    if QUESTION in levels and obj.record_kind not in (None, CORE) and not own_records:
        raise ValueError(f"scoring {name!r} stores QA records of kind {obj.record_kind!r}: implement "
                         "question_records")
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


_find = scoring  # ScoringConfig's argument ``scoring`` hides the function


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


def recorded_kinds() -> dict[str, Scoring]:
    """The QA records a run stores beside the core one when ``--scores`` names them: each kind (a scoring's
    :attr:`Scoring.stored_kind`) and the first registered question-level scoring that stores it, in registration
    order."""
    out: dict[str, Scoring] = {}
    for s in SCORINGS.values():
        if QUESTION in s.levels and s.stored_kind != CORE:
            out.setdefault(s.stored_kind, s)
    return out


def record_arrays() -> dict[str, Mapping[str, type]]:
    """Per record kind beside the core one, the fields its scoring reads into arrays (:attr:`Scoring.record_arrays`;
    :func:`ppl_tok.scorings.classify.split_scores`)."""
    return {kind: s.record_arrays for kind, s in recorded_kinds().items()}


def baseline_classifier() -> str:
    """The QA report's baseline: the first classifier of the scoring whose figure is the canonical one
    (:attr:`Scoring.baseline`); every other classifier's difference is taken against it."""
    return next(s.classifiers[0] for s in SCORINGS.values() if QUESTION in s.levels and s.baseline)


def ensemble_sources() -> tuple[str, ...]:
    """The classifiers of the :attr:`Scoring.deterministic` question-level scorings, in report order: what a member
    of ``qa ensemble`` may score its answers by."""
    return tuple(c for s in SCORINGS.values() if QUESTION in s.levels and s.deterministic for c in s.classifiers)


def pair_scored_kinds() -> tuple[str, ...]:
    """The registered question-level scorings whose records are their ``score_pairs`` figures (record kind ``None``)."""
    return tuple(s.name for s in SCORINGS.values() if QUESTION in s.levels and s.record_kind is None)


@dataclass(frozen=True, init=False)
class ScoringConfig:
    """What a scoring computes, at one level: what every scoring shares, and the scoring's own parameters.

    :param scoring: a scoring's name at ``level`` (:mod:`ppl_tok.scorings`; old names resolved: ``marginal`` is
        ``beam`` for documents and ``importance`` for requests).
    :param window: positions per forward (``None``: the model's context length; no limit for toy LMs).
    :param level: :data:`~ppl_tok.scorings.DOCUMENT` (perplexity, ``loglikelihood_rolling``) or
        :data:`~ppl_tok.scorings.PAIR` (``loglikelihood``).
    :param params: the scoring's own parameters, an instance of its :attr:`Scoring.params`; or, instead,
        ``**values``: their fields by name (``ScoringConfig("canonical+rest", num_samples=8)``; the beam's scorings
        also take a whole ``search=StringSearchConfig(...)``), each checked by its field, a name that is none of
        the scoring's refused naming the ones it takes. Read them as ``config.params.NAME`` (or ``config.NAME``).
    """

    scoring: str
    window: int | None
    level: str
    params: Params

    def __init__(self, scoring: str = "canonical", window: int | None = None, *, level: str = DOCUMENT,
                 params: Params | None = None, **values: Any) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}: expected one of {', '.join(LEVELS)}")
        found = _find(scoring, level)  # old names resolved
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 3):
            raise ValueError(f"window must be at least 3 positions (BOS, context, text), got {window!r}")
        cls = found.params
        if params is None:
            params = own_params(found, values)
        elif values:
            raise TypeError(f"give params or its fields ({', '.join(values)}), not both")
        elif not isinstance(params, cls):
            raise TypeError(f"scoring {found.name!r} takes params of {cls.__qualname__}, got {params!r}")
        for name, value in (("scoring", found.name), ("window", window), ("level", level), ("params", params),
                            ("_implementation", found)):  # resolved once, here: the object is passed down
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        """A parameter of the scoring (``config.num_samples`` is ``config.params.num_samples``)."""
        if name.startswith("_") or name == "params":
            raise AttributeError(name)
        try:
            return getattr(self.params, name)
        except AttributeError:
            raise AttributeError(f"scoring {self.scoring!r} has no parameter {name!r} (its parameters: "
                                 f"{', '.join(s.name for s in specs(self.params)) or 'none'})") from None

    @property
    def implementation(self) -> Scoring:
        """The registered scoring this config names, as it was resolved when the config was made."""
        return self._implementation

    def settings(self) -> dict[str, Any]:
        """What the stored figures depend on (the store's settings; :meth:`ppl_tok.scorings.Scoring.settings`)."""
        return self.implementation.settings(self)


def own_params(found: Scoring, values: Mapping[str, Any]) -> Params:
    """The parameters of the scoring ``found`` from ``values``, its fields by name (Python values, each checked by
    its field; :func:`ppl_tok.common.params.from_values` parses text).

    :raises ValueError: a name that is none of its fields (naming the scoring and the ones it takes), a bad value.
    """
    cls = found.params
    expand = getattr(cls, "expand", None)
    values = expand(values) if expand is not None else dict(values)
    mine, rest = split_values(cls, values)
    if rest:
        known = ", ".join(s.name for s in specs(cls)) or "none"
        raise ValueError(f"scoring {found.name!r} takes no parameter {', '.join(sorted(rest))} (its parameters: "
                         f"{known})")
    return cls(**mine)


__all__ = ["ALIASES", "BEAM_LAZY_DEFAULT", "DEFAULT_SAMPLES", "DOCUMENT", "LAZY_FIELDS", "LEVELS", "NoParams", "PAIR",
           "QUESTION", "SCORINGS", "Scoring", "ScoringConfig", "SearchParams", "accepted", "classifier_scoring",
           "check_limits", "ensemble_sources", "classifiers", "is_defined", "names", "own_params", "pair_scored_kinds", "recorded_kinds", "record_arrays", "baseline_classifier", "proposal_param", "proposal_value", "register", "samples_param",
           "scoring", "seed_param", "unregister"]
