"""What the QA study stores per question, as a scoring's QA hooks write and read it.

A run folder's ``scores.jsonl`` holds one record per (kind, split, question): ``{"kind", "split", "index", "id",
"label", "choices"}``, ``choices`` holding one object per answer with the fields of its kind
(:attr:`ppl_tok.scorings.Scoring.record_fields`, each with its check). The study always stores the
:data:`CORE` record (the canonical score and N importance samples per answer, :data:`CORE_FIELDS`), which the
scorings whose :attr:`~ppl_tok.scorings.Scoring.record_kind` is :data:`CORE` classify from; any other
question-level scoring stores a record of its own kind when ``qa run --scores`` names it
(:meth:`~ppl_tok.scorings.Scoring.question_records`): by default its :meth:`~ppl_tok.scorings.Scoring.score_pairs`
figure per answer, :data:`PAIR_SCORE_FIELDS`, under its name.

A record's log-probabilities are stored as :func:`~ppl_tok.common.jsonl_store.encode_log` writes them
(``"-Infinity"`` for a zero probability; NaN and ``+inf`` are errors).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ppl_tok.common.params import Params
    from ppl_tok.datasets import Question  # noqa: F401 (Item's third member)

#: One question a batch scores: ``(split, index in the split, the question)``.
Item = tuple[str, int, "Question"]
#: A field's check: does the stored value hold a valid value?
Check = Callable[[Any], bool]

#: The kind of the record the study always stores (the canonical score and the importance samples of every answer).
CORE = "is"


def is_nat(v: Any) -> bool:
    """A count: an ``int`` ``>= 0`` (``True`` is no count)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_log(v: Any) -> bool:
    """A stored log-probability: ``"-Infinity"`` (or ``null``, as ppl-tok 0.2 wrote ``-inf``) or a finite number
    (NaN, ``1e999`` are damage)."""
    return v is None or v == "-Infinity" or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                              and math.isfinite(v))


def is_flag(v: Any) -> bool:
    """A JSON boolean."""
    return isinstance(v, bool)


def list_of(check: Check) -> Check:
    """The check of a list whose every entry passes ``check``."""
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


#: Per answer, the fields of the :data:`CORE` record and their checks.
CORE_FIELDS: dict[str, Check] = {
    "bytes": is_nat, "seed": is_nat, "canonical": list_of(is_nat), "canonical_log_prob": is_log,
    "log_p": list_of(is_log), "log_q": list_of(is_log), "is_canonical": list_of(lambda b: b in (0, 1)),
    "samples": list_of(list_of(is_nat))}
#: Per answer, the field a scoring stored as its :meth:`~ppl_tok.scorings.Scoring.score_pairs` figures writes: the
#: figure (the default :attr:`~ppl_tok.scorings.Scoring.record_fields`).
PAIR_SCORE_FIELDS: dict[str, Check] = {"estimate": is_log}

#: The study's own settings (``run.json``) that a scoring's parameter of the same name takes (:func:`study_values`);
#: ``qa run`` has its own flags for them.
STUDY_PARAMS = ("num_samples", "seed", "proposal", "exact_tolerance", "exact_budget")


def run_num_samples(settings: Mapping[str, Any]) -> Any:
    """N, the importance samples per answer, of a ``run.json``: ``num_samples``, or ``samples`` in older folders."""
    return settings["num_samples"] if "num_samples" in settings else settings.get("samples")


def study_values(name: str, params: type[Params], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters the scoring ``name`` (its parameters' dataclass ``params``) runs with in a study of ``settings``
    (a ``run.json``): the study's own settings it declares (:data:`STUDY_PARAMS`) and its recorded ones
    (``settings["params"][name]``)."""
    from ppl_tok.common.params import specs

    study = {"num_samples": run_num_samples(settings), "seed": settings["seed"],
             "proposal": {k: v for k, v in settings.items() if k.startswith("proposal")},
             "exact_tolerance": settings["exact_tolerance"], "exact_budget": settings["exact_budget"]}
    own = {s.name for s in specs(params)}
    return {**{k: v for k, v in study.items() if k in own}, **settings.get("params", {}).get(name, {})}


def question_record(kind: str, item: Item, choices: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The record of ``kind`` of one question (``item``) with one object of fields per answer (``choices``)."""
    split, index, q = item
    return {"kind": kind, "split": split, "index": index, "id": q.id, "label": q.label, "choices": list(choices)}


__all__ = ["CORE", "CORE_FIELDS", "Check", "Item", "PAIR_SCORE_FIELDS", "STUDY_PARAMS", "is_flag", "is_log", "is_nat",
           "list_of", "question_record", "run_num_samples", "study_values"]
