"""Score every (question, answer) of a study and store the scores as they are computed.

For answer ``a`` of a question with context ``c`` the continuation is
``x = " " + a`` (lm-eval's convention); context and continuation are encoded
separately, and the canonical tokenization ``v*`` of ``x`` must decode to
exactly the bytes of ``x``. Per answer the ``"is"`` record holds

* ``log p(v* | c)`` (the canonical score), and
* N importance samples (the look-ahead's, or the run's ``proposal``) ``v_i ~ q(. | x, c)`` with ``log p(v_i | c)``,
  ``log q(v_i)``, whether ``v_i == v*`` and the tokens ``v_i``,

from which the classifiers of the scorings whose record kind is the core one are computed
without new LM calls. The other question-level scorings store records of their own, with
LM calls of their own, when ``--scores`` names them (:func:`optional_scores`): each
scoring's :meth:`~ppl_tok.scorings.Scoring.question_records` computes them for a batch
(the built-ins: ``"exact"``, a certified bracket ``lower <= log p(x | c) <= upper`` within a
forward budget, all answers of a batch searched together; ``"stratified"``, the stratified
estimate of ``log p(x | c)``; ``"most-likely"``, ``max_v log p(v | c)`` by branch and bound
within a time budget; a scoring without a record kind, its ``score_pairs`` figures).

The particles of the pair (question ``q`` of ``split``, answer ``j``) are drawn
with seed :func:`~ppl_tok.common.seeds.pair_seed` ``(seed, split, q.id, j)``: a pair's scores do not
depend on which other pairs share a batch, so a resumed run stores exactly what
an uninterrupted one would. All answers of ``batch_questions`` questions go
to :func:`ppl_tok.infer.importance.marginals` in one call, and the batch is appended
to the store before the next one starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ppl_tok.common.params import default_of
from ppl_tok.common.seeds import pair_seed
from ppl_tok.common.version import __version__
from ppl_tok.datasets import Question, continuation
from ppl_tok.infer.importance import marginals
from ppl_tok.limits import LimitError, check_workload, limits
from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.device import device_kind
from ppl_tok.lm.spec import LMSpec
from ppl_tok.proposals import settings_guide
from ppl_tok.qa.data import Study
from ppl_tok.scorings.exact import ExactParams
from ppl_tok.scorings.most_likely import MostLikelyParams
from ppl_tok.scorings.records import CORE, STUDY_PARAMS
from ppl_tok.scorings.registry import DEFAULT_SAMPLES, pair_scored_kinds, recorded_kinds
from ppl_tok.qa.store import (
    FIRST_SCORES_VERSION,
    LOCK_FILE,
    SCORES_FILE,
    SETTINGS_FILE,
    TIMING_FILE,
    ScoreStore,
    StoreError,
    encode_log,
    encode_logs,
    run_num_samples,
)

KINDS = (CORE,)
#: The version of what a run stores for given settings. Bump it with any change that alters the stored
#: numbers or records (sampling, seeds, the engine's numerics, the record format): a folder written under
#: another scores version is then refused instead of mixing the two. A ppl-tok release alone does not.
SCORES_VERSION = 1


def optional_scores() -> tuple[str, ...]:
    """What ``--scores`` may add: the record kind of every registered question-level scoring beside the core one
    (:func:`~ppl_tok.scorings.registry.recorded_kinds`: the built-ins ``exact``, ``stratified``, ``most-likely``,
    then a user's), a scoring without a record kind stored as its ``score_pairs`` figures under its name."""
    return tuple(recorded_kinds())


class QAError(ValueError):
    """A question that cannot be scored as asked."""


def canonical_continuation(lm: LanguageModel, question: Question, j: int) -> tuple[int, ...]:
    """The canonical tokens of answer ``j``'s continuation, checked to decode to exactly its bytes."""
    text = continuation(question.choices[j])
    try:
        ids = tuple(lm.vocab.encode(text))
    except ValueError as err:
        raise QAError(f"question {question.id!r}, answer {j} ({text!r}): no canonical tokenization ({err})") from err
    if lm.vocab.decode(ids) != text.encode("utf-8"):  # pragma: no cover - encode checks this already
        raise QAError(f"question {question.id!r}, answer {j}: canonical tokens decode to "
                      f"{lm.vocab.decode(ids)!r}, not {text!r}")
    return ids


def study_settings(study: Study, *, model: str | None = None, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                   scores: Sequence[str] = (), limit: int | None = None, shuffle_seed: int | None = None,
                   dtype: str | None = None, device: str | None = None,
                   exact_tolerance: float = default_of(ExactParams, "exact_tolerance"),
                   exact_budget: int = default_of(ExactParams, "exact_budget"),
                   most_likely_time: float = default_of(MostLikelyParams, "most_likely_time"), lm: LMSpec | None = None,
                   proposal: dict[str, Any] | None = None,
                   params: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The ``run.json`` of a study: everything the stored scores depend on.

    The LM is ``lm`` (an :class:`~ppl_tok.lm.spec.LMSpec`, recorded under ``"lm"``) or, without
    one, ``LMSpec(model, dtype=dtype, device=device)``; its model, dtype and BOS id are also recorded
    as ``model``, ``dtype`` and ``bos_id`` (compared on resume; a folder from before ``bos_id`` was
    recorded scored with the card's, ``None``).
    ``device`` is the device that scores (default: the spec's, else the CPU); ``run.json`` records
    its kind (``"cpu"``, ``"cuda"``): floating-point results differ between devices (and dtypes),
    so a folder is resumed only on the kind and dtype it was started with. ``samples`` is N
    (recorded as ``num_samples``). ``proposal``: the importance proposal's record
    (:func:`ppl_tok.proposals.proposal_settings`; default the look-ahead), a learned one with its file's
    checksum and weights, so that a resume with another proposal file is refused. ``params``: the own parameters
    of scorings of ``scores`` stored as their figures (:func:`~ppl_tok.scorings.registry.pair_scored_kinds`), by scoring
    (``{name: {field: value}}``; the study's own settings, :data:`STUDY_PARAMS`, are set above): each such scoring's
    parameters are recorded under ``"params"`` (where it has any beyond the study's), compared on resume."""
    if lm is None:
        if model is None:
            raise TypeError("study_settings needs the LM: model=... or lm=LMSpec(...)")
        lm = LMSpec(model=model, dtype=dtype, device=device)
    elif model is not None or dtype is not None:
        raise TypeError("study_settings(lm=spec): the model and dtype come from the LMSpec; do not give them again")
    if device is None:
        device = lm.device or "cpu"
    unknown = set(scores) - set(optional_scores())
    if unknown:
        raise ValueError(f"unknown scores {sorted(unknown)}: expected some of {optional_scores()}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    own = scoring_params(scores, params or {})
    return {
        "dataset": study.dataset, "splits": study.sizes(), "limit": limit, "shuffle_seed": shuffle_seed,
        "data_files": {Path(p).name: sha for p, sha in study.files.items()},
        "model": lm.model, "dtype": lm.dtype, "bos_id": lm.bos_id, "device": device_kind(device),
        "num_samples": samples, "seed": seed,
        **(proposal or {"proposal": "lookahead"}),
        "scores": sorted(scores), "exact_tolerance": exact_tolerance, "exact_budget": exact_budget,
        "most_likely_time": most_likely_time, "scores_version": SCORES_VERSION, "ppl_tok_version": __version__,
        # half-precision models score with an fp32 LM head (load_lm): not comparable with folders from before it
        **({"lm_head": "float32"} if lm.dtype in ("bfloat16", "float16") else {}),
        "lm": lm.to_dict(),
        **({"params": own} if own else {}),
    }


def scoring_params(scores: Sequence[str], params: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The recorded parameters of the pair-scored scorings of ``scores`` (:func:`study_settings`): each one's
    fields beyond :data:`STUDY_PARAMS`, ``params``' values or their defaults, checked by the fields.

    :raises ValueError: parameters of a scoring that ``scores`` does not name, or a bad value (naming the field).
    """
    from ppl_tok.common.params import settings as own_settings
    from ppl_tok.scorings import PAIR, scoring

    kinds = [k for k in scores if k in pair_scored_kinds()]
    stray = sorted(set(params) - set(kinds))
    if stray:
        raise ValueError(f"parameters of {', '.join(stray)}, which the run does not score: add it to --scores "
                         f"(the scores whose parameters are recorded: {', '.join(kinds) or 'none'})")
    out = {}
    for kind in sorted(kinds):
        found = scoring(kind, PAIR)
        values = {k: v for k, v in own_settings(found.params(**params.get(kind, {}))).items() if k not in STUDY_PARAMS}
        if values:
            out[kind] = values
    return out


def run_lm_spec(settings: Mapping[str, Any], device: str | None) -> LMSpec:
    """The LM a run folder was scored with (its ``run.json``), to load again on ``device`` (``None``: the CPU).

    The ``"lm"`` spec where recorded; in folders from before it, the ``model`` and ``dtype``. The
    recorded device is where the run scored, which need not exist here: ``device`` replaces it.
    """
    stored = settings.get("lm")
    spec = LMSpec.from_dict(stored) if stored is not None else LMSpec(model=settings["model"],
                                                                       dtype=settings.get("dtype"))
    return dataclasses.replace(spec, device=device)


def check_settings(settings: Any, where: str) -> dict[str, Any]:
    """``settings`` (a ``run.json``) if this release can read it, else a :class:`StoreError` naming ``where``.

    A folder of a later ``scores_version`` is refused (its records may mean something else); the
    settings the report relies on must have their types (``num_samples: "four"`` is damage, not a setting).
    N is read as ``num_samples`` or, in folders from before 0.2, ``samples``; ``lm``, where recorded,
    must be an :class:`~ppl_tok.lm.spec.LMSpec`.
    """
    def bad(what: str) -> StoreError:
        return StoreError(f"{where}: {what}")

    if not isinstance(settings, dict):
        raise bad("expected a JSON object")
    version = settings.get("scores_version", FIRST_SCORES_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad(f"scores_version {version!r} is not a version number")
    if version > SCORES_VERSION:
        raise bad(f"written with scores version {version}, newer than this ppl-tok's {SCORES_VERSION} "
                  f"(ppl-tok {settings.get('ppl_tok_version', '?')} wrote it): use that release or a later one")
    checks = {
        "dataset": lambda v: isinstance(v, str), "model": lambda v: isinstance(v, str),
        "num_samples": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "seed": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "splits": lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(n, int)
                                                        and not isinstance(n, bool) and n >= 0 for k, n in v.items()),
        "scores": lambda v: isinstance(v, list) and all(k in optional_scores() for k in v),
    }
    for name, check in checks.items():
        key = "samples" if name == "num_samples" and name not in settings and "samples" in settings else name
        if key not in settings:
            raise bad(f"the setting {name!r} is missing")
        if not check(settings[key]):
            raise bad(f"the setting {key!r} is {settings[key]!r}, not a valid value; the file is damaged")
    if settings.get("lm") is not None:
        try:
            LMSpec.from_dict(settings["lm"])
        except (ValueError, TypeError) as err:
            raise bad(f"the setting 'lm' is not an LM spec ({err}); the file is damaged") from None
    return settings


def check_study(study: Study, settings: dict[str, Any], batch_questions: int) -> None:
    """The :mod:`ppl_tok.limits` of a run, checked before any model loads.

    Every answer's context plus continuation must fit ``lm_bytes``; a batch
    (``batch_questions`` questions, all their answers, ``samples`` particles each)
    must fit ``pairs``, ``particles`` and ``batch_bytes`` (counted for the largest question).
    """
    lim = limits()
    n = run_num_samples(settings)
    widest = largest = 0
    for split, questions in study.splits.items():
        for q in questions:
            widest = max(widest, len(q.choices))
            largest = max(largest, sum(len(q.context.encode()) + len(continuation(c).encode()) for c in q.choices))
            try:
                check_workload([continuation(c) for c in q.choices], [q.context] * len(q.choices), n)
            except LimitError as err:
                raise LimitError(f"{split} question {q.id!r}: {err}") from None
    pairs = min(batch_questions, sum(len(qs) for qs in study.splits.values())) * widest
    lim.check("pairs", pairs, f"--batch-size {batch_questions} times {widest} answers")
    lim.check("particles", pairs * n, f"a batch's particles ({pairs} answers x {n})")
    lim.check("batch_bytes", min(batch_questions, sum(len(qs) for qs in study.splits.values())) * largest,
              f"--batch-size {batch_questions} times the largest question's contexts plus answers in bytes")


def checked_records(records: Sequence[dict[str, Any]], kind: str,
                    items: Sequence[tuple[str, int, Question]]) -> list[dict[str, Any]]:
    """The records a scoring's :meth:`~ppl_tok.scorings.Scoring.question_records` returned for ``items``: one of
    ``kind`` per item, in order (each then checked by the store as it appends them, field by field).

    :raises QAError: another number of records, or a record of another kind or question (naming the scoring's fault).
    """
    records = list(records)
    if len(records) != len(items):
        raise QAError(f"scoring {kind!r}: question_records returned {len(records)} records for {len(items)} "
                      "questions (one per question, in order)")
    for r, (split, index, q) in zip(records, items):
        got = (r.get("kind"), r.get("split"), r.get("index")) if isinstance(r, dict) else r
        if got != (kind, split, index):
            raise QAError(f"scoring {kind!r}: question_records returned {got!r} for {(kind, split, index)!r} "
                          "(build each with ppl_tok.scorings.records.question_record)")
    return records


@contextlib.contextmanager
def removed_if_nothing_stored(out: str | Path) -> Iterator[None]:
    """Within this block, a run that fails before it stores a record removes the folder it created.

    A failure after the first batch keeps the folder: the run resumes from it.
    """
    out = Path(out)
    created = not out.exists()
    try:
        yield
    except BaseException:
        scores = out / SCORES_FILE
        if created and out.is_dir() and (not scores.exists() or scores.stat().st_size == 0):
            for name in (SETTINGS_FILE, SETTINGS_FILE + ".tmp", SCORES_FILE, TIMING_FILE, LOCK_FILE):
                (out / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # not empty: something else was put there
                out.rmdir()
        raise


def _is_record(split: str, index: int, q: Question, canon: list[tuple[int, ...]], results: list,
               seeds: list[int]) -> dict[str, Any]:
    choices = []
    for j, (ids, r, s) in enumerate(zip(canon, results, seeds)):
        if tuple(r.canonical) != ids:
            raise QAError(f"question {q.id!r}, answer {j}: the sampler's canonical tokens {r.canonical} "
                          f"differ from the continuation's {ids}")
        choices.append({
            "bytes": len(q.choices[j].encode("utf-8")), "seed": s, "canonical": list(ids),
            "canonical_log_prob": encode_log(r.canonical_log_prob),
            "log_p": encode_logs(r.log_p.tolist()), "log_q": encode_logs(r.log_q.tolist()),
            "is_canonical": [int(c) for c in r.is_canonical], "samples": [list(v) for v in r.samples],
        })
    return {"kind": CORE, "split": split, "index": index, "id": q.id, "label": q.label, "choices": choices}


def score_batch(lm: LanguageModel, batch: Sequence[tuple[str, int, Question]], settings: dict[str, Any],
                todos: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """The records of kinds ``todos[i]`` for each ``batch[i] = (split, index, question)``.

    All ``"is"`` pairs of the batch go to :func:`~ppl_tok.infer.importance.marginals` in one call.
    The LM's prefix cache is cleared at the end: the next questions share nothing with these,
    so memory stays that of one batch however long the study.
    """
    records = []
    is_items = [item for item, todo in zip(batch, todos) if CORE in todo]
    if is_items:
        texts, contexts, seeds, canon = [], [], [], []
        for split, _, q in is_items:
            for j, choice in enumerate(q.choices):
                canon.append(canonical_continuation(lm, q, j))
                texts.append(continuation(choice))
                contexts.append(q.context)
                seeds.append(pair_seed(settings["seed"], split, q.id, j))
        results = marginals(texts, lm, run_num_samples(settings), contexts=contexts, guide=settings_guide(settings),
                            seeds=seeds)
        start = 0
        for split, index, q in is_items:
            end = start + len(q.choices)
            records.append(_is_record(split, index, q, canon[start:end], results[start:end], seeds[start:end]))
            start = end
    for kind, found in recorded_kinds().items():  # each scoring's own records: its hook, all its questions at once
        items = [item for item, todo in zip(batch, todos) if kind in todo]
        if items:
            records.extend(checked_records(found.question_records(lm, items, settings), kind, items))
    lm.clear_cache()
    return records


def run_study(study: Study, lm: LanguageModel, out: str | Path, settings: dict[str, Any], *,
              batch_questions: int = 8, progress: bool = True) -> ScoreStore:
    """Compute (or finish) the scores of ``study`` into the run folder ``out``.

    Questions whose records are all stored are skipped; the rest go in batches
    of ``batch_questions``, each appended durably before the next starts.
    A tqdm progress bar (questions, with ETA) is shown if ``progress``.
    """
    store = ScoreStore.open(out, settings)
    total, chunks = pending_batches(study, store, batch_questions)
    try:
        with progress_bar(study, total, chunks, enabled=progress) as bar:
            for chunk in chunks:
                t0 = time.perf_counter()
                records = score_batch(lm, [item for item, _ in chunk], store.settings, [todo for _, todo in chunk])
                store.append(records, timing=batch_timing(chunk, time.perf_counter() - t0))
                bar.update(len(chunk))
    finally:
        store.close()
    return store


#: One question still to score: ``((split, index, question), kinds to compute)``.
Pending = tuple[tuple[str, int, Question], list[str]]


def pending_batches(study: Study, store: ScoreStore, batch_questions: int) -> tuple[int, list[list[Pending]]]:
    """The number of questions of ``study`` and, in batches of ``batch_questions``, those not all stored yet."""
    if batch_questions < 1:
        raise ValueError(f"batch_questions must be >= 1, got {batch_questions}")
    kinds = KINDS + tuple(store.settings["scores"])
    pending: list[Pending] = []
    total = sum(len(questions) for questions in study.splits.values())
    # the splits in step (tune 0, test 0, tune 1, ...): a run stopped early has the first questions of every split
    for index in range(max((len(qs) for qs in study.splits.values()), default=0)):
        for split, questions in study.splits.items():
            if index < len(questions):
                todo = [k for k in kinds if not store.has(k, split, index)]
                if todo:
                    pending.append(((split, index, questions[index]), todo))
    return total, [pending[lo:lo + batch_questions] for lo in range(0, len(pending), batch_questions)]


def batch_timing(chunk: Sequence[Pending], seconds: float, **extra: Any) -> dict[str, Any]:
    """The ``timing.jsonl`` line of a batch that took ``seconds`` (with torch's CPU thread count)."""
    import torch

    return {"questions": len(chunk), "seconds": seconds, "kinds": sorted({k for _, todo in chunk for k in todo}),
            "threads": torch.get_num_threads(), **extra}


def progress_bar(study: Study, total: int, chunks: Sequence[Sequence[Pending]], enabled: bool = True) -> Any:
    """A tqdm bar over the questions of ``study`` (with ETA), started at those already stored (a no-op if not ``enabled``)."""
    from tqdm.auto import tqdm

    left = sum(len(c) for c in chunks)
    return tqdm(total=total, initial=total - left, unit="q", desc=f"qa {study.dataset}", dynamic_ncols=True,
                disable=not enabled)
