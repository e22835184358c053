"""Many prompts at once: conditionals, next bytes, generations and surprisals, for one LM or an ensemble, into a resumable store.

An **item** is a prompt string ``x`` (and, for a conditional, a text ``y``). :func:`run_items` answers
each item with one registered **task** (:mod:`ppl_tok.strings.tasks`: ``conditional``, ``next``,
``generate``, ``surprisal``, or one of the user's), all after the same context ``c`` and beam settings. It is the one runner
of every task: one prompt is a batch of one item, a file of prompts is batches, a folder (``out``) makes the
run resumable, and :mod:`ppl_tok.strings.distributed` deals the same batches to Ray actors.

**Batching.** Items run in fixed batches of ``batch_size`` consecutive items (by index, whatever is
already stored). The prompts' canonical heads of a batch are prefilled in one batched call per LM
(:func:`~ppl_tok.strings.prefill.prefill_heads`, where the strings engine batches a walk); each item's
tail is then walked byte by byte (``on_bytes`` reports every byte: progress over long prompts). A batch's
records are appended to the store in one durable write (:class:`StringsStore`), so a kill loses at most
the batch in progress and a rerun computes only the missing items, in the same batches as an
uninterrupted run: its records are the same. (On an exact LM, equal bit for bit; on a float32 transformer
a state the LM's prefix cache kept from an earlier item can differ from a recomputed one by rounding.)

An item that cannot be answered (its prompt has probability zero under the beam, a dead end, a prompt
longer than the model's window) is stored as ``{"index", "error"}``: it is counted, never dropped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ppl_tok.common.jsonl_store import JsonlStore, check_fields, damaged, encode_log
from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.device import identity_of
from ppl_tok.strings.ensemble import Ensemble
from ppl_tok.strings.prefill import Head, prefill_heads
from ppl_tok.strings.state import StringState
from ppl_tok.strings.tasks import (TASKS, Item, Options, StringTask, item_seed, string_task,  # noqa: F401 (re-exported)
                                   task_settings)

#: the version of what a record holds for given settings; bump it when the stored figures change meaning
RECORDS_VERSION = 1
#: per-record figures that are timings, not results: left out of the records (a resumed run's equal an
#: uninterrupted one's) and summed into the store's timing file
TIMINGS = ("seconds", "bytes_per_second")


@dataclass(frozen=True)
class Members:
    """What an item is walked under: one LM, or several combined as a :class:`~ppl_tok.strings.ensemble.Ensemble`.

    :param kind: ``"mixture"`` or ``"product"`` (several LMs only).
    :param weights: the mixture's prior or the product's exponents (``None``: ``1/K`` each).
    """

    lms: tuple[LanguageModel, ...]
    kind: str = "mixture"
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.lms:
            raise ValueError("give at least one LM")
        if self.weights is not None and len(self.weights) != len(self.lms):
            raise ValueError(f"{len(self.lms)} LMs but {len(self.weights)} weights: give one weight per LM")

    @property
    def ensemble(self) -> bool:
        return len(self.lms) > 1

    def identity(self) -> dict[str, Any]:
        """The settings of the members that change a number (each LM's identity, and the combination)."""
        out: dict[str, Any] = {"models": [identity_of(lm) for lm in self.lms]}
        if self.ensemble:
            out.update(kind=self.kind, weights=None if self.weights is None else list(self.weights))
        return out


class StringsStore(JsonlStore):
    """A batch run folder: ``run.json`` (the settings, compared on resume) and ``records.jsonl`` (one per item).

    The records are keyed by the item's ``index``; ``-inf`` is stored as ``"-Infinity"``.
    """

    informational = ("ppl_tok_version", "input", "items", "lm")
    #: settings a folder written before they were recorded holds implicitly
    defaults: ClassVar[dict[str, Any]] = {"extend_threshold": 0.0}
    what = "strings batch folder"
    record_name = "item record"
    fields = {"index": "count", "estimate": "bound", "log_prob": "bound", "forwards": "count", "bytes": "count"}
    #: a surprisal record's units (``upper``: ``"Infinity"`` where there is no upper bound)
    unit_fields = {"unit": "count", "start": "count", "end": "count", "byte_start": "count", "byte_end": "count",
                   "surprisal": "number", "canonical": "number", "lower": "number", "upper": "bits", "tokens": "count"}

    @classmethod
    def validate(cls, record: Any, where: str, settings: Any = None) -> dict[str, Any]:
        """An item record's numbers (:attr:`fields`; each of ``next``'s ``log_probs`` a number or
        ``"-Infinity"``) and, where both are numbers, ``lower <= upper``."""
        record = super().validate(record, where, settings)
        log_probs = record.get("log_probs")
        if isinstance(log_probs, dict):
            check_fields(log_probs, where, dict.fromkeys(log_probs, "bound"))
        lower, upper = record.get("lower"), record.get("upper")
        if isinstance(lower, (int, float)) and isinstance(upper, (int, float)) and lower > upper:
            raise damaged(where, f"lower {lower} is above upper {upper}")
        for k, unit in enumerate(record.get("units") or ()):  # surprisal's rows
            check_fields(unit, f"{where} unit {k}", cls.unit_fields)
            missing = next((name for name in _unit_columns() if name not in unit), None)
            if missing is not None:  # a row is written with every column: never a KeyError later
                raise damaged(where, f"unit {k} has no field {missing!r}")
            if unit.get("upper") != "Infinity" and unit.get("lower", 0) > unit.get("upper", math.inf):
                raise damaged(where, f"unit {k}: lower {unit['lower']} is above upper {unit['upper']}")
        return record

    @classmethod
    def differences(cls, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """:meth:`JsonlStore.differences`, with the settings the folder's task holds implicitly
        (:attr:`~ppl_tok.strings.tasks.StringTask.implicit`: an older ``conditional`` folder's event, ``prefix``)."""
        name = old.get("task")
        implicit = string_task(name).implicit if isinstance(name, str) and name in TASKS.names() else {}
        return super().differences({**implicit, **old}, new)

    @staticmethod
    def key(record: dict[str, Any]) -> int:
        index = record["index"]
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"index should be an integer, got {index!r}")
        return index


def _unit_columns() -> tuple[str, ...]:
    """The fields of a surprisal unit (:class:`~ppl_tok.strings.surprisal.UnitSurprisal`): a stored unit has every
    one."""
    from dataclasses import fields

    from ppl_tok.strings.surprisal import UnitSurprisal

    return tuple(f.name for f in fields(UnitSurprisal))


def batch_settings(task: str | StringTask, members: Members, options: Options, *, input_sha256: str | None = None,
                   fields: dict[str, Any] | None = None, batch_size: int = 8, extra: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """The ``run.json`` of a batch run: every setting that can change a record (compared on resume).

    ``input_sha256`` and ``fields`` name the items (the input's bytes and which fields were read);
    ``batch_size`` is compared because a batch's prefill is one forward (rounding on a float LM);
    ``extra``: informational entries (``input``, ``items``, ``lm``), recorded for the reader.
    """
    from ppl_tok.common.version import __version__

    task = as_task(task)
    return {"task": task.name, "input_sha256": input_sha256, **(fields or {}), **members.identity(),
            **task_settings(task, options), "batch_size": batch_size, "records_version": RECORDS_VERSION,
            "ppl_tok_version": __version__, **(extra or {})}


# ------------------------------------------------------------------ walking
def walk(lm: LanguageModel, prompt: str | bytes, head: Head | None, options: Options,
         on_bytes: Callable[[int], None] | None = None) -> StringState:
    """The :class:`StringState` after ``prompt`` (``head``: its head already prefilled; ``None``: prefilled here),
    the tail fed byte by byte.

    The same state as ``StringState(lm, context, config, prompt=prompt)`` (which feeds the tail at once);
    ``on_bytes`` is called with the head's bytes, then with 1 after each byte of the tail (progress).
    """
    prompt = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
    if head is None:
        head = prefill_heads(lm, [prompt], [options.context], options.config)[0]
    state = StringState(lm, options.context, options.config, prompt=prompt[:head.n_bytes], head=head)
    if on_bytes is not None:
        on_bytes(head.n_bytes)
    for b in prompt[head.n_bytes:]:
        state.extend(b)
        if on_bytes is not None:
            on_bytes(1)
    return state


def _heads(lm: LanguageModel, prompts: list[bytes], options: Options) -> list[Head | ValueError]:
    """The prompts' heads in one batched call; where that fails, each prompt's alone (its error kept)."""
    try:
        return list(prefill_heads(lm, prompts, [options.context] * len(prompts), options.config))
    except ValueError:
        out: list[Head | ValueError] = []
        for p in prompts:
            try:
                out.append(prefill_heads(lm, [p], [options.context], options.config)[0])
            except ValueError as err:
                out.append(err)
        return out


def item_bytes(task: str | StringTask, item: Item, options: Options, members: Members) -> int:
    """The bytes :func:`run_items` reports for ``item`` (``on_bytes``): its prompt once per member, then what the
    task walks after it (:meth:`~ppl_tok.strings.tasks.StringTask.bytes_after`)."""
    return len(item.prompt.encode("utf-8")) * len(members.lms) + as_task(task).bytes_after(item, options)


def answer(task: str | StringTask, members: Members, item: Item, options: Options, heads: Sequence[Head | None] | None = None,
           on_bytes: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One item's record: ``task`` after its prompt under ``members`` (``heads``: its prompt's, one per LM).

    Errors of the item (a ``ValueError``: a dead end, a prompt of probability zero) propagate.
    """
    implementation = task = as_task(task)
    check_members(task, members)
    if implementation.walks(options):
        (found,) = implementation.answer_items(members.lms, [item], options)
        if isinstance(found, ValueError):
            raise found
        if on_bytes is not None:
            on_bytes(item_bytes(task, item, options, members))
        return found
    heads = [None] * len(members.lms) if heads is None else heads
    states = [walk(lm, item.prompt, h, options, on_bytes) for lm, h in zip(members.lms, heads)]
    target = Ensemble(states, members.kind, members.weights) if members.ensemble else states[0]
    return implementation.answer(target, item, options, on_bytes)


def storable(value: Any) -> Any:
    """``value`` as standard JSON for a store: ``-inf`` as ``"-Infinity"`` (as ``--json`` writes it); NaN or
    ``+inf`` is an error (a bug)."""
    if isinstance(value, float):
        return encode_log(value)
    if isinstance(value, dict):
        return {k: storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value


def _record(task: StringTask, members: Members, item: Item, options: Options, heads: list[Head | ValueError],
            on_bytes: Callable[[int], None] | None) -> tuple[dict[str, Any], float]:
    """``(record, seconds)`` of one item; an item's own error is its record."""
    start = time.perf_counter()
    error = next((h for h in heads if isinstance(h, ValueError)), None)
    try:
        if error is not None:
            raise error
        body = answer(task, members, item, options, heads, on_bytes)  # type: ignore[arg-type]
    except ValueError as err:
        body = {"prompt": item.prompt, "error": " ".join(str(err).split()) or type(err).__name__}
    if item.text is not None and "text" not in body:
        body["text"] = item.text
    record = {"index": item.index, "where": item.where,
              **storable({k: v for k, v in body.items() if k not in TIMINGS})}
    return record, time.perf_counter() - start


def pending_batches(items: Sequence[Item], done: set[int], batch_size: int
                    ) -> list[tuple[list[Item], list[Item]]]:
    """``(batch, its items not in done)`` for each batch of ``batch_size`` consecutive items that has any:
    the batches are fixed by position, whatever is stored, so a resumed run prefills as an uninterrupted one."""
    out = []
    for lo in range(0, len(items), batch_size):
        chunk = list(items[lo: lo + batch_size])
        todo = [it for it in chunk if it.index not in done]
        if todo:
            out.append((chunk, todo))
    return out


def answer_batch(task: str | StringTask, members: Members, chunk: Sequence[Item], todo: Sequence[Item], options: Options,
                 on_bytes: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """The records of ``todo`` (items of the batch ``chunk``): the whole batch's prompt heads prefilled in one
    call per LM (the same prefill on a resume), then each item answered; an item's own error is its record.
    A task that walks its items itself (:attr:`~ppl_tok.strings.tasks.StringTask.walks_items`) is given ``todo``
    at once."""
    implementation = task = as_task(task)
    if implementation.walks(options):
        return _own_walk(task, members, todo, options, on_bytes)
    prompts = [it.prompt.encode("utf-8") for it in chunk]
    heads = [_heads(lm, prompts, options) for lm in members.lms]
    new = []
    for it in todo:
        k = list(chunk).index(it)
        seen = [0]

        def count(n: int) -> None:
            seen[0] += n
            if on_bytes is not None:
                on_bytes(n)

        record, _ = _record(task, members, it, options, [h[k] for h in heads], count)
        if on_bytes is not None and seen[0] < item_bytes(task, it, options, members):
            on_bytes(item_bytes(task, it, options, members) - seen[0])  # an early stop or an error
        new.append(record)
    return new


def _own_walk(task: StringTask, members: Members, todo: Sequence[Item], options: Options,
              on_bytes: Callable[[int], None] | None) -> list[dict[str, Any]]:
    """:func:`answer_batch` for a task that walks a batch's items together: one record per item, as
    :func:`_record` writes it (an item's own error is its record)."""
    check_members(task, members)
    found = task.answer_items(members.lms, list(todo), options)
    new = []
    for it, body in zip(todo, found, strict=True):
        if isinstance(body, ValueError):
            body = {"prompt": it.prompt, "error": " ".join(str(body).split()) or type(body).__name__}
        new.append({"index": it.index, "where": it.where,
                    **storable({k: v for k, v in body.items() if k not in TIMINGS})})
        if on_bytes is not None:
            on_bytes(item_bytes(task, it, options, members))
    return new


def as_task(task: str | StringTask) -> StringTask:
    """The task object: a name is resolved here (:func:`~ppl_tok.strings.tasks.string_task`; an unknown one is an
    error naming the registered ones), once at the runner's edge, and the object passed down."""
    return task if isinstance(task, StringTask) else string_task(task)


def check_members(task: str | StringTask, members: Members) -> None:
    """A task that does not answer under an ensemble (surprisal) refuses several LMs."""
    task = as_task(task)
    if members.ensemble and not task.ensembles:
        raise ValueError(f"the {task.name} task walks one LM: give one model (an ensemble of {len(members.lms)} was given)")


@dataclass
class BatchRun:
    """What :func:`run_items` did: the records of every item (in index order), and how many it computed."""

    records: list[dict[str, Any]]
    computed: int
    stored: int
    seconds: float

    @property
    def errors(self) -> int:
        return sum("error" in r for r in self.records)

    @classmethod
    def of(cls, items: Sequence[Item], done: dict[int, dict[str, Any]], computed: int, start: float) -> BatchRun:
        """The run's summary: the records of ``items`` in ``done`` (in index order), ``computed`` of them now, the
        seconds since ``start`` (``time.perf_counter()``)."""
        wanted = [it.index for it in items]
        return cls([done[i] for i in wanted if i in done], computed, len(wanted) - computed,
                   time.perf_counter() - start)


def check_batch_size(batch_size: Any) -> None:
    """``batch_size`` must be a positive integer."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def run_items(task: str | StringTask, members: Members, items: Sequence[Item], options: Options, *,
              out: str | Path | None = None, settings: dict[str, Any] | None = None, batch_size: int = 8,
              on_bytes: Callable[[int], None] | None = None,
              on_records: Callable[[list[dict[str, Any]]], None] | None = None) -> BatchRun:
    """Answer every item with ``task`` (module docstring), in batches, storing each batch's records in ``out``.

    :param out: a :class:`StringsStore` folder (``None``: nothing stored): items whose record it holds
        are not computed again; ``settings`` (default :func:`batch_settings`) must equal the folder's.
    :param on_bytes: called with the bytes walked (progress; stored items count at once).
    :param on_records: called with each batch's new records, in index order, as they are computed.
    """
    task = as_task(task)  # an unknown task: its error before anything runs
    check_members(task, members)
    check_batch_size(batch_size)
    start = time.perf_counter()
    store = None
    if out is not None:
        store = StringsStore.open(out, settings if settings is not None else
                                  batch_settings(task, members, options, batch_size=batch_size))
    try:
        done = {r["index"]: r for r in store.records} if store is not None else {}
        if on_bytes is not None:
            on_bytes(sum(item_bytes(task, it, options, members) for it in items if it.index in done))
        computed = 0
        for chunk, todo in pending_batches(items, set(done), batch_size):
            t0 = time.perf_counter()
            new = answer_batch(task, members, chunk, todo, options, on_bytes)
            if store is not None:
                store.append(new, timing={"items": len(new), "seconds": time.perf_counter() - t0})
            done.update((r["index"], r) for r in new)
            computed += len(new)
            if on_records is not None:
                on_records(new)
    finally:
        if store is not None:
            store.close()
    return BatchRun.of(items, done, computed, start)


__all__ = ["BatchRun", "Item", "Members", "Options", "RECORDS_VERSION", "StringsStore", "TASKS", "answer",
           "answer_batch", "as_task", "batch_settings", "check_batch_size", "check_members", "item_bytes", "item_seed", "pending_batches", "run_items", "storable",
           "walk"]
