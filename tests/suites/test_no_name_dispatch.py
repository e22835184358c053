"""No consumer dispatches on a built-in operation's name (issue 57): a name is resolved once, by the registry, and
the object answers (its parameters, its metadata, its methods). A literal comparison with a registered name
(``== "canonical+rest"``, ``in ("beam", ...)``) outside the operation's own module and its registry is a test failure,
naming file:line.

:data:`OPERATIONS` lists, per kind of registered operation, its names and the modules that consume it, and, in :data:`KNOWN`, the comparisons not yet replaced, each with its reason: the list only shrinks.
String tasks and proposals are added to :data:`OPERATIONS` the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ppl_tok"


def _scoring_names() -> set[str]:
    from ppl_tok.scorings.registry import ALIASES, SCORINGS

    return set(SCORINGS.names()) | {old for names in ALIASES.values() for old in names}


#: kind -> (its names, the modules that consume it: files or folders of ``ppl_tok/`` where its names may not be
#: compared; the operation's own modules and its registry are not among them)
OPERATIONS = {
    "scoring": (_scoring_names, ("ppl_tok/perplexity/", "ppl_tok/qa/", "ppl_tok/cli/perplexity.py",
                                 "ppl_tok/cli/qa.py", "ppl_tok/integrations/lm_eval")),
}

#: comparisons left, "path:kind:name" -> (count, why); a new one fails, a replaced one must leave the list
KNOWN: dict[str, tuple[int, str]] = {
    "ppl_tok/perplexity/store.py:scoring:beam": (2, "the settings of folders written before prune_against and "
                                                     "exhaustive were recorded: a fact about old folders"),
    "ppl_tok/perplexity/store.py:scoring:prefix": (1, "as above"),
    "ppl_tok/perplexity/store.py:scoring:with-end": (1, "as above"),
    "ppl_tok/perplexity/store.py:scoring:canonical": (1, "a record's field canonical, not the scoring"),
    "ppl_tok/perplexity/report.py:scoring:beam": (2, "--compare and --importance analyse the beam's records"),
    "ppl_tok/perplexity/report.py:scoring:canonical+rest": (1, "--importance reads canonical+rest's is_estimate"),
    "ppl_tok/qa/report.py:scoring:canonical": (3, "the QA report's baseline classifier (QA hooks: not yet)"),
    "ppl_tok/qa/ensemble.py:scoring:canonical": (1, "an ensemble's source classifier (QA hooks: not yet)"),
    "ppl_tok/qa/ensemble.py:scoring:exact": (1, "an ensemble's source classifier (QA hooks: not yet)"),
    "ppl_tok/qa/run.py:scoring:stratified": (1, "the stratified record kind's body (QA hooks: not yet)"),
    "ppl_tok/qa/contexts.py:scoring:prefix": (2, "a context method's name, not the scoring"),
    "ppl_tok/qa/contexts.py:scoring:canonical": (1, "a context method's name, not the scoring"),
    "ppl_tok/qa/contexts.py:scoring:exact": (1, "a prefill mode, not the scoring"),
}

#: a comparison of a string literal: ``== "x"``, ``!= "x"``, ``in ("x", ...)``, ``not in {"x", ...}``
COMPARED = re.compile(r"""(?:[=!]=\s*(["'])(?P<one>[^"']+)\1)|(?:\bin\s*[(\[{](?P<many>(?:\s*["'][^"']+["']\s*,?)+)[)\]}])""")


def comparisons(names: set[str], consumers: tuple[str, ...]) -> dict[str, list[str]]:
    """``path:name`` -> the lines of the ``consumers`` that compare a literal in ``names``."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not any(rel.startswith(c) for c in consumers):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for m in COMPARED.finditer(code):
                literals = [m["one"]] if m["one"] else re.findall(r"""["']([^"']+)["']""", m["many"])
                for name in set(literals) & names:
                    found.setdefault(f"{rel}:{name}", []).append(f"{rel}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("kind", sorted(OPERATIONS))
def test_no_consumer_compares_a_registered_name(kind):
    names_of, consumers = OPERATIONS[kind]
    names = names_of()
    assert names, kind
    found = comparisons(names, consumers)
    new, stale = [], []
    for key, lines in found.items():
        path, name = key.rsplit(":", 1)
        if len(lines) > KNOWN.get(f"{path}:{kind}:{name}", (0, ""))[0]:
            new += lines
    for key, (count, _) in KNOWN.items():
        path, k, name = key.split(":")
        left = len(found.get(f"{path}:{name}", []))
        if k == kind and left < count:
            stale.append(f"{key}: {count} known, {left} left: lower it in KNOWN")
    assert not new, f"a consumer compares a {kind}'s name (ask the registered object instead):\n" + "\n".join(new)
    assert not stale, "\n".join(stale)


def test_the_check_sees_a_comparison():
    """The pattern finds the forms it is meant to (a check that could not fail would pass here too)."""
    names = {"beam", "canonical+rest"}
    text = ['if s == "beam":', "if x in ('prefix', 'beam'):", 'ok = name != "canonical+rest"', 'y = "beam"']
    hits = [line for line in text for m in COMPARED.finditer(line)
            if ({m["one"]} if m["one"] else set(re.findall(r"""["']([^"']+)["']""", m["many"]))) & names]
    assert hits == text[:3]
