"""Many prompts, and ensembles, for ``ppl-tok conditional``, ``next`` and ``generate`` (:mod:`ppl_tok.strings.batch`).

``--input FILE`` (JSON Lines, ``-``: standard input) holds one item per line: an object with a string
prompt (``--prompt-field``, default ``prompt``) and, for ``conditional``, a non-empty string text
(``--field``, default ``text``); other fields are ignored and blank lines skipped. Every line is
checked before the model loads (bad JSON, a missing field, a value that is not a string, an escaped NUL or
lone surrogate, a line over the size limit): an error names ``file:line``. The LM (or each LM of an
ensemble) is loaded once; items run in batches of ``--batch-size``. With ``--out DIR`` each batch's
records are appended to ``DIR/records.jsonl`` as they are computed and a rerun computes only the
missing ones (the settings in ``DIR/run.json`` must match: a difference is refused, naming it); standard
output gets a summary. Without ``--out`` the records go to standard output as JSON Lines as they are
computed (``--json``: one JSON object holding them all).

``--model`` repeated makes an ensemble (``--kind mixture|product``, ``--weight`` per model): for one
``--prompt`` as for a batch.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ppl_tok.cli.common import (_check_context, _check_utf8, _emit, _load_lms, lm_specs, ray_address,
                                search_config)
from ppl_tok.common.arguments import POSITIVE, LaterChoices, positive, run_folder, add_renamed
from ppl_tok.limits import limits

if TYPE_CHECKING:  # the runner is imported when a command runs, not for --help
    from ppl_tok.strings.batch import BatchRun, Item, Members, Options
    from ppl_tok.strings.tasks import StringTask


def _kinds() -> tuple[str, ...]:
    """How an ensemble's LMs combine (:data:`ppl_tok.strings.ensemble.KINDS`), read when ``--kind`` is parsed."""
    from ppl_tok.strings.ensemble import KINDS

    return KINDS


def add_batch_arguments(p: argparse.ArgumentParser, text: bool) -> None:
    """``--input``, ``--prompt-field`` (and ``text``: ``--field``, the text's), ``--out``, ``--batch-size``,
    ``--progress``; ``--kind`` and ``--weight`` (ensembles)."""
    g = p.add_argument_group("many prompts (JSON Lines)")
    g.add_argument("--input", metavar="FILE",
                   help="a JSON Lines file of items (- for standard input): one object per line with the prompt"
                        + (" and the text" if text else "") + "; the model loads once")
    g.add_argument("--prompt-field", default="prompt", metavar="NAME", help="--input: the prompt's field "
                   "(default prompt)")
    if text:
        add_renamed(g, "--field", "--text-field", default="text", metavar="NAME",
                    help="--input: the field holding the text (default text)")
    g.add_argument("--out", type=run_folder, metavar="DIR",
                   help="--input: a run folder; records stored as they are computed, and "
                   "a rerun computes only the missing ones")
    g.add_argument("--batch-size", type=POSITIVE, default=8,
                   help="--input: items scored together, each batch stored in --out when done (default 8)")
    g.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    g.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help="--input with --out: the batches on Ray actors (pip install 'ppl-tok[ray]'), a local Ray or "
                        "the cluster at ADDRESS (e.g. auto); the driver alone writes --out (docs/ray.md)")
    g.add_argument("--workers", type=POSITIVE, help="with --ray: actors, each with the LMs (default: one per GPU, "
                   "else per CPU)")
    e = p.add_argument_group("ensembles (--model repeated)")
    e.add_argument("--kind", choices=LaterChoices(_kinds), metavar="KIND", help="how the LMs combine: mixture (default) or product of experts")
    e.add_argument("--weight", type=positive, action="append", metavar="W",
                   help="one per --model, in order: the mixture's prior or the product's exponent (default 1/K)")


def run_task(args: argparse.Namespace, name: str, **fixed: Any) -> None:
    """The command of string task ``name`` (resolved here, once): one ``--prompt`` or ``--input FILE``'s items, under
    one ``--model`` or an ensemble, through the one runner, printed (module docstring). ``fixed``: parameters of
    the task that the command reads from flags of its own (``generate``'s repeated ``--stop``)."""
    from ppl_tok.strings.tasks import string_task

    task = string_task(name)
    several = len(lm_specs(args)) > 1
    if args.input is None:
        if args.out is not None:
            raise ValueError("--out stores the records of --input FILE: give --input, or drop --out")
        if args.ray is not None or args.workers is not None:
            raise ValueError(f"{'--ray' if args.ray is not None else '--workers'} runs the batches of --input FILE "
                             "on Ray: give --input and --out, or drop it")
        if args.prompt is None:
            if task.needs_text:
                raise ValueError("give --prompt (or --input FILE of prompt and text pairs)")
            args.prompt = ""
    run_command(args, task, several, fixed)


