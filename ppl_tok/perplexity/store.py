"""The resumable store of a perplexity run: ``run.json`` + ``documents.jsonl`` (one record per document).

The folder's I/O is :class:`ppl_tok.common.jsonl_store.JsonlStore`'s (an exclusive
``flock``, one durable ``write``/``fsync`` per batch, a torn last line cut off
on open, settings compared on open): a run killed at any point (SIGKILL
included) resumes where it stopped and ends with the records an uninterrupted
run writes.

``run.json`` records every setting that can change a number, and a resume
compares each (:data:`COMPARED`), refusing a difference with one line per
setting naming both values: the corpus's SHA-256 (its bytes, a file's or
standard input's), ``field`` and ``split`` (which documents the indices
name), the LM's identity (``model``, ``backend``, ``dtype``, the ``device``
kind, ``bos_id``), ``window``, ``scoring`` and its settings (the beam's
``beam``, ``prune``, ``budget``, ``prune_against``; ``num_samples`` and
``seed`` of ``canonical+rest``) and ``records_version``. Recorded for the
reader, not compared: the source's name (a moved file with the same bytes
resumes; the report reads texts from it after checking its SHA-256), the
number of documents and bytes (the first run's: a later ``--limit`` selects
the first LIMIT documents of the same corpus, so folders grow), the ppl-tok
release and the whole :class:`~ppl_tok.lm.spec.LMSpec` under ``"lm"`` (with the
device's index, which changes no number).

Folders written before a compared setting existed are completed where their
value is knowable (:meth:`PerplexityStore.complete`): ``split`` ``"none"``,
``field`` ``"text"`` for a ``.jsonl`` source (else none), ``prune_against``
``"offset"``, and ``backend``/``dtype``/``device`` from their ``"lm"`` entry. A
folder with neither (ppl-tok 0.1.0) cannot say on which dtype and device it ran
(0.1.0 had ``--dtype`` and ``--device``): resuming it is refused, with the fix.

The records hold each document's figures
(:meth:`ppl_tok.scorings.results.DocumentScore.to_record`, ``-inf`` as
``null``), keyed by the document's index. Seconds per batch go to
``timing.jsonl``, apart from the records. A folder written under an old
scoring name (``marginal``, now ``beam``: :data:`ppl_tok.scorings.ALIASES`) is
read under the new one, so it resumes and reports as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ppl_tok.common.jsonl_store import JsonlStore, StoreError, damaged, decode_log
from ppl_tok.lm.device import lm_identity
from ppl_tok.lm.spec import IDENTITY
from ppl_tok.perplexity.partial import check_recorded
from ppl_tok.scorings import ALIASES, DOCUMENT, Scoring, SCORINGS

#: The version of what a record holds for given settings; bump it when the stored figures change meaning.
RECORDS_VERSION = 1
#: The settings of the LM's identity that change numbers, recorded at the top of ``run.json``.
LM_IDENTITY = IDENTITY
#: What two runs of the report must share to be compared (besides the scorings each comparison needs).
COMPARABLE = (*LM_IDENTITY, "window")
#: Settings a folder of ppl-tok 0.1.0 lacks and no rule can fill in.
UNKNOWABLE = ("backend", "dtype", "device")

__all__ = ["COMPARABLE", "LM_IDENTITY", "PerplexityStore", "RECORDS_VERSION", "check_documents", "lm_identity"]


class PerplexityStore(JsonlStore):
    """The records of one perplexity run folder."""

    records_file = "documents.jsonl"
    informational = ("ppl_tok_version", "source", "documents", "bytes", "lm")
    what = "perplexity run folder"
    record_name = "document record"
    fields = {"index": "count", "n_bytes": "count", "n_words": "count", "n_tokens": "count", "windows": "count",
              "log_likelihood": "log", "canonical": "log", "lower": "bound", "upper": "bound", "forwards": "count",
              "canonical_forwards": "count"}

    @classmethod
    def validate(cls, record: Any, where: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The numbers of a document record (:attr:`fields`), every one required, ``n_bytes`` at least 1 and
        ``lower <= upper``: an edited record is an error naming its line, never a figure of the report."""
        record = super().validate(record, where, settings)
        missing = [k for k in ("index", "n_bytes", "n_words", "n_tokens", "windows", "log_likelihood", "canonical")
                   if k not in record]
        if missing:
            raise damaged(where, f"no field {missing[0]!r}")
        if record["n_bytes"] < 1:
            raise damaged(where, "n_bytes is 0 (a document has at least one byte)")
        lower, upper = (decode_log(record[k]) if k in record else None for k in ("lower", "upper"))
        if lower is not None and upper is not None and lower > upper:
            raise damaged(where, f"the certified floor {lower} is above the ceiling {upper}")
        return record

    @staticmethod
    def key(record: dict[str, Any]) -> int:
        index = record["index"]
        if not isinstance(index, int):
            raise TypeError(f"index should be an integer, got {index!r}")
        return index

    @classmethod
    def read_settings(cls, folder: str | Path) -> dict[str, Any]:
        """The folder's ``run.json``, its scoring under its current name (the file is left as it is)."""
        settings = super().read_settings(folder)
        old = settings.get("scoring")
        if isinstance(old, str) and old in ALIASES[DOCUMENT]:
            settings["scoring"] = ALIASES[DOCUMENT][old]
        return settings

    @staticmethod
    def complete(settings: dict[str, Any]) -> dict[str, Any]:
        """``settings`` with the compared settings an older folder lacks, where their value is knowable."""
        out = dict(settings)
        out.setdefault("split", "none")
        if "field" not in out:  # before ``field`` was recorded, JSON Lines corpora were read with --field text
            out["field"] = "text" if str(out.get("source", "")).endswith(".jsonl") else None
        found = document_scoring(out.get("scoring"))
        for k, v in (found.legacy_settings(out) if found is not None else {}).items():  # what the scoring knows
            out.setdefault(k, v)
        if not all(k in out for k in UNKNOWABLE) and isinstance(out.get("lm"), dict):
            for k, v in lm_identity(out["lm"]).items():
                out.setdefault(k, v)
        return out

    @classmethod
    def _open(cls, folder: Path, settings: dict[str, Any], lock: int) -> PerplexityStore:
        if not (folder / cls.settings_file).exists():  # checkpoints alone carry their own settings
            check_recorded(folder, settings, cls.differences)
        return super()._open(folder, settings, lock)

    @classmethod
    def differences(cls, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """The compared settings that differ, one line each; an old folder's knowable settings filled in."""
        old = cls.complete(old)
        missing = [k for k in UNKNOWABLE if k not in old and k in new]
        if missing:
            version = old.get("ppl_tok_version", "0.1.0")
            this_run = ", ".join(f"{k}={new[k]!r}" for k in missing)
            return [f"{', '.join(missing)}: not recorded (a folder of ppl-tok {version}), so its records cannot be "
                    f"checked against this run's ({this_run}); use a new --out folder, or, if you know the folder "
                    "was scored so, add " + ", ".join(f'"{k}": {json.dumps(new[k])}' for k in missing)
                    + " to its run.json"]
        return super().differences(old, new)


def document_scoring(name: object) -> Scoring | None:
    """The registered document-level scoring a folder's settings name (``None``: none is registered under that
    name now, e.g. a user's scoring not imported)."""
    found = SCORINGS.get(name) if isinstance(name, str) else None
    return found if found is not None and DOCUMENT in found.levels else None


def check_documents(store: PerplexityStore, sizes: dict[int, int]) -> None:
    """Each stored record of a document in ``sizes`` (index -> bytes) has that document's length, else an error."""
    for record in store.records:
        want = sizes.get(record["index"])
        if want is not None and record.get("n_bytes") != want:
            raise StoreError(f"{store.path}: document {record['index']} was stored with {record.get('n_bytes')} "
                             f"bytes, this run's has {want}: the folder holds other documents; use a new --out "
                             "folder")
