"""The package's layers (docs/architecture.md): no import cycle, no import back up a layer, no study importing
another, size limits a newcomer can read. Imports inside functions count as much as those at the top."""

import ast
from pathlib import Path

import networkx as nx
import pytest

from conftest import ROOT

PACKAGE = ROOT / "ppl_tok"

#: bottom to top; a unit may import its own modules and any unit of a lower layer, nothing else
LAYERS = [
    ["common"],
    ["vocabulary", "limits", "datasets", "distributions"],
    ["mdd", "lm"],
    ["model", "sat", "canonicity", "canonical_step", "strings"],  # strings: over lm and mdd only, no estimator
    ["proposals"],
    ["infer"],
    ["plots"],
    ["scorings"],
    ["perplexity", "qa", "reading"],
    ["integrations", "bench"],
    ["cli"],
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _graph() -> nx.DiGraph:
    mods = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: a relative import (the package imports absolutely)"
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target not in mods and "." in target:
                    target = target.rpartition(".")[0]
                if target in mods and target not in (name, package):
                    graph.add_edge(name, target, line=node.lineno)
    return graph


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in _modules()} - {""}
    assert units <= set(LAYER), f"give these a layer in LAYERS and docs/architecture.md: {sorted(units - set(LAYER))}"


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(_graph()))
    assert not cycles, f"import cycles: {cycles}"


def test_no_import_back_up_a_layer_and_no_study_imports_another():
    graph = _graph()
    wrong = []
    for a, b, data in graph.edges(data=True):
        ua, ub = _unit(a), _unit(b)
        if ub == "":  # ppl_tok itself, the public facade: nothing inside imports it
            wrong.append(f"{a}:{data['line']} imports ppl_tok (import the module that defines the name)")
        elif ua and ua != ub and LAYER[ub] >= LAYER[ua]:
            wrong.append(f"{a}:{data['line']} ({ua}, layer {LAYER[ua]}) imports {b} ({ub}, layer {LAYER[ub]})")
    assert not wrong, "\n".join(wrong)


def test_the_package_imports_neither_the_benchmarks_nor_the_tests():
    """The wheel holds ``ppl_tok/`` only: an import of ``benchmarks`` or ``tests`` (inside a function too) fails
    outside a checkout (issue 57: ``bench gpu-check`` did)."""
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in ("benchmarks", "tests", "conftest")]
    assert not wrong, "move what it needs into the package:\n" + "\n".join(wrong)


def test_the_root_stays_small():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 12, root


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_and_functions_a_reader_can_hold(path):
    source = path.read_text(encoding="utf-8")
    assert source.count("\n") <= 460, f"{path} has {source.count(chr(10))} lines: split it by concept"
    long = [f"{n.name} ({n.end_lineno - n.lineno + 1} lines)" for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80]
    assert not long, f"{path}: {long}: split into named steps"
