"""No consumer dispatches on a built-in operation's name (issue 57: "no literal comparison of a built-in operation's
name remains in a consumer"), for every registry: scorings, string tasks, proposals and LM backends.

A name is resolved once, by its registry, and the registered object answers (its parameters, its metadata, its
hooks: ``Scoring.classify``, ``Scoring.question_records``, ``StringTask.shown``, ``Proposal.rejects``, ...), so
that a user's operation takes the road a built-in takes. A ``==``/``!=``/``in``/``not in`` comparison with a
registered name as a string literal (alone, or in a tuple, list or set literal) in a consumer fails, naming
file:line. The names are read from the registries, so a built-in added later is covered too; the modules that
declare an operation (where its name is written once) are not its consumers.

:data:`KNOWN` lists the comparisons left, each with its reason: a new one fails, and a replaced one must leave the
list (its count lowered, or the entry removed).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ppl_tok"


def _scoring_names() -> set[str]:
    from ppl_tok.scorings.registry import ALIASES, SCORINGS

    return set(SCORINGS.names()) | {old for names in ALIASES.values() for old in names}


def _task_names() -> set[str]:
    from ppl_tok.strings.tasks import TASKS

    return set(TASKS.names())


def _proposal_names() -> set[str]:
    from ppl_tok.proposals import PROPOSALS

    return set(PROPOSALS.names())


def _backend_names() -> set[str]:
    from ppl_tok.lm.backends import BACKENDS

    return set(BACKENDS)


#: kind -> (its names, its consumers: files or folders of the package scanned (``"ppl_tok/"``: all of it), the
#: modules that declare it (not scanned)). A scoring's names are common words ("exact" is also a certificate and a
#: prefill mode, "mixture" an ensemble's kind), so its consumers are the modules that take a scoring.
REGISTRIES: dict[str, tuple[Callable[[], set[str]], tuple[str, ...], tuple[str, ...]]] = {
    "scoring": (_scoring_names, ("ppl_tok/perplexity/", "ppl_tok/qa/", "ppl_tok/cli/perplexity.py",
                                 "ppl_tok/cli/qa.py", "ppl_tok/integrations/lm_eval"), ("ppl_tok/scorings/",)),
    "string task": (_task_names, ("ppl_tok/",), ("ppl_tok/strings/tasks.py", "ppl_tok/strings/builtin_tasks.py")),
    "proposal": (_proposal_names, ("ppl_tok/",), ("ppl_tok/proposals/registry.py",)),
    "backend": (_backend_names, ("ppl_tok/",), ("ppl_tok/lm/backends.py", "ppl_tok/lm/spec.py")),
}

#: comparisons left, ``"path:kind:name"`` -> (count, why); a new one fails, a replaced one must leave the list. None
#: is left: the perplexity report asks a folder's scoring (``searched_floor``, ``estimate_field``), its store the
#: scoring's ``legacy_settings``, and the QA contexts name the prefill mode ``strings.prefill.EXACT_PREFILL``.
KNOWN: dict[str, tuple[int, str]] = {}


def literal_comparisons(source: str, names: set[str]) -> list[tuple[int, str, str]]:
    """``(line, name, code)`` of each ``==``/``!=``/``in``/``not in`` comparison in ``source`` with one of ``names``
    as a string literal (alone, or in a tuple, list or set literal); one entry per name compared."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        literals = []
        for operand in (node.left, *node.comparators):
            elements = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            literals += [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        found += [(node.lineno, name, ast.unparse(node)) for name in sorted(names & set(literals))]
    return sorted(found)


def comparisons(names: set[str], consumers: tuple[str, ...], declaring: tuple[str, ...]) -> dict[str, list[str]]:
    """``path:name`` -> the lines (``path:line: code``) of the consumers that compare a literal in ``names``."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not any(rel.startswith(c) for c in consumers) or any(rel.startswith(d) for d in declaring):
            continue
        for line, name, code in literal_comparisons(path.read_text(encoding="utf-8"), names):
            found.setdefault(f"{rel}:{name}", []).append(f"{rel}:{line}: {code}")
    return found


def test_the_scan_finds_a_comparison_and_only_one():
    """The scan finds the forms it is meant to and nothing else (a check that could not fail would pass here too)."""
    names = {"next", "lookahead", "canonical+rest", "beam"}
    src = ('if task == "next":\n    pass\nif name in ("a", "lookahead"):\n    pass\n'
           'x = {"next": 1}["next"]\nif task.name == other:\n    pass\nok = s != "canonical+rest"\n'
           'y = "beam"\nif s not in {"beam", "next"}:\n    pass\n')
    assert literal_comparisons(src, names) == [
        (1, "next", "task == 'next'"), (3, "lookahead", "name in ('a', 'lookahead')"),
        (8, "canonical+rest", "s != 'canonical+rest'"), (10, "beam", "s not in {'beam', 'next'}"),
        (10, "next", "s not in {'beam', 'next'}")]


def test_every_registry_is_scanned_and_known_names_its_kinds():
    files = [path.relative_to(ROOT).as_posix() for path in PACKAGE.rglob("*.py")]
    for kind, (names_of, consumers, declaring) in REGISTRIES.items():
        assert names_of(), f"the {kind} registry is empty"
        gone = [p for p in consumers + declaring if not any(f.startswith(p) for f in files)]
        assert not gone, f"{kind}: {gone} match no module of the package (moved? update REGISTRIES)"
    assert {"conditional", "next", "generate", "surprisal"} <= _task_names()
    assert {"lookahead", "uniform", "prior", "stratified", "learned"} <= _proposal_names()
    assert {key.split(":")[1] for key in KNOWN} <= set(REGISTRIES)


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_no_consumer_compares_a_registered_name(kind):
    names_of, consumers, declaring = REGISTRIES[kind]
    found = comparisons(names_of(), consumers, declaring)
    new, stale = [], []
    for key, lines in found.items():
        path, name = key.rsplit(":", 1)
        if len(lines) > KNOWN.get(f"{path}:{kind}:{name}", (0, ""))[0]:
            new += lines
    for key, (count, _) in KNOWN.items():
        path, k, name = key.split(":")
        left = len(found.get(f"{path}:{name}", []))
        if k == kind and left < count:
            stale.append(f"{key}: {count} known, {left} left: lower it in KNOWN (or remove the entry)")
    assert not new, (f"a consumer compares a {kind}'s name with a literal; ask the registered object (a hook or an "
                     "attribute) instead:\n" + "\n".join(new))
    assert not stale, "\n".join(stale)
