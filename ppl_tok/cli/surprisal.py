"""``ppl-tok surprisal FILE|-``: per-unit surprisal over strings (word-end corrected) beside canonical surprisal.

Input: one item (sentence) per line of a UTF-8 text file, or JSON Lines with
``--field``; blank lines are skipped, and items are numbered 0, 1, ... in order
(lines: :func:`ppl_tok.common.lines.split_lines`, ``\n`` alone separates them).
Output: one row per unit, with the item and unit index, as reading-time
pipelines expect: TSV (default), CSV or JSON Lines on standard output
(:mod:`ppl_tok.strings.surprisal` defines the columns). ``--out FILE`` also
keeps the rows in a JSON Lines record file (:class:`SurprisalRecords`): each
item's rows are appended durably as the item is done, and a run started again
with the same ``--out`` reads them back instead of computing them, so a killed
run resumes and standard output still gets every row, in order.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Iterator
from typing import Any

from ppl_tok.cli.common import (STDIN, _load_lm, _read_text, add_json_argument, add_lm_arguments, add_ray_arguments,
                                add_search_arguments, lm_spec, ray_address, search_config)
from ppl_tok.common.arguments import POSITIVE, integer, output_file, positive
from ppl_tok.common.jsonl_store import JsonlStore
from ppl_tok.common.lines import split_lines
from ppl_tok.perplexity.corpus import check_text
from ppl_tok.strings.certified import WIDE_BITS

#: the columns of a row, in order
COLUMNS = ("item", "unit", "text", "start", "end", "byte_start", "byte_end", "surprisal", "canonical", "lower",
           "upper", "informative", "followed_by", "tokens", "hint", "model")


class SurprisalRecords(JsonlStore):
    """``--out``: one JSON line per unit (the columns of :data:`COLUMNS`; ``upper`` ``"Infinity"`` when infinite),
    its settings beside it in ``FILE.settings.json`` (:func:`run_settings`)."""

    record_name = "surprisal row"
    informational = ("ppl_tok_version",)
    fields = {"item": "count", "unit": "count", "start": "count", "end": "count", "byte_start": "count",
              "byte_end": "count", "surprisal": "number", "canonical": "number", "lower": "number", "upper": "bits",
              "tokens": "count"}

    @classmethod
    def validate(cls, record: Any, where: str, settings: Any = None) -> dict[str, Any]:
        """A row's numbers (:attr:`fields`, every column present), its spans in order and ``lower <= upper``."""
        from ppl_tok.common.jsonl_store import damaged

        record = super().validate(record, where, settings)
        missing = [k for k in COLUMNS if k not in record and k != "model"]
        if missing:
            raise damaged(where, f"no column {missing[0]!r}")
        if record["start"] > record["end"] or record["byte_start"] >= record["byte_end"]:
            raise damaged(where, f"the span {record['start']}..{record['end']} (bytes {record['byte_start']}.."
                                 f"{record['byte_end']}) is empty or reversed")
        if record["upper"] not in ("Infinity", None) and record["lower"] > record["upper"]:
            raise damaged(where, f"lower {record['lower']} is above upper {record['upper']}")
        return record

    @staticmethod
    def key(record: dict[str, Any]) -> tuple[int, int]:
        item, unit = record["item"], record["unit"]
        if not isinstance(item, int) or not isinstance(unit, int):
            raise TypeError(f"item and unit should be integers, got {item!r}, {unit!r}")
        return item, unit


def read_items(path: str, field: str | None) -> list[str]:
    """The items of the input: its non-blank lines, or the ``field`` of each JSON line."""
    text = _read_text(path, "FILE")
    where = "standard input" if path == STDIN else path
    items = []
    for n, line in enumerate(split_lines(text), 1):
        if not line.strip():
            continue
        if field is None:
            items.append(line)
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}:{n}: not a JSON line ({err.msg}); without --field the input is text") from None
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise ValueError(f"{where}:{n}: no string field {field!r}")
        if not record[field]:
            raise ValueError(f"{where}:{n}: the field {field!r} is empty")
        check_text(record[field], f"{where}:{n}", field)  # no escaped NUL, no lone surrogate, as perplexity's input
        items.append(record[field])
    if not items:
        raise ValueError(f"{where} holds no items (no non-blank line)")
    return items


