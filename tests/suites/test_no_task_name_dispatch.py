"""No consumer compares a string task's or a proposal's name with a literal (issue 57: "no literal comparison of a
built-in operation's name remains in a consumer").

A consumer asks the registered object instead (a hook or an attribute: ``StringTask.shown``, ``StringTask.check``,
``StringTask.params``, ``Proposal.rejects``, ``Proposal.enumerates``, ``Proposal.from_params``), so that a user's
task or proposal takes the road a built-in takes. The names are read from the registries, so a built-in added later
is covered too; the modules that declare the built-ins (where each name is written once) are not consumers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ppl_tok"
#: where the built-ins are declared (each name written once, in its registration)
DECLARING = {"strings/tasks.py", "strings/builtin_tasks.py", "proposals/registry.py"}
#: comparisons left in modules another change owns (issue 57's scorings and QA part), each with its reason; an entry
#: that no longer matches fails (remove it when its module is fixed)
ELSEWHERE = {
    ("qa/report.py", "st.get('proposal', 'lookahead') == 'lookahead'"): "QA report: the default proposal (params57)",
    ("scorings/canonical_rest.py", "config.proposal.get('proposal') != 'lookahead'"):
        "canonical+rest's stored settings (params57)",
    ("qa/run.py", "kind == 'stratified'"): "the stratified scoring's record kind, a scoring name (params57's test)",
}


def builtin_names() -> set[str]:
    from ppl_tok.proposals import PROPOSALS
    from ppl_tok.strings.tasks import TASKS

    return set(TASKS.names()) | set(PROPOSALS.names())


def literal_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, code)`` of each ``==``/``!=``/``in``/``not in`` comparison in ``source`` with one of ``names`` as a
    string literal (alone, or in a tuple, list or set literal)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        literals = []
        for operand in (node.left, *node.comparators):
            elements = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            literals += [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if names & set(literals):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_scan_finds_a_comparison_and_only_one():
    names = {"next", "lookahead"}
    src = ('if task == "next":\n    pass\nif name in ("a", "lookahead"):\n    pass\n'
           'x = {"next": 1}["next"]\nif task.name == other:\n    pass\n')
    assert literal_comparisons(src, names) == [(1, "task == 'next'"), (3, "name in ('a', 'lookahead')")]


def test_no_consumer_compares_a_task_or_proposal_name_with_a_literal():
    names = builtin_names()
    assert {"conditional", "next", "generate", "surprisal", "lookahead", "uniform", "prior", "stratified",
            "learned"} <= names
    found, seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in DECLARING:
            continue
        for line, code in literal_comparisons(path.read_text(encoding="utf-8"), names):
            if (rel, code) in ELSEWHERE:
                seen.add((rel, code))
            else:
                found.append(f"ppl_tok/{rel}:{line}: {code}")
    assert not found, ("a consumer compares a task's or proposal's name with a literal; ask the registered object "
                       "(a hook or an attribute) instead:\n" + "\n".join(found))
    stale = sorted(set(ELSEWHERE) - seen)
    if stale:
        pytest.fail(f"ELSEWHERE lists comparisons that are gone (remove them): {stale}")
