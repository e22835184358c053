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
setting is refused before a record is read), by :class:`~ppl_tok.common.jsonl_store.JsonlStore`'s
rules (one durable write per checkpoint, a torn last line cut off on open, a malformed or
repeated line an error naming it). Records of documents already stored are left unread.
``canonical`` scoring needs none (it runs a document's windows in a few batched forwards, seconds
for a megabyte); ``canonical+rest`` keeps finished documents only (its particles are drawn for a
whole window in one batched walk, whose state is not saved).
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from ppl_tok.common.jsonl_store import JsonlStore, damaged, repair

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
        return record["index"], record["window"], record["step"]

    @classmethod
    def validate(cls, record: Any, where: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        record = super().validate(record, where, settings)
        missing = [k for k in ("index", "window", "step", "record") if k not in record]
        if missing:
            raise damaged(where, f"no field {missing[0]!r}")
        if not isinstance(record["record"], dict):
            raise damaged(where, "'record' is not an object")
        return record

    @classmethod
    def beside(cls, store: JsonlStore) -> PartialStore:
        """The partial records of ``store``'s folder (open, locked), a torn last line cut off."""
        path = store.folder / cls.records_file
        repair(path)
        records = list(cls.read_records(path, store.settings))
        lock = None if store._lock is None else os.dup(store._lock)  # the folder's flock, shared
        return cls(store.folder, store.settings, records, lock)


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


__all__ = ["CHECKPOINT_SECONDS", "Partial", "PartialStore", "open_partial"]
