"""The wheel a user installs: built from the sources alone, installed non-editable into a fresh virtual environment
(its dependencies taken from this one), then ``ppl-tok --help``, every subcommand's ``--help`` and every module
of every subpackage, run from outside the checkout so that nothing but the installed package can be imported."""

import importlib.util
import json
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a wheel and a virtual environment (about 45 s)

from conftest import ROOT

#: the installed package, walked by the fresh environment's Python: every module imported, every command's --help
PROBE = r"""
import contextlib, importlib, io, json, pkgutil, sys
import ppl_tok
from ppl_tok.cli.main import build_parser, main
from ppl_tok.lm.cards import list_cards

modules = sorted(m.name for m in pkgutil.walk_packages(ppl_tok.__path__, "ppl_tok.") if not m.name.endswith("__main__"))
for name in modules:
    importlib.import_module(name)


def commands(parser, path=()):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield path + (name,)
                yield from commands(sub, path + (name,))


helps = {}
for path in commands(build_parser()):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*path, "--help"])
    helps[" ".join(path)] = (code, out.getvalue().startswith("usage: ppl-tok " + " ".join(path)))
print(json.dumps({"file": ppl_tok.__file__, "version": ppl_tok.__version__, "modules": modules,
                  "cards": sorted(list_cards()), "helps": helps}))
"""


def _run(cmd, cwd, **kw):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, **kw)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # the sources a wheel is built from, nothing else of the checkout
    shutil.copytree(ROOT / "ppl_tok", src / "ppl_tok", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "models", src / "models", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp / "dist"), str(src)],
         cwd=tmp)
    wheel = next((tmp / "dist").glob("ppl_tok-*.whl"))
    env = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=tmp)
    purelib = Path(_run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=tmp).stdout.strip())
    # the dependencies (torch, transformers, pyro, ...) from this environment; its .pth files are not read there,
    # so an editable install of the checkout stays invisible
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q", "--no-deps",
          "--no-index", str(wheel)], cwd=tmp)
    return {"wheel": wheel, "env": env, "purelib": purelib, "cwd": tmp}


def test_the_wheel_holds_every_subpackage_and_the_model_cards(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "ppl_tok").rglob("__init__.py")}
    assert packages <= {str(Path(n).parent) for n in names}, sorted(packages - {str(Path(n).parent) for n in names})
    assert {"ppl_tok/strings/__init__.py", "ppl_tok/perplexity/__init__.py"} <= set(names)
    cards = {Path(n).name for n in names if n.startswith("ppl_tok/models/") and n.endswith(".toml")}
    assert cards == {p.name for p in (ROOT / "models").glob("*.toml")} and cards  # the top-level models/ folder


def test_the_installed_command_runs_every_help_and_imports_every_module(installed):
    env, cwd = installed["env"], installed["cwd"]
    top = _run([str(env / "bin" / "ppl-tok"), "--help"], cwd=cwd)
    assert top.stdout.startswith("usage: ppl-tok") and "perplexity" in top.stdout
    _run([str(env / "bin" / "ppl-tok-lm-eval"), "--help"], cwd=cwd)
    probe = json.loads(_run([str(env / "bin" / "python"), "-c", PROBE], cwd=cwd).stdout)
    assert probe["file"].startswith(str(installed["purelib"])), probe["file"]  # not the checkout
    import ppl_tok

    assert probe["version"] == ppl_tok.__version__
    assert {"ppl_tok.strings.state", "ppl_tok.perplexity.score", "ppl_tok.bench.engine", "ppl_tok.cli.main",
            "ppl_tok.infer.importance"} <= set(probe["modules"])
    assert "smollm2-135m" in probe["cards"]
    assert {"bench strings", "bench perplexity", "qa run", "perplexity", "next"} <= set(probe["helps"])
    bad = {k: v for k, v in probe["helps"].items() if v != [0, True]}
    assert not bad, bad
