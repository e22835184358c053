"""The partial work of the documents in progress: ``partial.jsonl`` in a run folder, so a stopped run resumes mid-document.

A document's record (:mod:`.store`) is written when the document is done; a long document
(one window of a kilobyte and more under ``beam``, ``prefix`` or ``with-end``) takes minutes to
hours. While it runs, every ``checkpoint_every`` seconds (default :data:`CHECKPOINT_SECONDS`)
the state of each of its walks (a window's byte sweep or string walk, between two steps:
:mod:`ppl_tok.strings.checkpoint`) is appended here as one record::

    {"index": document, "window": k, "step": n, "record": <the walk's checkpoint>}

keyed by ``(index, window, step)``; ``step`` counts the window's records from 0, and each one
stores only the pruned masses added since the one before it. A resumed run reads them back,
and each window goes on from its last record (a finished window's last record is its end):
the figures are the uninterrupted run's (the same floats where an LM's rows do not depend on
the batch, else within the rows' rounding tolerance, :mod:`ppl_tok.common.rounding`).

The file is the folder's: written under its lock, behind its ``run.json`` (a resume with another
setting is refused before a record is read). It also carries its run's settings itself, on its first line
(``{"settings": <the run.json of the run that wrote it>}``), so a folder holding only ``partial.jsonl``
(``run.json`` lost or never copied) is not adopted under other settings: a resume compares them by
``run.json``'s rule and refuses a difference in one line naming the setting (:func:`check_recorded`), and a
file without that line (an older ppl-tok's) is refused unless ``run.json`` vouches for it. Written by
:class:`~ppl_tok.common.jsonl_store.JsonlStore`'s rules (one durable write per checkpoint, a torn last line cut off on open, a malformed or
repeated line an error naming it). Records of documents already stored are left unread.
``canonical`` scoring needs none (it runs a document's windows in a few batched forwards, seconds
for a megabyte); ``canonical+rest`` keeps finished documents only (its particles are drawn for a
whole window in one batched walk, whose state is not saved).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import json
from pathlib import Path

from ppl_tok.common.jsonl_store import JsonlStore, SettingsMismatchError, StoreError, damaged, repair

#: seconds between two checkpoints of a document in progress (``--checkpoint-every``)
CHECKPOINT_SECONDS = 60.0


class PartialStore(JsonlStore):
    """The checkpoint records of a run folder (``partial.jsonl``), opened under the folder's lock."""

    records_file = "partial.jsonl"
    what = "perplexity run folder"
    record_name = "checkpoint record"
    fields = {"index": "count", "window": "count", "step": "count"}

    @staticmethod
    def key(record: dict[str, Any]) -> Hashable:
        if _is_header(record):
            return ("settings",)
        return record["index"], record["window"], record["step"]

    @classmethod
    def validate(cls, record: Any, where: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if _is_header(record):
            if not where.endswith(":1"):
                raise damaged(where, "a settings line after the first line")
            if not isinstance(record["settings"], dict):
                raise damaged(where, "'settings' is not an object")
            return record
        record = super().validate(record, where, settings)
        missing = [k for k in ("index", "window", "step", "record") if k not in record]
        if missing:
            raise damaged(where, f"no field {missing[0]!r}")
        if not isinstance(record["record"], dict):
            raise damaged(where, "'record' is not an object")
        return record

    @classmethod
    def beside(cls, store: JsonlStore) -> PartialStore:
        """The partial records of ``store``'s folder (open, locked), a torn last line cut off, the settings on its
        first line compared with ``store``'s (written there if the file holds nothing yet)."""
        path = store.folder / cls.records_file
        repair(path)
        records = list(cls.read_records(path, store.settings))
        header = [r for r in records if _is_header(r)]
        if header and header[0]["settings"] != store.settings:  # written by another folder's run?
            complete = getattr(store, "complete", lambda settings: settings)  # an older run.json, its gaps filled
            _refuse_differences(path, type(store).differences(header[0]["settings"], complete(store.settings)))
        lock = None if store._lock is None else os.dup(store._lock)  # the folder's flock, shared
        out = cls(store.folder, store.settings, [r for r in records if not _is_header(r)], lock)
        if not records:
            out.append([{"settings": store.settings}])
            out.records.clear()
        return out


def _is_header(record: Any) -> bool:
    return isinstance(record, dict) and set(record) == {"settings"}


def _refuse_differences(path: Path, diff: list[str]) -> None:
    if diff:
        raise SettingsMismatchError(f"{path} holds the checkpoints of a run with other settings; use another --out "
                                    "folder or the same settings. Differences: " + "; ".join(diff))


def check_recorded(folder: str | Path, settings: dict[str, Any],
                   differences: Callable[[dict[str, Any], dict[str, Any]], list[str]]) -> None:
    """Refuse to adopt the checkpoints of a folder without ``run.json`` unless their own first line records
    ``settings`` (``differences(recorded, settings)``: the compared settings that differ, one line each)."""
    path = Path(folder) / PartialStore.records_file
    if not path.is_file():
        return
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    if not first.strip():
        return  # nothing written, or a line torn by a kill: no checkpoint to adopt
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        record = None
    if not _is_header(record) or not isinstance(record["settings"], dict):
        if not first.endswith("\n"):
            return  # a first line torn by a kill: cut off on open
        raise StoreError(f"{path} holds checkpoints but not the settings they were computed with (a file of an "
                         f"older ppl-tok, or damaged) and {Path(folder) / 'run.json'} is missing, so they cannot be "
                         "checked against this run's; use a new --out folder (or delete partial.jsonl)")
    _refuse_differences(path, differences(record["settings"], json.loads(json.dumps(settings, allow_nan=False))))


class Partial:
    """The checkpoints a batch of documents resumes from and saves to (``store``: ``None`` keeps nothing).

    :param every: seconds between two checkpoints (0: after every step of the walks).
    """

    def __init__(self, store: PartialStore | None, every: float = CHECKPOINT_SECONDS):
        if not every >= 0:
            raise ValueError(f"checkpoint_every must be a number of seconds >= 0, got {every!r}")
        self.store, self.every = store, every
        self.walks: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for r in sorted(store.records if store else [], key=PartialStore.key):
            got = self.walks.setdefault((r["index"], r["window"]), [])
            if r["step"] != len(got):
                where = f"{store.path}: document {r['index']} window {r['window']}"
                raise damaged(where, f"checkpoint step {r['step']} follows {len(got)} steps")
            got.append(r)

    def resume(self, key: tuple[int, int]) -> list[dict[str, Any]] | None:
        """The checkpoints of window ``key = (document, window)`` in order (``None``: none)."""
        got = self.walks.get(key)
        return [r["record"] for r in got] if got else None

    def options(self, keys: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """The ``resume``/``checkpoint`` arguments of a lockstep of the windows ``keys`` (none without a store)."""
        if self.store is None:
            return {}

        def save(out: list[tuple[int, dict[str, Any]]]) -> None:
            rows = []
            for k, record in out:
                steps = self.walks.setdefault(keys[k], [])
                rows.append({"index": keys[k][0], "window": keys[k][1], "step": len(steps), "record": record})
                steps.append(rows[-1])
            self.store.append(rows)

        return {"resume": [self.resume(k) for k in keys], "checkpoint": save, "checkpoint_every": self.every}

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def open_partial(store: JsonlStore | None, every: float = CHECKPOINT_SECONDS) -> Partial:
    """The :class:`Partial` of a run folder's store (``None``: a run without ``--out``, nothing kept)."""
    return Partial(None if store is None else PartialStore.beside(store), every)


__all__ = ["CHECKPOINT_SECONDS", "Partial", "PartialStore", "check_recorded", "open_partial"]
