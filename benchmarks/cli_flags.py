"""The flags of a research benchmark's subcommand that its run would ignore (``--quick`` beside the sizes it
replaces, ...): refused before any work, one line naming the flag, what ignores it and the fix. Each
benchmark's parts are subcommands (``perplexity table``, ``strings prefill``, ``diagnostics rescore``), so a
flag of another part is an unknown flag there; what is left is a flag its own subcommand reads only sometimes."""

from __future__ import annotations

import argparse

from ppl_tok.cli.common import refuse_ignored


def marginal(args: argparse.Namespace) -> None:
    if args.quick:
        refuse_ignored(args, ("--sizes", "--baseline-samples"), "--quick sets its own small sizes",
                       "leave FLAG out or drop --quick")


def diagnostics(args: argparse.Namespace) -> None:
    if args.quick:
        refuse_ignored(args, ("--strings", "--seeds", "--samples"), "--quick sets its own small sizes",
                       "leave FLAG out or drop --quick")


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
