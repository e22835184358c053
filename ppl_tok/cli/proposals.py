"""The ``--proposal`` flags every command that draws importance samples shares (``marginal``, ``perplexity``,
``qa run``): the registered proposals' names, a proposal file, and a proposal's own parameters."""

from __future__ import annotations

import argparse
from typing import Any

from ppl_tok.common.arguments import LaterChoices


def proposal_names(with_file: bool = True) -> tuple[str, ...]:
    """The registered proposals' names (read when ``--proposal`` is parsed; ``with_file``: those that read a
    proposal file too)."""
    from ppl_tok.proposals import PROPOSALS

    return tuple(n for n, p in PROPOSALS.items() if with_file or p.read_file is None)


def add_proposal_arguments(p: argparse.ArgumentParser) -> None:
    """``--proposal NAME`` (any registered proposal, :data:`ppl_tok.proposals.PROPOSALS`) and ``--proposal-file``
    (:func:`ppl_tok.proposals.proposal_settings`)."""
    p.add_argument("--proposal", choices=LaterChoices(proposal_names), metavar="PROPOSAL",
                   help="the importance proposal, one of the registered ones (%(choices)s): the look-ahead "
                        "(default), or a learned one with --proposal-file")
    p.add_argument("--proposal-file", metavar="FILE",
                   help="the learned proposal (ppl-tok learn-proposal --out); its checksum is stored with the run")
    p.add_argument("--proposal-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter of --proposal's own (its Params; repeatable; docs/architecture.md, \"A "
                        "proposal\"): stored with the run, a resume under another value refused")


def proposal_record(args: argparse.Namespace) -> dict[str, Any]:
    """The settings record of ``--proposal``, ``--proposal-file`` and ``--proposal-param``
    (:func:`ppl_tok.proposals.proposal_settings`): what a run stores and rebuilds the guide from."""
    from ppl_tok.proposals import DEFAULT_PROPOSAL, proposal_settings

    args.proposal = DEFAULT_PROPOSAL if args.proposal is None else args.proposal  # not given: the default's
    return proposal_settings(args.proposal, args.proposal_file, proposal_values(args))


def proposal_values(args: argparse.Namespace) -> dict[str, str]:
    """``--proposal-param NAME=VALUE`` (repeated) by name, as text (the proposal's fields parse it)."""
    values: dict[str, str] = {}
    for given in args.proposal_param:
        name, eq, value = given.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--proposal-param {given!r}: expected NAME=VALUE (a parameter of --proposal "
                             f"{args.proposal or 'lookahead'})")
        if name.strip() in values:
            raise ValueError(f"--proposal-param {name.strip()} is given twice: give it once")
        values[name.strip()] = value
    return values


__all__ = ["add_proposal_arguments", "proposal_names", "proposal_record", "proposal_values"]