def check_item_sizes(path: str, items: list[str], context: str) -> None:
    """Each item, after ``--context``, within the ``lm_bytes`` limit, before the model loads: the LM over strings
    conditions on the whole item (no window), so its states grow with it (a 1 MB line asked for 40 GB)."""
    from ppl_tok.limits import limits

    where = "standard input" if path == STDIN else path
    extra = len(context.encode("utf-8"))
    for n, item in enumerate(items):
        limits().check("lm_bytes", extra + len(item.encode("utf-8")),
                       f"{where}: item {n}'s bytes (with --context's)")


def read_regions(path: str, n_items: int) -> list[list[tuple[int, int]]]:
    """``--regions``: a CSV of ``item,start,end`` character spans (a header line is allowed), per item."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            lines = list(csv.reader(f))
    except OSError as err:
        raise ValueError(f"--regions: cannot read {path}: {err.strerror or err}") from None
    regions: list[list[tuple[int, int]]] = [[] for _ in range(n_items)]
    for n, row in enumerate(lines, 1):
        if not row or (n == 1 and row[0].strip().lower() == "item"):
            continue
        try:
            item, start, end = (int(v) for v in row)
        except ValueError:
            raise ValueError(f"{path}:{n}: a region is item,start,end (three integers), got {','.join(row)!r}") from None
        if not 0 <= item < n_items:
            raise ValueError(f"{path}:{n}: item {item} is not in the input (items 0..{n_items - 1})")
        regions[item].append((start, end))
    missing = [k for k, r in enumerate(regions) if not r]
    if missing:
        raise ValueError(f"{path}: no regions for item {missing[0]}" + (f" (and {len(missing) - 1} more)"
                                                                          if len(missing) > 1 else ""))
    return regions


def _row(item: int, r: Any, model: str) -> dict[str, Any]:
    """A row as standard JSON: an infinite ``upper`` (no upper bound) as ``"Infinity"``, as ``--json`` writes
    it (``null`` in the rows files of ppl-tok 0.2, read back as ``"Infinity"``)."""
    d = {"item": item, **(r if isinstance(r, dict) else r.to_dict()), "model": model}
    d["upper"] = "Infinity" if d["upper"] in (math.inf, None, "Infinity") else d["upper"]
    return {k: d[k] for k in COLUMNS}


class _Writer:
    """Rows to standard output in the chosen format (the header with the first rows: a run refused at its
    first item prints nothing)."""

    def __init__(self, fmt: str, columns: tuple[str, ...] = COLUMNS):
        self.fmt, self.columns = fmt, columns
        self.csv = None if fmt == "jsonl" else csv.writer(sys.stdout, dialect="excel-tab" if fmt == "tsv" else "excel",
                                                          lineterminator="\n")
        self.started = False

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not self.started and self.csv is not None:
            self.csv.writerow(self.columns)
        self.started = True
        for row in rows:
            if self.csv is None:
                print(json.dumps(row, ensure_ascii=False, allow_nan=False))
            else:
                self.csv.writerow(["inf" if k == "upper" and row[k] == "Infinity" else
                                   ("" if row[k] is None else row[k]) for k in self.columns])
        sys.stdout.flush()


def _stored(store: SurprisalRecords | None) -> dict[int, list[dict[str, Any]]]:
    done: dict[int, list[dict[str, Any]]] = {}
    for r in store.records if store is not None else []:
        done.setdefault(r["item"], []).append(_row(r["item"], r, r.get("model")))
    return done


def _check_stored(out: str, item: int, stored: list[dict[str, Any]], texts: list[str], model: str) -> None:
    for r in stored:
        u = r["unit"]
        if r.get("model") != model or u >= len(texts) or r.get("text") != texts[u]:
            raise ValueError(f"{out}: item {item} unit {u} holds {r.get('text')!r} under {r.get('model')}, not "
                             f"{texts[u] if u < len(texts) else None!r} under {model}: another input, --units or "
                             "--model wrote it (give another --out)")


def _fill_on_ray(args: argparse.Namespace, items: list[str], regions: list[Any] | None, store: SurprisalRecords,
                 done: dict[int, list[dict[str, Any]]]) -> None:
    """``--ray``: the items ``--out`` lacks, scored on Ray actors and appended there by this process alone."""
    from ppl_tok.lm.loader import LMLoader
    from ppl_tok.strings.distributed import SurprisalJob, surprisals_ray
    from ppl_tok.strings.surprisal import WordRules, unit_byte_spans

    rules = WordRules(split_punctuation=not args.keep_punctuation)
    todo = []
    for item, text in enumerate(items):
        units = args.units if regions is None else regions[item]
        spans, _ = unit_byte_spans(text, units, rules)
        data = text.encode("utf-8")
        stored = done.get(item, [])
        _check_stored(args.out, item, stored, [data[a:b].decode("utf-8", errors="backslashreplace")
                                               for a, b in spans], args.model)
        if len(stored) < len(spans):
            todo.append((item, text, units))

    def append(item: int, units: list[dict[str, Any]]) -> None:
        rows = [_row(item, u, args.model) for u in units]
        store.append([r for r in rows if not store.has_key((item, r["unit"]))])
        done[item] = rows

    job = SurprisalJob(context=args.context, config=search_config(args), rules=rules, wide=args.wide,
                       final=args.final)
    surprisals_ray(LMLoader.from_spec(lm_spec(args)), job, todo, append, workers=args.workers,
                   address=args.ray or None, batch_items=args.batch_size)


def run_settings(args: argparse.Namespace, items: list[str], regions: list[Any] | None, config: Any
                 ) -> dict[str, Any]:
    """What ``--out``'s rows depend on, recorded beside the file and compared on resume (the rule of every
    store: :class:`~ppl_tok.common.jsonl_store.JsonlStore`): the items, the units, the LM asked for and the
    beam's settings."""
    import dataclasses
    import hashlib

    from ppl_tok.common.version import __version__
    from ppl_tok.lm.device import lm_identity

    spec = lm_spec(args)
    digest = hashlib.sha256(json.dumps([items, regions]).encode("utf-8")).hexdigest()
    return {"items_sha256": digest, "items": len(items), "field": args.field,
            "units": "regions" if regions is not None else args.units, "keep_punctuation": args.keep_punctuation,
            "context": args.context, "model": spec.model, **lm_identity(spec.to_dict()), "bos_id": spec.bos_id,
            "search": dataclasses.asdict(config), "wide_bits": args.wide, "ppl_tok_version": __version__,
            # the last unit's event (rows stored before --final, under "end" for every unit kind, are refused)
            "final": args.final or ("end" if regions is None and args.units in ("char", "byte") else "boundary")}


