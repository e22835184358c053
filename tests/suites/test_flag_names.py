"""One flag name per concept across every ``ppl-tok`` command and ``python -m benchmarks`` benchmark (issue 57): the table below is the spec. Each concept
has one name, said in the help of every command that takes it; its earlier names still parse, into the same
destination, with one warning line on stderr naming the new flag (docs/cli.md, "One name per concept")."""

import argparse
import re

import pytest

from ppl_tok.common.arguments import DeprecatedAlias

#: the one name of each concept -> (what its help says wherever it is taken, its earlier names)
CONCEPTS = {
    "--batch-size": (r"\btogether\b", ("--batch-docs", "--batch-questions", "--batch")),
    "--field": (r"\bfield\b", ("--text-field",)),
    "--top": (r"\b(list|print)", ("--top-k",)),
    # two concepts, two names: the beam's forwards past which it narrows (the run always ends, with a coarser
    # figure) and a certified search's forwards at most (it stops and says what it certified)
    "--search-budget": (r"\bnarrows\b", ("--budget",)),
    "--exact-budget": (r"\bforwards at most\b", ("--budget",)),
    "--exact-tolerance": (r"\bbracket\b", ("--tolerance",)),
    "--data-dir": (r"\bfolder\b", ("--data",)),
}
#: an earlier name -> the names it may now stand for (``--budget`` named both budgets, in different commands)
OLD = {}
for _new, (_, _olds) in CONCEPTS.items():
    for _old in _olds:
        OLD.setdefault(_old, set()).add(_new)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every (sub)command's path and parser, its lazy flags (a registry's parameters) added."""
    parser.format_help()
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, path + (name,))


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """The programs, by name: ``ppl-tok`` and the research benchmarks beside the package."""
    from benchmarks.__main__ import build_parser as benchmarks
    from ppl_tok.cli.main import build_parser

    return {"ppl-tok": build_parser(), "python -m benchmarks": benchmarks()}


def _flags():
    """(the command's path, program first, and one of its flags) for every flag of every command."""
    return [((prog, *path), a) for prog, parser in _parsers().items() for path, p in _commands(parser)
            for a in p._actions if a.option_strings]


def test_no_command_takes_an_old_name_as_a_flag_of_its_own():
    for path, action in _flags():
        name, *others = action.option_strings
        where = f"{' '.join(path)} {name}"
        assert name not in OLD, f"{where}: an earlier name of {sorted(OLD[name])}; use the one name (CONCEPTS)"
        for other in others:
            if other in OLD:
                assert isinstance(action, DeprecatedAlias) and other in action.old, (
                    f"{where}: {other} is an earlier name: give it as a warning alias (add_renamed)")
                assert name in OLD[other], f"{where}: {other} is an earlier name of {sorted(OLD[other])}, not {name}"


def test_each_name_means_its_concept_wherever_it_is_taken():
    seen = set()
    for path, action in _flags():
        name = action.option_strings[0]
        if name in CONCEPTS:
            seen.add(name)
            pattern = CONCEPTS[name][0]
            assert re.search(pattern, str(action.help)), (
                f"{' '.join(path)} {name}: its help {str(action.help)!r} does not say the concept "
                f"({pattern}); another meaning needs another name")
    assert seen == set(CONCEPTS), f"no command takes {sorted(set(CONCEPTS) - seen)}: drop them from the table"


def _renamed():
    """(command path, earlier name, its action) for every earlier name some command still takes."""
    return [(path, old, a) for path, a in _flags() if isinstance(a, DeprecatedAlias) for old in a.old]


def _takes(action: argparse.Action, text: str) -> bool:
    """Whether ``action``'s type reads ``text`` as a number (a count, a size), not as a path."""
    try:
        return action.type is not None and isinstance(action.type(text), (int, float))
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False


def _required(parser: argparse.ArgumentParser, tmp: str) -> list[str]:
    """The least command line the parser takes: a value for each positional and required flag."""
    out: list[str] = []
    for a in parser._actions:
        if a.option_strings and not a.required or isinstance(a, argparse._SubParsersAction) or a.nargs == 0:
            continue
        value = next(iter(a.choices)) if a.choices else "3" if _takes(a, "3") else f"{tmp}/x"
        out += [*a.option_strings[:1], value] if a.option_strings else [value]
    return out


@pytest.mark.parametrize("path,old,action", [pytest.param(*r, id=f"{' '.join(r[0])} {r[1]}") for r in _renamed()])
def test_an_old_name_parses_with_one_warning_into_the_new_destination(path, old, action, capsys, tmp_path):
    prog, *path = path
    new = action.option_strings[0]
    assert new in OLD.get(old, ()), f"{prog} {' '.join(path)} {old}: not in CONCEPTS as an earlier name of {new}"
    parser = dict(_commands(_parsers()[prog]))[tuple(path)]
    base = [*path, *_required(parser, str(tmp_path))]
    value = "3"
    with_new = _parsers()[prog].parse_args([*base, new, value])
    assert capsys.readouterr().err == ""
    with_old = _parsers()[prog].parse_args([*base, old, value])
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{prog} {' '.join(path)}: warning: {old} is deprecated and will be removed: use {new}"], err
    assert getattr(with_old, action.dest) == getattr(with_new, action.dest) != action.default
    same = {k: v for k, v in vars(with_new).items() if k != "func"}  # func: a closure made per parser
    assert {k: v for k, v in vars(with_old).items() if k != "func"} == same
