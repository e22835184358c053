"""``ppl-tok surprisal FILE|-``: per-unit surprisal over strings (word-end corrected) beside canonical surprisal.

Input: one item (sentence) per line of a UTF-8 text file, or JSON Lines with
``--field``; blank lines are skipped, and items are numbered 0, 1, ... in order
(lines: :func:`ppl_tok.common.lines.split_lines`, ``\n`` alone separates them).
Output: one row per unit, with the item and unit index, as reading-time
pipelines expect: TSV (default), CSV or JSON Lines on standard output
(:mod:`ppl_tok.strings.surprisal` defines the columns). The items run through the one runner of every string
task (the registered task ``surprisal``, :func:`ppl_tok.strings.batch.run_items`; ``--ray``:
:func:`ppl_tok.strings.distributed.run_items_ray`). ``--out DIR`` keeps the records in a run folder
(:class:`~ppl_tok.strings.batch.StringsStore`: one record per item, each batch appended durably as it is
done), and a run started again with the same ``--out`` reads them back instead of computing them, so a killed
run resumes and standard output still gets every row, in order. A rows file of an earlier ppl-tok (``--out
FILE``, one line per unit) is refused with what to do.
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
from ppl_tok.common.arguments import POSITIVE, integer, run_folder
from ppl_tok.cli.strings import add_task_flags
from ppl_tok.common.lines import split_lines
from ppl_tok.perplexity.corpus import check_text
from ppl_tok.strings.surprisal_default import SURPRISAL_LAZY

#: the columns of a row, in order
COLUMNS = ("item", "unit", "text", "start", "end", "byte_start", "byte_end", "surprisal", "canonical", "lower",
           "upper", "informative", "followed_by", "tokens", "hint", "model")


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
    return {k: d[k] for k in COLUMNS + ("next_token_entropy",) if k in d}


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


#: ``ppl-tok surprisal``'s default lazy-extension shares: the one default of every surprisal
#: (:data:`ppl_tok.strings.surprisal_default.SURPRISAL_LAZY`, which the Python functions read too)
DEFAULT_LAZY = SURPRISAL_LAZY
#: the exhaustive setting (``--exhaustive``): every prefix the beam keeps is extended
EXHAUSTIVE = {"extend_threshold": 0.0, "boundary_threshold": None, "rejoin_threshold": None}


def apply_defaults(args: argparse.Namespace) -> None:
    """The lazy shares of the run: ``--exhaustive``'s (:data:`EXHAUSTIVE`; beside a lazy share given, an error),
    else those given, the others :data:`DEFAULT_LAZY`'s (``--extend-threshold`` not given: the default's)."""
    flags = {"extend_threshold": "--extend-threshold", "boundary_threshold": "--boundary-threshold",
             "rejoin_threshold": "--rejoin-threshold"}
    given = [flag for key, flag in flags.items() if getattr(args, key) is not None]
    if args.exhaustive:
        if given:
            raise ValueError(f"--exhaustive extends every kept prefix: drop {given[0]} (or drop --exhaustive)")
        chosen = EXHAUSTIVE
    elif args.extend_threshold is None:
        chosen = {**EXHAUSTIVE, **DEFAULT_LAZY}
    else:
        chosen = EXHAUSTIVE
    for key in flags:
        if getattr(args, key) is None:
            setattr(args, key, chosen[key])


def refuse_old_rows_file(out: str) -> None:
    """``--out`` is a run folder (:class:`~ppl_tok.strings.batch.StringsStore`, as every string task's); a rows
    file of an earlier ``ppl-tok surprisal`` (one JSON line per unit, ``FILE.settings.json`` beside it) is
    refused, naming what to do."""
    from pathlib import Path

    path = Path(out)
    if path.parent.exists() and not path.parent.is_dir():
        raise ValueError(f"--out {out}: {path.parent} is a file, not a folder; give a run folder's path")
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} is a file: a rows file of an earlier ppl-tok surprisal (one JSON line per "
                         "unit) is not resumed any more, since surprisal runs are run folders as every string "
                         "task's (run.json, records.jsonl); give a new --out folder (the old file's rows stay "
                         "readable JSON Lines)")


def surprisal_items(items: list[str], regions: list[Any] | None, source: str) -> list[Any]:
    """The run's :class:`~ppl_tok.strings.tasks.Item` list (an item's regions as tuples)."""
    from ppl_tok.strings.tasks import Item

    return [Item(n, text, where=f"{source}: item {n}",
                 regions=None if regions is None else tuple(tuple(r) for r in regions[n]))
            for n, text in enumerate(items)]


def surprisal_params(args: argparse.Namespace) -> Any:
    """The task's own :class:`~ppl_tok.strings.tasks.SurprisalParams` from its flags (those not given: its
    defaults; the flags are derived from it, :func:`ppl_tok.cli.strings.add_task_flags`)."""
    from ppl_tok.common.params import from_args
    from ppl_tok.strings.tasks import SurprisalParams

    return from_args(SurprisalParams, args)


def surprisal_options(args: argparse.Namespace) -> Any:
    """The task's :class:`~ppl_tok.strings.tasks.Options` from the flags."""
    from ppl_tok.strings.tasks import Options

    return Options(context=args.context, config=search_config(args), params=surprisal_params(args))


