"""``ppl-tok bench NAME``: the checks of a user's own machine (:mod:`ppl_tok.bench`): the batched engine, peak
memory, and the end-to-end GPU check. The research benchmarks live beside the package (``benchmarks/``, run
as ``python -m benchmarks NAME`` from a checkout; docs/benchmarks.md).

Every benchmark reports ratios against a baseline run in the same process.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any
from pathlib import Path

from ppl_tok.common.arguments import POSITIVE, output_folder, add_renamed
from ppl_tok.cli import bench_flags
from ppl_tok.cli.bench_flags import checked
from ppl_tok.cli.common import (_emit, add_data_dir_argument, add_json_argument, add_lm_arguments,
                                lm_spec, transformers_backend_only)
from ppl_tok.datasets import DATA_ROOT, data_file

DATA = str(DATA_ROOT)


def _openbookqa_dev(data: str) -> str:
    """A JSON Lines file as given, or a data folder's OpenBookQA dev split."""
    return data if data.endswith(".jsonl") else str(data_file("openbookqa", "dev", data))


# ------------------------------------------------------------ the commands
def cmd_engine(args: argparse.Namespace) -> None:
    from ppl_tok.bench import engine as bench

    spec = lm_spec(args)
    result = bench.bench_engine(spec.model, data=_openbookqa_dev(args.data), questions=args.questions,
                                num_samples=args.samples, batch_questions=args.batch_size, big_n=args.big_n,
                                **spec.options())
    _emit(args, result, bench.format_engine(result))


def cmd_memory(args: argparse.Namespace) -> None:
    if args.command is not None:
        from ppl_tok.bench import memory

        result = memory.repeat_command(args.command, args.repeat)
        _emit(args, result, memory.format_repeat(result))
        return
    from ppl_tok.bench import engine as bench

    result = bench.bench_memory(device=args.device, repeat=args.repeat)
    _emit(args, result, bench.format_memory(result))


def _parts(text: str) -> tuple[str, ...]:
    from ppl_tok.bench.gpucheck import PARTS

    parts = tuple(x.strip() for x in text.split(","))
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {','.join(PARTS)}")
    return parts


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from ppl_tok.bench import gpucheck

    spec = lm_spec(args)
    report = gpucheck.check(spec.device or "cuda", spec.model, spec.dtype, args.data, args.out, args.quick,
                            args.parts, args.tests)
    print(gpucheck.markdown(report))
    failed = [t for t in report["targets"] if t["met"] is False]
    errors = [n for n, part in report["parts"].items() if "error" in part]
    print(f"wrote {Path(args.out) / 'report.md'} and report.json; {len(failed)} target(s) missed, "
          f"{len(errors)} part(s) failed", file=sys.stderr)
    return 1 if errors or failed else 0


# ----------------------------------------------------------- the parsers
def add_benchmark(bench_sub: argparse._SubParsersAction, name: str, help: str, func: Callable[[argparse.Namespace], Any],
                  *, lm: bool = True, data: str | None = None,
                  check: Callable[[argparse.Namespace], None] | None = None) -> argparse.ArgumentParser:
    """One benchmark's subcommand: the LM flags (``lm``; the transformers backend only), ``--data-dir`` (``data``:
    what it names), ``--json``, and ``check``, run before ``func``: it refuses a flag the run would ignore
    (cli/bench_flags.py). The research benchmarks beside the package (benchmarks/cli.py) add theirs through here."""
    p = bench_sub.add_parser(name, help=help, description=help)
    if lm:
        add_lm_arguments(p)
        func = transformers_backend_only(func)
    if data is not None:
        add_data_dir_argument(p, DATA, data)
    add_json_argument(p)
    p.set_defaults(func=checked(check, func) if check is not None else func)
    return p


def add_parts(bench_sub: argparse._SubParsersAction, name: str, help: str,
              description: str | None = None) -> argparse._SubParsersAction:
    """A benchmark with parts: its subcommand ``name`` and the subcommands of its parts (``PART``, required), each
    added with :func:`add_benchmark`. ``description``: the ``--help`` text (``help`` if none)."""
    top = bench_sub.add_parser(name, help=help, description=description or help,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    return top.add_subparsers(dest="part", required=True, metavar="PART")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench`` and its one subcommand per benchmark to the ``ppl-tok`` subcommands."""
    desc = ("check this machine: the engine's speed, peak memory, a GPU end to end (ratios against baselines run in "
            "the same process); ppl-tok bench NAME --help. The research benchmarks: python -m benchmarks --help, "
            "from a checkout")
    bench = sub.add_parser("bench", help=desc, description=desc)
    bench_sub = bench.add_subparsers(dest="what", required=True, metavar="NAME", help="the check")
    p = add_benchmark(bench_sub, "engine", "the batched engine: questions per minute against the raw batched forward",
             cmd_engine, data="a data folder (its openbookqa/dev.jsonl) or a JSON Lines file")
    p.add_argument("--questions", type=POSITIVE, default=20, help="OpenBookQA questions (default 20)")
    p.add_argument("--samples", type=POSITIVE, default=64, help="particles per answer (default 64)")
    add_renamed(p, "--batch-size", "--batch-questions", type=POSITIVE, default=8,
                help="questions scored together, per engine run (default 8)")
    p.add_argument("--big-n", type=POSITIVE, default=256, help="particles on one sentence (default 256)")
    p = add_benchmark(bench_sub, "memory", "peak memory of the engine's cases (host RSS and device), or of a ppl-tok "
                      "command; --repeat: min / median / max over fresh processes", cmd_memory, lm=False,
                      check=bench_flags.memory)
    p.add_argument("--device", help="where the LM runs: cpu, cuda, cuda:1, mps (default: cpu)")
    p.add_argument("--repeat", type=POSITIVE, default=1, help="runs of each case, each in a fresh process (default 1)")
    p.add_argument("--command", metavar="ARGS", help="measure this ppl-tok command line instead of the engine's "
                   "cases, e.g. 'marginal --file doc.txt --samples 64' (peak RSS of the child process)")
    p = add_benchmark(bench_sub, "gpu-check", "check a machine end to end, a GPU one above all (make gpu-check): the "
             "device-parametrised tests, then the engine, marginal, bracket, QA and memory parts against their "
             "targets; --device defaults to cuda here; exit status 1 if a target is missed or a part fails",
             cmd_gpu_check, data="a folder with openbookqa/dev.jsonl and test.jsonl", check=bench_flags.gpu_check)
    p.add_argument("--out", type=output_folder, default="gpu-check",
                   help="where report.md and report.json go (default gpu-check/)")
    p.add_argument("--quick", action="store_true", help="toy sizes: a smoke test of the command (targets not judged)")
    p.add_argument("--parts", type=_parts, help="comma-separated subset of tests,syncs,engine,marginal,bracket,qa,memory")
    p.add_argument("--tests", metavar="DIR", help="a checkout's test folder, for the tests part (make gpu-check: tests)")

