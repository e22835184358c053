"""An append-only, crash-safe store of QA scores: a folder with ``run.json`` and ``scores.jsonl``.

* ``run.json``: the settings of the run (dataset, split sizes, model, N, seed,
  scores, data checksums, scores version, ppl-tok version, and under ``"lm"`` the
  LM's :class:`~ppl_tok.lm.spec.LMSpec` as a dict), written once,
  atomically, at the start. Opening the folder with other settings raises
  :class:`SettingsMismatchError` naming every differing setting. Only the set
  of optional scores may grow (a later ``--scores exact`` adds those records).
  The ppl-tok version and the ``"lm"`` spec are the creator's, for the reader
  (not compared as a whole: its model, dtype, device kind, BOS id and backend are); a
  later release may add to the folder as long as its ``scores_version`` is the
  same. N is ``num_samples``; folders written before 0.2 call it ``samples``
  (both are read: :func:`run_num_samples`).
* ``scores.jsonl``: one JSON object per line, one record per (kind, split,
  question). Records are appended a batch at a time with one ``write``,
  ``flush`` and ``fsync``. A process killed at any point leaves at most one
  partial last line (no trailing newline): :meth:`ScoreStore.open` cuts it
  off, so that record is computed again. A malformed complete line, or the
  same record twice, is an error naming the file and line, never skipped.
* ``.lock``: held (``flock``) by the process that has the folder open, so two
  runs never write one folder at once; the kernel releases it when that process
  ends, however it ends.
* ``timing.jsonl``: seconds and questions per batch (for questions/min); kept
  apart so that the scores of a resumed run equal those of an uninterrupted one.

Standard JSON only: ``-inf`` (a zero probability) is written as ``null``;
NaN and ``+inf`` are errors. :func:`encode_log` / :func:`decode_log` convert.

The mechanism (lock, durable appends, torn-line repair, settings check) is
:mod:`ppl_tok.common.jsonl_store`, shared with the perplexity store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ppl_tok.lm.spec import DEFAULT_BACKEND
from ppl_tok.scorings.records import CORE, CORE_FIELDS, is_nat, run_num_samples
from ppl_tok.scorings.registry import recorded_kinds
from ppl_tok.common.jsonl_store import (
    LOCK_FILE,
    JsonlStore,
    SettingsMismatchError,
    StoreError,
    decode_log,
    decode_logs,
    encode_log,
    encode_logs,
    read_json_lines,
    read_jsonl_records,
    repair,
)

__all__ = ["LOCK_FILE", "ScoreStore", "SettingsMismatchError", "StoreError", "decode_log", "decode_logs", "encode_log",
           "encode_logs", "read_records", "read_settings", "read_timing", "record_kinds", "records_digest", "repair",
           "run_num_samples", "validate_record"]

SETTINGS_FILE = "run.json"
SCORES_FILE = "scores.jsonl"
TIMING_FILE = "timing.jsonl"
#: Settings that may differ between runs into one folder (merged, not compared).
GROWABLE = ("scores",)
#: Settings recorded for the reader but not compared: the ppl-tok release that created the folder
#: (``scores_version`` is what decides whether another release may add to it) and the LM's spec (its
#: model, dtype, device kind and BOS id are compared as their own settings, its backend by
#: :meth:`ScoreStore.differences`).
INFORMATIONAL = ("ppl_tok_version", "lm")
#: Settings renamed since the first folders: the old name -> the name new folders write (both are read).
RENAMED = {"samples": "num_samples"}
#: The ``scores_version`` of folders written before that setting existed (ppl-tok 0.1.0).
FIRST_SCORES_VERSION = 1


def record_kinds() -> tuple[str, ...]:
    """The kinds of record a run folder may hold: the core one and every registered question-level scoring's own
    (:func:`~ppl_tok.scorings.registry.recorded_kinds`)."""
    return (CORE, *recorded_kinds())


def choice_fields(kind: Any) -> Mapping[str, Any] | None:
    """The per-answer fields of a record of ``kind`` and their checks (``None``: no such kind): the core record's
    (:data:`~ppl_tok.scorings.records.CORE_FIELDS`) or those its scoring declares
    (:attr:`~ppl_tok.scorings.Scoring.record_fields`)."""
    if kind == CORE:
        return CORE_FIELDS
    found = recorded_kinds().get(kind) if isinstance(kind, str) else None
    return None if found is None else found.record_fields


def validate_record(record: Any, where: str, samples: int | None = None) -> dict[str, Any]:
    """``record`` if it is a well-formed score record, else a :class:`StoreError` starting with ``where``.

    Checked: a known ``kind``; ``split``, ``index``, ``id``; ``label`` indexing ``choices``; every
    answer's fields of its kind (log-probabilities finite or ``"-Infinity"``); in an ``"is"`` record,
    ``samples`` (if given, the run's N) entries in each per-sample list.
    """
    def bad(what: str) -> StoreError:
        return StoreError(f"{where}: {what}; the line is damaged (restore it, or delete the line and resume "
                          "the run to compute it again)")

    if not isinstance(record, dict):
        raise bad(f"expected a JSON object, got {type(record).__name__}")
    kind = record.get("kind")
    fields = choice_fields(kind)
    if fields is None:
        raise bad(f"unknown record kind {kind!r} (expected one of {', '.join(record_kinds())})")
    for name, check in (("split", lambda v: isinstance(v, str)), ("index", is_nat),
                        ("id", lambda v: isinstance(v, str)), ("label", is_nat),
                        ("choices", lambda v: isinstance(v, list) and v and all(isinstance(c, dict) for c in v))):
        if not check(record.get(name)):
            raise bad(f"field {name!r} is {record.get(name)!r}")
    if record["label"] >= len(record["choices"]):
        raise bad(f"label {record['label']} does not index {len(record['choices'])} answers")
    for j, choice in enumerate(record["choices"]):
        for name, check in fields.items():
            if name not in choice:
                raise bad(f"answer {j} has no field {name!r}")
            if not check(choice[name]):
                raise bad(f"answer {j}: field {name!r} holds {str(choice[name])[:60]}, not a valid value")
        if kind == CORE:
            lengths = {len(choice[k]) for k in ("log_p", "log_q", "is_canonical", "samples")}
            if len(lengths) != 1 or (samples is not None and lengths != {samples}):
                raise bad(f"answer {j}: log_p, log_q, is_canonical and samples hold "
                          f"{sorted(len(choice[k]) for k in ('log_p', 'log_q', 'is_canonical', 'samples'))} entries"
                          + (f", not the run's {samples} samples" if samples is not None else ""))
    return record


def record_key(record: dict[str, Any]) -> tuple[str, str, int]:
    """The identity of a record: ``(kind, split, index)``."""
    return record["kind"], record["split"], record["index"]


def records_digest(records: Iterable[dict[str, Any]], sizes: Mapping[str, int]) -> str:
    """SHA-256 of the records of the first ``sizes[split]`` questions of each split, of every kind.

    The records are taken in :func:`record_key` order, so the order of lines in ``scores.jsonl``
    does not matter (a Ray run appends batches as they finish); records of later questions do not
    count, so a run still appending keeps the digest of the questions already evaluated.
    """
    digest = hashlib.sha256()
    chosen = sorted((r for r in records if r["index"] < sizes.get(r["split"], 0)), key=record_key)
    for record in chosen:
        digest.update(json.dumps(record, sort_keys=True, allow_nan=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


class ScoreStore(JsonlStore):
    """The records of one QA run folder; see the module docstring for the format.

    The I/O (lock, durable appends, torn-line repair, settings check) is
    :class:`ppl_tok.common.jsonl_store.JsonlStore`'s.
    """

    settings_file = SETTINGS_FILE
    records_file = SCORES_FILE
    timing_file = TIMING_FILE
    growable = GROWABLE
    informational = INFORMATIONAL
    defaults = {"scores_version": FIRST_SCORES_VERSION, "device": "cpu"}  # before "device": CPU-only runs
    what = "QA run folder"
    record_name = "score record"
    key = staticmethod(record_key)

    @classmethod
    def differences(cls, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """The compared settings that differ, an older folder's names read as today's (:data:`RENAMED`).

        The ``"lm"`` spec is informational, but its number-changing parts are compared: its model,
        dtype, device kind and BOS id as the settings of those names, its ``backend`` here (a folder
        from before ``"lm"``: ``transformers``, 0.1.0's only loader).
        """
        def renamed(settings: dict[str, Any]) -> dict[str, Any]:
            out = {RENAMED.get(k, k) if RENAMED.get(k, k) not in settings else k: v for k, v in settings.items()}
            lm = settings.get("lm")
            if "backend" not in out:
                out["backend"] = lm.get("backend") if isinstance(lm, dict) else DEFAULT_BACKEND
            return out

        return super().differences(renamed(old), renamed(new))

    @classmethod
    def validate(cls, record: Any, where: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """:func:`validate_record` with the run's number of samples."""
        return validate_record(record, where, None if settings is None else run_num_samples(settings))

    def has(self, kind: str, split: str, index: int) -> bool:
        return self.has_key((kind, split, index))


def read_settings(folder: str | Path) -> dict[str, Any]:
    """The ``run.json`` of a run folder."""
    return ScoreStore.read_settings(folder)


def read_records(path: str | Path, samples: int | None = None) -> Iterator[dict[str, Any]]:
    """The complete records of a ``scores.jsonl``; a malformed, damaged or repeated line is an error naming it.

    Each record is checked by :func:`validate_record` (``samples``: the run's N, if known).
    A partial last line (no newline) is not a record yet: a batch a running writer has not
    finished writing, or one torn by a kill (which :meth:`ScoreStore.open` cuts off). It is left
    out, so a run in progress can be read (``qa report --limit``) while it appends.
    """
    return read_jsonl_records(path, record_key, "score record",
                              validate=lambda record, where: validate_record(record, where, samples))


def read_timing(folder: str | Path) -> list[dict[str, Any]]:
    """The timing lines of a run folder (a torn last line is left out: it holds only timing)."""
    return read_json_lines(Path(folder) / TIMING_FILE)