def _shared_lm(args: argparse.Namespace) -> Any:
    """The run's LM, loaded once (the walk and ``--entropy`` share it)."""
    if getattr(args, "loaded_lm", None) is None:
        args.loaded_lm = _load_lm(args)
    return args.loaded_lm


def _with_entropy(args: argparse.Namespace, items: list[str], regions: list[Any] | None,
                  done: Iterator[list[dict[str, Any]]]) -> Iterator[list[dict[str, Any]]]:
    """Each item's rows with ``next_token_entropy`` (:mod:`ppl_tok.strings.entropy`), one prefill per item."""
    from ppl_tok.strings.entropy import next_token_entropies
    from ppl_tok.strings.surprisal import WordRules

    rules = WordRules(split_punctuation=not args.keep_punctuation)
    for item, rows in enumerate(done):
        units = args.units if regions is None else regions[item]
        (ents,) = next_token_entropies(_shared_lm(args), [items[item]], units=[units], contexts=[args.context],
                                       rules=rules)
        yield [{**r, "next_token_entropy": h} for r, h in zip(rows, ents)]


def _run(args: argparse.Namespace, items: list[str], regions: list[Any] | None) -> Iterator[list[dict[str, Any]]]:
    """Each item's rows in order: read back from ``--out`` or computed, ``--batch-size`` items walked together
    (:func:`~ppl_tok.strings.surprisal.surprisals_many`), and appended there item by item.

    An item that fails (a byte no token covers) is an error naming it, raised once the items before it are
    printed; the rows of the other items of its batch are stored in ``--out`` first, so a rerun does not
    compute them again.
    """
    from tqdm import tqdm

    from ppl_tok.strings.surprisal import WordRules, surprisal_batch, unit_byte_spans

    config = search_config(args)
    rules = WordRules(split_punctuation=not args.keep_punctuation)
    store = SurprisalRecords.open_file(args.out, run_settings(args, items, regions, config)) if args.out else None
    source = "standard input" if args.file == STDIN else args.file
    try:
        done = _stored(store)
        if args.ray is not None:
            try:
                _fill_on_ray(args, items, regions, store, done)
            except ValueError as err:  # an item that failed: the others are stored
                raise ValueError(f"{source}: {err}") from None
        model = args.model
        progress = tqdm(total=len(items), unit="item", file=sys.stderr, leave=False,
                        disable=not (args.progress or sys.stderr.isatty()))
        for lo in range(0, len(items), args.batch_size):
            chunk = range(lo, min(lo + args.batch_size, len(items)))
            rows: dict[int, list[dict[str, Any]]] = {}
            pending = []
            for item in chunk:
                units = args.units if regions is None else regions[item]
                spans, _ = unit_byte_spans(items[item], units, rules)
                data = items[item].encode("utf-8")
                texts = [data[a:b].decode("utf-8", errors="backslashreplace") for a, b in spans]
                stored = sorted(done.get(item, []), key=lambda r: r["unit"])
                _check_stored(args.out, item, stored, texts, model)
                rows[item] = stored
                if len(stored) < len(spans):
                    pending.append((item, units))
            failed: dict[int, Exception] = {}
            if pending:
                lm = _shared_lm(args)
                found = surprisal_batch(lm, [items[i] for i, _ in pending], units=[u for _, u in pending],
                                        contexts=[args.context] * len(pending), config=config, rules=rules,
                                        wide=args.wide, final=args.final)
                for (item, _), result in zip(pending, found):
                    if isinstance(result, Exception):
                        failed[item] = result
                        continue
                    rows[item] = [_row(item, r, model) for r in result]
                    if store is not None:
                        store.append([r for r in rows[item] if not store.has_key((item, r["unit"]))])
            for item in chunk:
                if item in failed:  # the items before it are printed, the whole batch's others are stored
                    raise ValueError(f"{source}: item {item}: {failed[item]}") from None
                progress.update(1)
                yield rows[item]
        progress.close()
    finally:
        if store is not None:
            store.close()


