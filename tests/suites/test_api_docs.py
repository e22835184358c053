"""The documentation site (mkdocs.yml): the user guide, the API reference generated from the docstrings and the
research notes build with warnings as errors, so a page naming a module or object that does not exist, a broken
link or anchor between pages, or a docstring that documents a parameter its signature lacks fails here; and every
dotted ``ppl_tok.`` name the docs and the README mention resolves (issue 45: "every documented call exists")."""

import importlib
import re
import subprocess
import sys

import pytest

from conftest import ROOT

#: dotted names the docs mention on purpose without their existing (each with the reason)
NOT_IN_THE_PACKAGE = {
    "ppl_tok.lm.vllm": "docs/lm.md's worked example of a backend a user adds",
}


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_dotted_name_in_the_docs_resolves():
    pages = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    mentioned = {}
    for page in pages:
        for name in re.findall(r"ppl_tok(?:\.[A-Za-z_][A-Za-z0-9_]*)+", page.read_text()):
            mentioned.setdefault(name, page.relative_to(ROOT).as_posix())
    assert len(mentioned) > 30, "too few ppl_tok names found: the pattern or the docs changed"
    missing = {name: page for name, page in mentioned.items() if name not in NOT_IN_THE_PACKAGE and not _resolves(name)}
    assert not missing, f"the docs name what the package lacks (name: first page): {missing}"


def test_the_site_and_its_api_reference_build_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocstrings", reason="the dev extra installs mkdocs and mkdocstrings (make setup)")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                          "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, f"mkdocs build --strict failed:\n{out.stderr[-4000:]}"
    page = (tmp_path / "site" / "api" / "infer" / "index.html").read_text()
    for name in ("ppl_tok.infer.exact.exact_marginal", "ppl_tok.infer.importance.marginal",
                 "ppl_tok.infer.search.marginal_bounds", "ppl_tok.infer.smc.smc_marginal"):
        assert f'id="{name}"' in page, f"the API reference lacks {name}"


def test_a_reference_to_a_missing_name_fails_the_build(tmp_path):
    pytest.importorskip("mkdocstrings", reason="the dev extra installs mkdocs and mkdocstrings (make setup)")
    config = (ROOT / "mkdocs.yml").read_text()
    docs = tmp_path / "docs"
    (docs / "api").mkdir(parents=True)
    (docs / "index.md").write_text("# x\n")
    (docs / "api" / "index.md").write_text("# x\n\n::: ppl_tok.infer.no_such_module\n")
    nav = re.compile(r"^nav:.*?(?=^plugins:)", re.S | re.M)
    config = nav.sub("nav:\n  - index.md\n  - api/index.md\n", config).replace("docs_dir: docs", f"docs_dir: {docs}")
    (tmp_path / "mkdocs.yml").write_text(config.replace("paths: [.]", f"paths: [{ROOT}]"))
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode != 0 and "no_such_module" in out.stderr, out.stderr[-2000:]


def test_every_public_module_is_in_the_api_reference():
    """Each module of the package has its ``::: module`` block in docs/api/ (issue 57: the extension points were
    missing), but the command line's (``cli``, ``bench``: docs/cli.md documents the commands) and the packages'
    ``__init__`` facades (their names are documented where they are defined)."""
    documented = set(re.findall(r"^::: (\S+)", "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md")),
                                re.M))
    public = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "ppl_tok").rglob("*.py")
              if p.name != "__init__.py" and not p.name.startswith("_")}
    public = {m for m in public if m.split(".")[1] not in ("cli", "bench")}
    missing = sorted(public - documented)
    assert not missing, f"add a ::: block to the page of its concept in docs/api/: {missing}"
    assert {"ppl_tok.strings.tasks", "ppl_tok.strings.batch", "ppl_tok.perplexity.run", "ppl_tok.integrations.lm_eval",
            "ppl_tok.qa.run", "ppl_tok.common.registry", "ppl_tok.proposals.registry"} <= documented
