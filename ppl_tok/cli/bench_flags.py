"""The flags of a ``ppl-tok bench`` subcommand that its mode would ignore: refused before any work, one line
naming the flag, what ignores it and the fix (``--quick`` beside the sizes it replaces, a mode's flags beside
another mode, ...). :func:`checked` wraps a subcommand's function with its check."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ppl_tok.cli.common import given, refuse_ignored

#: the flags that name and load the LM (:func:`~ppl_tok.cli.common.add_lm_arguments`)
LM_FLAGS = ("--model", "--device", "--dtype", "--bos-id", "--backend", "--threads")


def _mode(args: argparse.Namespace, modes: tuple[str, ...]) -> str | None:
    """The first of ``modes`` given; a second one given beside it is refused (one mode runs)."""
    on = [flag for flag in modes if given(args, flag)]
    if len(on) > 1:
        raise ValueError(f"{on[1]} would be ignored: {on[0]} runs its own part alone; give one of them")
    return on[0] if on else None


def marginal(args: argparse.Namespace) -> None:
    if args.quick:
        refuse_ignored(args, ("--sizes", "--baseline-samples"), "--quick sets its own small sizes",
                       "leave FLAG out or drop --quick")


def diagnostics(args: argparse.Namespace) -> None:
    if args.rescore:
        refuse_ignored(args, ("--strings", "--seeds", "--quick", "--data-dir", *LM_FLAGS),
                       "--rescore scores the stored --records without running the LM", "leave FLAG out")
    elif args.quick:
        refuse_ignored(args, ("--strings", "--seeds", "--samples"), "--quick sets its own small sizes",
                       "leave FLAG out or drop --quick")


def memory(args: argparse.Namespace) -> None:
    if args.command is not None:
        refuse_ignored(args, ("--device",), "--command measures that ppl-tok command line as given",
                       "put --device inside --command")


def learned(args: argparse.Namespace) -> None:
    if args.quick:
        refuse_ignored(args, ("--train", "--heldout", "--steps", "--sizes"), "--quick sets its own small sizes",
                       "leave FLAG out or drop --quick")


def lm_eval(args: argparse.Namespace) -> None:
    if args.prompts == 0:
        refuse_ignored(args, ("--max-gen-toks",), "--prompts 0 skips generate_until", "leave FLAG out")


def surprisal(args: argparse.Namespace) -> None:
    if args.extend_threshold == 0:
        refuse_ignored(args, ("--reference",), "the reference is the run without lazy extension, and "
                       "--extend-threshold 0 is that run already", "give --extend-threshold SHARE or leave FLAG out")


def gpu_check(args: argparse.Namespace) -> None:
    if args.parts is not None and "tests" not in args.parts:
        refuse_ignored(args, ("--tests",), "--parts has no tests part", "add tests to --parts or leave FLAG out")


STRINGS_FLAGS = {"--long-bytes", "--prompts", "--prompt-records", "--prompts-only", "--generation-only",
                 "--generate-bytes", "--generate-seeds", "--generate-threshold", "--prefill-tail", "--genlm-python",
                 "--genlm-bytes", "--genlm-keep"}
#: the flags of one part that the whole run (no part named) would ignore, and that part
STRINGS_OWNERS = {"--prefill-tail": "--prefill-bytes or --prefill-prompts", "--genlm-bytes": "--genlm-python",
                  "--genlm-keep": "--genlm-python"}
#: per mode of ``bench strings``, the flags it reads (beside --data-dir, the LM's and --json)
STRINGS_READS = {"--prefill-bytes": {"--prompt-records", "--prefill-tail"},
                 "--genlm-python": {"--genlm-bytes", "--genlm-keep"},
                 "--generation-only": {"--generate-bytes", "--generate-seeds", "--generate-threshold"},
                 "--prompts-only": {"--prompts", "--prompt-records"},
                 None: STRINGS_FLAGS - set(STRINGS_OWNERS)}


def strings(args: argparse.Namespace) -> None:
    mode = "--prefill-bytes" if given(args, "--prefill-bytes") or given(args, "--prefill-prompts") else \
        _mode(args, ("--genlm-python", "--generation-only", "--prompts-only"))
    if mode is None:
        for flag, owner in STRINGS_OWNERS.items():
            refuse_ignored(args, (flag,), f"FLAG applies to {owner} only", f"give {owner} or leave FLAG out")
        return
    what = ("the prefill part (--prefill-bytes, --prefill-prompts) runs alone" if mode == "--prefill-bytes" else
            f"{mode} runs its own part alone")
    refuse_ignored(args, sorted(STRINGS_FLAGS - STRINGS_READS[mode] - {mode}), what, "leave FLAG out")


def perplexity(args: argparse.Namespace) -> None:
    """``bench perplexity``'s flags that a mode would ignore: the run over documents' (its rows, their store, their
    reference) beside a mode that makes no such run, the beam's beside the modes that read stored rows, the
    documents' (--documents, --lengths) beside --table and --memory-bytes, which take none, and ``--prefix-bytes``'
    and ``--splits``' own beside any other."""
    mode = _mode(args, ("--table", "--splits", "--lockstep", "--prefix-bytes", "--memory-bytes"))
    for flag, owner in (("--costs", "--splits"), ("--prefix-budget", "--prefix-bytes"),
                        ("--prefix-tolerance", "--prefix-bytes")):
        if given(args, flag) and mode != owner:
            raise ValueError(f"{flag} applies to {owner} only" + (f", not {mode}" if mode else "") +
                             f": give {owner} or leave {flag} out")
    if mode is None:
        return
    if mode in ("--table", "--splits"):
        refuse_ignored(args, ("--beam", "--prune", "--extend-threshold", "--boundary-threshold", "--rejoin-threshold"),
                       f"FLAG sets the beam of a run; {mode} runs none (it reads stored rows, their settings with them)")
    if mode in ("--table", "--memory-bytes"):
        refuse_ignored(args, ("--documents", "--lengths"), f"{mode} takes no documents of the data set")
    refuse_ignored(args, ("--out", *(("--corpus",) if mode != "--splits" else ()), "--limit", "--shard", "--paths",
                          *(("--reference",) if mode not in ("--table", "--splits") else ()), "--progress"),
                   f"FLAG applies to the run over documents (its rows); {mode} makes no such run")


CHECKS: dict[str, Callable[[argparse.Namespace], None]] = {
    "marginal": marginal, "diagnostics": diagnostics, "memory": memory, "learned": learned, "lm-eval": lm_eval,
    "surprisal": surprisal, "gpu-check": gpu_check, "strings": strings, "perplexity": perplexity}


def checked(name: str, func: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], Any]:
    """``func`` (the ``bench NAME`` command) after the check of NAME's ignored flags, if it has one."""
    check = CHECKS.get(name)
    if check is None:
        return func

    def run(args: argparse.Namespace) -> Any:
        check(args)
        return func(args)
    return run