def cmd_surprisal(args: argparse.Namespace) -> None:
    lm_spec(args)  # the LM flags, checked before any work
    ray_address(args)  # --ray needs --out; --workers needs --ray
    items = read_items(args.file, args.field)
    check_item_sizes(args.file, items, args.context)
    regions = read_regions(args.regions, len(items)) if args.regions else None
    if regions is not None:
        from ppl_tok.strings.surprisal import region_spans

        for item, (text, spans) in enumerate(zip(items, regions)):
            try:
                region_spans(text, spans)
            except ValueError as err:
                raise ValueError(f"--regions {args.regions}: item {item}: {err}") from None
    from ppl_tok.strings.reading import READING_COLUMNS, reading_columns, spillover_names

    extra = () if args.spillover is None else (READING_COLUMNS[0], *spillover_names(args.spillover),
                                                *READING_COLUMNS[1:])
    done = _run(args, items, regions)
    if args.entropy:
        done = _with_entropy(args, items, regions, done)
        extra += ("next_token_entropy",)
    done = ((rs if args.spillover is None else reading_columns(rs, args.spillover)) for rs in done)
    if args.json:
        from ppl_tok.common.jsonout import to_json

        rows = [r for rs in done for r in rs]
        print(to_json({"model": args.model, "units": "regions" if regions else args.units, "items": len(items),
                       "beam": args.beam, "prune": args.prune, "rows": rows}))
        return
    writer = _Writer(args.format, COLUMNS + extra)
    for rows in done:
        writer.write(rows)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``surprisal`` to the ``ppl-tok`` subcommands."""
    p = sub.add_parser("surprisal", help="per-word (character, byte, region) surprisal over strings with the "
                       "word-end correction, beside canonical-token surprisal, one row per unit",
                       description="Per-unit surprisal in bits over strings (every tokenization summed; a word's end "
                                   "conditioned on: the next character is whitespace, punctuation or the end), "
                                   "beside canonical-token surprisal and a certified bracket (docs/strings.md). "
                                   "Input: one item per line, or JSON Lines with --field (blank lines skipped; items "
                                   "numbered from 0). Output: one row per unit with the item and unit index, TSV, "
                                   "CSV or JSON Lines on standard output. --out FILE also keeps the rows (JSON "
                                   "Lines), item by item: a killed run started again with the same --out resumes, "
                                   "and standard output still gets every row, in order.")
    p.add_argument("file", metavar="FILE", help="one item per line (UTF-8), JSON Lines with --field, or - (stdin)")
    p.add_argument("--field", help="JSON Lines: the field holding each item's text")
    p.add_argument("--units", choices=("word", "char", "byte"), default="word",
                   help="word (default: whitespace and punctuation rules of docs/strings.md), char (UTF-8), byte")
    p.add_argument("--regions", metavar="CSV", help="a CSV of item,start,end character spans that tile each item "
                   "(overrides --units; the word-end correction applies where the text goes on with a boundary)")
    p.add_argument("--keep-punctuation", action="store_true",
                   help="words keep their punctuation (\" boat.\" one unit) instead of punctuation runs being units")
    p.add_argument("--context", default="", help="text every item continues, canonically tokenized (default: none)")
    p.add_argument("--format", choices=("tsv", "csv", "jsonl"), default="tsv", help="the rows' format (default tsv)")
    p.add_argument("--out", type=output_file, metavar="FILE",
                   help="also keep the rows here (JSON Lines), item by item; a killed run resumes from it")
    p.add_argument("--batch-size", type=POSITIVE, default=16, metavar="N",
                   help="items walked together, one LM call serving every walk that waits for a forward (default 16; with --ray: items per "
                        "actor batch); the rows do not depend on it (beyond float32 rounding of a batched forward)")
    add_lm_arguments(p)
    add_search_arguments(p, prefill=False)
    add_ray_arguments(p, "batches of items")
    p.add_argument("--wide", type=positive, default=WIDE_BITS, metavar="BITS",
                   help=f"flag a certified bracket wider than this as uninformative (default {WIDE_BITS:g}, the rule "
                        "of every string command)")
    p.add_argument("--final", choices=("boundary", "end", "none"),
                   help="what the last unit of an item is conditioned on: boundary (default for words and regions: "
                        "a boundary character or the end follows, as for interior words; in a reading study a "
                        "sentence is followed by more text), end (the string ends: the default for --units char and "
                        "byte), none (nothing)")
    p.add_argument("--spillover", type=integer(0), metavar="K",
                   help="add reading-study columns: length (characters, whitespace left out), the previous K units' "
                        "surprisal and canonical (surprisal_prev1.., empty at an item's start) and the item's totals "
                        "(item_surprisal, item_canonical); 0: length and totals only")
    p.add_argument("--entropy", action="store_true",
                   help="add next_token_entropy: the entropy in bits of the LM's next token after each unit's canonical "
                        "tokens, an approximation of the next word's entropy, not one over strings (docs/strings.md); "
                        "costs one canonical prefill per item, canonical scoring's cost")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    add_json_argument(p)
    p.set_defaults(func=cmd_surprisal)


__all__ = ["register"]