def _check_flags(args: argparse.Namespace, task: StringTask, options: Options, several: bool) -> None:
    for flag, value in (("--kind", args.kind), ("--weight", args.weight)):
        if value is not None and not several:
            raise ValueError(f"{flag} combines several LMs: give --model twice or more, or drop {flag}")
    if args.weight is not None and len(args.weight) != len(lm_specs(args)):
        raise ValueError(f"{len(args.weight)} --weight for {len(lm_specs(args))} --model: give one per --model")
    for s in getattr(args, "stop", None) or ():
        _check_utf8("--stop", s)
    task.check(options, several)
    if args.input is None:
        return
    ray_address(args)  # --ray needs --out; --workers needs --ray
    given = [f for f, v in (("--prompt", args.prompt), ("TEXT", getattr(args, "text", None)),
                            ("--file", getattr(args, "text_file", None))) if v is not None]
    if given:
        raise ValueError(f"--input holds the items: drop {given[0]} (or drop --input)")
    if args.out is not None and _is_file(args.out):
        raise ValueError(f"--out {args.out} is a file, not a run folder: give a new folder or a run's folder")


def _is_file(path: str) -> bool:
    from pathlib import Path

    return Path(path).exists() and not Path(path).is_dir()


def read_items(path: str, prompt_field: str, text_field: str | None, context: str = ""
               ) -> tuple[list[Item], str, str]:
    """``(items, source, sha256)`` of a JSON Lines input; every malformed line is a ``file:line`` error."""
    from ppl_tok.strings.batch import Item
    from ppl_tok.common.lines import split_lines
    from ppl_tok.perplexity.corpus import check_text, read_source

    text, source, sha256 = read_source(path)
    items: list[Item] = []
    fields = [prompt_field] + ([text_field] if text_field is not None else [])
    for n, line in enumerate(split_lines(text), 1):
        if not line.strip():
            continue
        where = f"{source}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not valid JSON ({err.msg} at column {err.colno}); each line must be one "
                             "JSON object") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object with the field(s) {', '.join(map(repr, fields))}, "
                             f"got {type(row).__name__}")
        for f in fields:
            if f not in row:
                have = ", ".join(map(repr, list(row)[:8])) or "none"
                flag = "--prompt-field" if f == prompt_field else "--field"
                raise ValueError(f"{where}: missing field {f!r} (fields: {have}); choose it with {flag}")
            if not isinstance(row[f], str):
                raise ValueError(f"{where}: field {f!r} should be a string, got {type(row[f]).__name__}")
            check_text(row[f], where, f)
        if text_field is not None and not row[text_field]:
            raise ValueError(f"{where}: field {text_field!r} is empty: give the text whose probability you want")
        size = sum(len(row[f].encode("utf-8")) for f in fields) + len(context.encode("utf-8"))
        limits().check("lm_bytes", size, f"{where}: --context plus the prompt and the text in bytes")
        items.append(Item(len(items), row[prompt_field], row[text_field] if text_field else None, where))
    if not items:
        raise ValueError(f"{source} holds no items (the input is empty or holds only blank lines)")
    return items, source, sha256


def _options(args: argparse.Namespace, task: StringTask, fixed: dict[str, Any] | None = None) -> Options:
    """The task's :class:`~ppl_tok.strings.tasks.Options`: the context and beam, and the task's own parameters from
    its flags (:mod:`ppl_tok.common.params`; a flag not given keeps the parameter's default) and ``fixed``."""
    from ppl_tok.common.params import given, split_values
    from ppl_tok.strings.batch import Options

    own, _ = split_values(task.params, {**given(args), **(fixed or {})})
    return Options(context=args.context, config=search_config(args), params=task.params(**own))