def _run(args: argparse.Namespace, items: list[str], regions: list[Any] | None) -> Iterator[list[dict[str, Any]]]:
    """Each item's rows in order, from the one runner of every string task
    (:func:`~ppl_tok.strings.batch.run_items`; ``--ray``: :func:`~ppl_tok.strings.distributed.run_items_ray`):
    ``--batch-size`` items walked together, each batch's records appended to ``--out`` (a run folder) as it is
    done, a rerun computing only the missing items.

    An item that fails (a byte no token covers) is stored as its error and does not stop the others; the rows
    are then printed up to it and the run ends in an error naming it.
    """
    import hashlib

    from tqdm import tqdm

    from ppl_tok.strings.batch import Members, batch_settings, run_items

    source = "standard input" if args.file == STDIN else args.file
    options = surprisal_options(args)
    batch = surprisal_items(items, regions, source)
    digest = hashlib.sha256(json.dumps([items, regions]).encode("utf-8")).hexdigest()
    settings_args = {"input_sha256": digest, "fields": {"field": args.field},
                     "extra": {"input": source, "items": len(items), "lm": lm_spec(args).to_dict()}}
    show = args.progress or sys.stderr.isatty()
    with tqdm(total=len(items), unit="item", file=sys.stderr, leave=False, disable=not show) as bar:
        if args.ray is not None:
            from ppl_tok.lm.loader import LMLoader
            from ppl_tok.strings.distributed import MembersLoader, run_items_ray

            run = run_items_ray("surprisal", MembersLoader((LMLoader.from_spec(lm_spec(args)),)), batch, options,
                                out=args.out, settings_args=settings_args, batch_size=args.batch_size,
                                workers=args.workers, address=args.ray or None,
                                on_records=lambda records: bar.update(len(records)))
        else:
            members = Members((_load_lm(args),))
            settings = batch_settings("surprisal", members, options, batch_size=args.batch_size, **settings_args)
            run = run_items("surprisal", members, batch, options, out=args.out, settings=settings,
                            batch_size=args.batch_size, on_records=lambda records: bar.update(len(records)))
    for record in run.records:
        if "error" in record:
            raise ValueError(f"{source}: item {record['index']}: {record['error']}")
        yield [_row(record["index"], u, args.model) for u in record["units"]]


def cmd_surprisal(args: argparse.Namespace) -> None:
    lm_spec(args)  # the LM flags, checked before any work
    ray_address(args)  # --ray needs --out; --workers needs --ray
    if args.out is not None:
        refuse_old_rows_file(args.out)
    apply_defaults(args)
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
    own = surprisal_params(args)
    done = _run(args, items, regions)
    if own.entropy:
        extra += ("next_token_entropy",)
    done = ((rs if args.spillover is None else reading_columns(rs, args.spillover)) for rs in done)
    if args.json:
        from ppl_tok.common.jsonout import to_json

        rows = [r for rs in done for r in rs]
        print(to_json({"model": args.model, "units": "regions" if regions else own.units, "items": len(items),
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
                                   "and standard output still gets every row, in order. The default lazy share "
                                   "(--extend-threshold 1e-05) stays within a median 0.01 and p99 0.1 bits per word "
                                   "of --exhaustive on held-out words at 0.6 of its CPU (docs/strings.md).")
    p.add_argument("file", metavar="FILE", help="one item per line (UTF-8), JSON Lines with --field, or - (stdin)")
    p.add_argument("--field", help="JSON Lines: the field holding each item's text")
    p.add_argument("--regions", metavar="CSV", help="a CSV of item,start,end character spans that tile each item "
                   "(overrides --units; the word-end correction applies where the text goes on with a boundary)")
    p.add_argument("--context", default="", help="text every item continues, canonically tokenized (default: none)")
    p.add_argument("--format", choices=("tsv", "csv", "jsonl"), default="tsv", help="the rows' format (default tsv)")
    p.add_argument("--out", type=run_folder, metavar="DIR",
                   help="also keep the records in this run folder (run.json, records.jsonl: one record per item, "
                        "as every string task's), batch by batch; a killed run resumes from it")
    p.add_argument("--batch-size", type=POSITIVE, default=16, metavar="N",
                   help="items walked together, one LM call serving every walk that waits for a forward (default 16; with --ray: items per "
                        "actor batch); the rows do not depend on it (beyond float32 rounding of a batched forward)")
    add_lm_arguments(p)
    add_search_arguments(p, prefill=False)
    add_ray_arguments(p, "batches of items")
    p.add_argument("--exhaustive", action="store_true",
                   help="extend every prefix the beam keeps (--extend-threshold 0): the reference setting the "
                        "default is measured against (docs/strings.md, \"The default setting\"); refused beside a "
                        "lazy share")
    p.set_defaults(extend_threshold=None)  # not given: the default's (DEFAULT_LAZY), see apply_defaults
    p.add_argument("--spillover", type=integer(0), metavar="K",
                   help="add reading-study columns: length (characters, whitespace left out), the previous K units' "
                        "surprisal and canonical (surprisal_prev1.., empty at an item's start) and the item's totals "
                        "(item_surprisal, item_canonical); 0: length and totals only")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    add_json_argument(p)
    add_task_flags(p, "surprisal")  # --units, --final, --wide, --entropy, --search...: SurprisalParams' own flags
    p.set_defaults(func=cmd_surprisal)


__all__ = ["register"]
