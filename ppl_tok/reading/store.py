"""The resumable run folder of a reading study: ``run.json`` + ``events.jsonl`` (one record per text).

Each record holds one text's walk (:class:`~ppl_tok.reading.focal_surprisal.TextEvents`: the prefix events at
every character offset, the word-end events, the canonical tokens' log-probabilities), keyed by the text's id;
every focal-area predictor derives from them, so the regressions never need the LM again. The folder's I/O is
:class:`~ppl_tok.common.jsonl_store.JsonlStore`'s (a killed run resumes where it stopped; a resume under other
settings is refused, naming each difference). Compared: the stimuli's SHA-256, the LM's identity, the beam's
settings, the boundary set and :data:`RECORDS_VERSION`; recorded for the reader only: the release, the whole LM
spec and the stimuli's file name.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Hashable, Sequence
from typing import Any

from ppl_tok.common.jsonl_store import JsonlStore
from ppl_tok.common.version import __version__
from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.device import identity_of
from ppl_tok.reading.focal_surprisal import TextEvents, walk_events
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.units import WordRules

#: bump when what a record holds for given settings changes meaning
RECORDS_VERSION = 1


class EventStore(JsonlStore):
    """One record per text: ``{"text_id": ..., **TextEvents.to_record()}``."""

    records_file = "events.jsonl"
    what = "reading run folder"
    record_name = "text"
    informational = ("release", "lm", "stimuli")

    @staticmethod
    def key(record: dict[str, Any]) -> Hashable:
        return record["text_id"]


def settings_of(lm: LanguageModel, texts: Sequence[str], stimuli: str, config: StringSearchConfig,
                rules: WordRules) -> dict[str, Any]:
    """What the records depend on (compared on resume) and what the reader wants to know (informational)."""
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()
    spec = getattr(lm, "spec", None)
    return {"stimuli_sha256": digest, **identity_of(lm),
            "search": {k: v for k, v in dataclasses.asdict(config).items()}, "boundary": rules.boundary_chars,
            "records_version": RECORDS_VERSION, "release": __version__, "stimuli": stimuli,
            "lm": None if spec is None else spec.to_dict()}


def compute_events(lm: LanguageModel, texts: Sequence[str], text_ids: Sequence[Any], store: EventStore, *,
                   config: StringSearchConfig, rules: WordRules, batch: int = 4,
                   progress: Any = None) -> list[TextEvents]:
    """Walk every text not yet in ``store`` (``batch`` texts walked together), appending each batch as it is done;
    return every text's events, in order. A text the walk cannot finish is an error naming it."""
    import time

    todo = [k for k, tid in enumerate(text_ids) if not store.has_key(tid)]
    for at in range(0, len(todo), batch):
        part = todo[at:at + batch]
        t0, c0 = time.perf_counter(), time.process_time()
        events = walk_events(lm, [texts[k] for k in part], config=config, rules=rules)
        for k, ev in zip(part, events):
            if isinstance(ev, Exception):
                raise ValueError(f"text {text_ids[k]}: {ev}")
        records = [{"text_id": text_ids[k], **ev.to_record()}  # type: ignore[union-attr]
                   for k, ev in zip(part, events)]
        store.append(records,
                     timing={"texts": [text_ids[k] for k in part], "wall_s": time.perf_counter() - t0,
                             "cpu_s": time.process_time() - c0})
        if progress is not None:
            progress(len(todo[:at + batch]), len(todo))
    by_id = {r["text_id"]: r for r in store.records}
    return [TextEvents.from_record(by_id[tid]) for tid in text_ids]