def run_command(args: argparse.Namespace, task: StringTask, several: bool, fixed: dict[str, Any] | None = None
                ) -> None:
    """``task`` on ``--input``'s items or on the one ``--prompt``, printed (module docstring)."""
    from ppl_tok.strings.batch import Item, Members, answer, batch_settings, item_bytes, run_items

    options = _options(args, task, fixed)
    _check_flags(args, task, options, several)
    if args.input is not None:
        items, source, sha256 = read_items(args.input, args.prompt_field,
                                           args.field if task.needs_text else None, args.context)
    else:
        _check_utf8("--prompt", args.prompt)
        # one prompt is a batch of one item; a draw of it is seeded with --seed itself
        seed = getattr(options.params, "seed", None)  # a task that draws: the one prompt draws with --seed itself
        items, source, sha256 = [Item(0, args.prompt, getattr(args, "text", None), "--prompt", seed=seed)], None, None
    fields = {"prompt_field": args.prompt_field, "text_field": args.field if task.needs_text else None}
    settings_args = {"input_sha256": sha256, "fields": fields,
                     "extra": {"input": source, "items": len(items), "lm": [s.to_dict() for s in lm_specs(args)]}}
    weights = None if args.weight is None else tuple(args.weight)
    if args.ray is not None:
        _run_on_ray(args, task.name, items, options, source, settings_args, weights)
        return
    lms = _load_lms(args)
    for lm in lms:
        if args.input is None:  # the prompt (and the text) refused before any work if no covering fits the window
            text = args.prompt + (getattr(args, "text", None) or "")
            _check_context(argparse.Namespace(command=args.command, text=text, context=args.context), lm,
                           walk="the prompt and the text" if task.needs_text else "the prompt")
        else:
            _check_context(argparse.Namespace(command=task.name, text=None, context=args.context), lm)
    members = Members(tuple(lms), args.kind or "mixture", weights)
    settings = None
    if args.out is not None:
        settings = batch_settings(task, members, options, batch_size=args.batch_size, **settings_args)
    stream = args.input is not None and args.out is None and not args.json
    with byte_bar(args, sum(item_bytes(task, it, options, members) for it in items), task.name) as bar:
        if args.input is None:
            record = answer(task, members, items[0], options, on_bytes=bar.update)
        else:
            run = run_items(task, members, items, options, out=args.out, settings=settings,
                            batch_size=args.batch_size, on_bytes=bar.update,
                            on_records=_print_records if stream else None)
    if args.input is None:
        _emit_one(args, task, members, options, record)
    elif not stream:
        _emit_summary(args, task.name, run, source)


def _run_on_ray(args: argparse.Namespace, task: str, items: list[Item], options: Options, source: str,
                settings_args: dict[str, Any], weights: tuple[float, ...] | None) -> None:
    """``--input`` on Ray actors (:func:`~ppl_tok.strings.distributed.run_items_ray`); the summary as without Ray."""
    from tqdm import tqdm

    from ppl_tok.lm.loader import LMLoader
    from ppl_tok.strings.distributed import MembersLoader, run_items_ray

    loader = MembersLoader(tuple(LMLoader.from_spec(s) for s in lm_specs(args)), args.kind or "mixture", weights)
    show = args.progress or (sys.stderr.isatty() and not args.json)
    with tqdm(total=len(items), unit="item", desc=task, file=sys.stderr, leave=False, disable=not show) as bar:
        run = run_items_ray(task, loader, items, options, out=args.out, settings_args=settings_args,
                            batch_size=args.batch_size, workers=args.workers, address=args.ray or None,
                            on_records=lambda records: bar.update(len(records)))
    _emit_summary(args, task, run, source)


def byte_bar(args: argparse.Namespace, total: int, desc: str) -> Any:
    """A progress bar in bytes walked, on standard error: on a terminal (not with ``--json``) or with ``--progress``."""
    from tqdm import tqdm

    show = args.progress or (sys.stderr.isatty() and not args.json)
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, file=sys.stderr, leave=False, disable=not show)


def _print_records(records: list[dict[str, Any]]) -> None:
    for r in records:
        print(json.dumps(r, ensure_ascii=False, allow_nan=False))
    sys.stdout.flush()


def _emit_summary(args: argparse.Namespace, task: str, run: BatchRun, source: str) -> None:
    from ppl_tok.strings.batch import StringsStore

    payload: dict[str, Any] = {"task": task, "input": source, "out": args.out, "items": len(run.records),
                               "computed": run.computed, "stored_before": run.stored, "errors": run.errors,
                               "seconds": run.seconds}
    if args.out is None:
        payload["records"] = run.records
    path = None if args.out is None else f"{args.out}/{StringsStore.records_file}"
    first = next((r for r in run.records if "error" in r), None)
    lines = [f"{task}: {len(run.records)} items from {source}: {run.computed} computed now, {run.stored} read back"
             f", {run.errors} errors" + (f" (the first: {first['where']}: {first['error']})" if first else ""),
             f"records in {path} (resumable), {run.seconds:.1f} s"]
    _emit(args, payload, lines)


def _emit_one(args: argparse.Namespace, task: StringTask, members: Members, options: Options,
              record: dict[str, Any]) -> None:
    """One prompt's record, printed by its task (:meth:`~ppl_tok.strings.tasks.StringTask.shown`): text lines, or
    the record as JSON with who answered it and what the task adds."""
    from ppl_tok.strings.tasks import Shown

    names = [lm.name for lm in members.lms]
    head = f"{members.kind} of {' + '.join(names)}" if members.ensemble else names[0]
    extra, lines = task.shown(record, options, Shown(head, members.ensemble, getattr(args, "top", 10)))
    who = ({"models": names, "kind": members.kind, "weights": args.weight} if members.ensemble
           else {"model": names[0]})
    _emit(args, {**who, "context": args.context, **record, "beam": args.beam, "prune": args.prune, **extra}, lines)


__all__ = ["add_batch_arguments", "byte_bar", "read_items", "run_command", "run_task"]
