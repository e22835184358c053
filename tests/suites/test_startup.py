"""Start-up (issue 57): ``import ppl_tok``, ``ppl-tok --help`` and ``ppl-tok models list`` import neither torch,
pyro, networkx nor transformers; each public name still resolves, importing its module then.
(The CPU time is measured by ``python -m benchmarks startup``, never asserted here.)"""

import subprocess
import sys

import pytest

HEAVY = ("torch", "pyro", "networkx", "transformers")


def heavy_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return [m for m in out.stdout.splitlines()[-1].removeprefix("HEAVY=").split(",") if m]


@pytest.mark.parametrize("what, code", [
    ("import ppl_tok", "import ppl_tok"),
    ("the facades", "import ppl_tok, ppl_tok.lm, ppl_tok.strings, ppl_tok.scorings, ppl_tok.perplexity, ppl_tok.qa"),
    ("ppl-tok --help", "import contextlib, io\nfrom ppl_tok.cli.main import main\n"
                       "with contextlib.redirect_stdout(io.StringIO()): assert main(['--help']) == 0"),
    ("ppl-tok models list", "import contextlib, io\nfrom ppl_tok.cli.main import main\n"
                            "with contextlib.redirect_stdout(io.StringIO()): assert main(['models', 'list']) == 0"),
])
def test_a_light_command_imports_no_heavy_module(what, code):
    assert heavy_after(code) == [], f"{what} imported {heavy_after(code)} (python -X importtime shows who)"


def test_a_public_name_imports_its_module_on_first_use():
    assert heavy_after("import ppl_tok\nppl_tok.compile_mdd") == ["networkx"]
    assert "torch" in heavy_after("import ppl_tok\nppl_tok.marginal")


def test_the_scoring_choices_are_read_when_parsed():
    """``--scoring`` lists the registry's names, read when the flag is parsed: an unknown one is refused by name."""
    code = ("import contextlib, io\nfrom ppl_tok.cli.main import main\nerr = io.StringIO()\n"
            "with contextlib.redirect_stderr(err): status = main(['perplexity', '-', '--scoring', 'nope'])\n"
            "assert status == 2 and \"'nope'\" in err.getvalue() and 'canonical+rest' in err.getvalue(), err.getvalue()")
    heavy_after(code)
