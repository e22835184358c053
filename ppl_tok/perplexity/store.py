"""The resumable store of a perplexity run: ``run.json`` + ``documents.jsonl`` (one record per document).

The folder's I/O is :class:`ppl_tok.common.jsonl_store.JsonlStore`'s (an exclusive
``flock``, one durable ``write``/``fsync`` per batch, a torn last line cut off
on open, settings compared on open): a run killed at any point (SIGKILL
included) resumes where it stopped and ends with the records an uninterrupted
run writes. ``run.json`` holds the corpus (its SHA-256, documents and bytes),
the model and the scoring settings (the number of documents and bytes, the
source's name, the ppl-tok release and the LM's :class:`~ppl_tok.lm.spec.LMSpec`
under ``"lm"`` are recorded but not compared: a run resumed with a larger
``--limit`` adds to the folder, and a folder from before ``"lm"`` resumes); the records hold each document's figures
(:meth:`ppl_tok.perplexity.score.DocumentScore.to_record`, ``-inf`` as
``null``), keyed by the document's index. Seconds per batch go to
``timing.jsonl``, apart from the records. A folder written under an old
scoring name (``marginal``, now ``beam``: :data:`ppl_tok.scoring.ALIASES`) is
read under the new one, so it resumes and reports as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ppl_tok.common.jsonl_store import JsonlStore
from ppl_tok.scoring import ALIASES, DOCUMENT

#: The version of what a record holds for given settings; bump it when the stored figures change meaning.
RECORDS_VERSION = 1


class PerplexityStore(JsonlStore):
    """The records of one perplexity run folder."""

    records_file = "documents.jsonl"
    informational = ("ppl_tok_version", "source", "documents", "bytes", "field", "split", "lm")
    what = "perplexity run folder"
    record_name = "document record"

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
