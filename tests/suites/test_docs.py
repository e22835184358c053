"""Tutorials are executed: every ```python block of each docs/tutorials/*.md, in order.

Here, in this process (the quick ones under ``make test-fast``: see :data:`SLOW`); when the session also runs them
from the installed wheel (tests/suites/test_wheel.py, ``make test``), once, there: see :func:`runs_from_the_wheel`."""

import re
from pathlib import Path

import pytest

from conftest import LLAMA2, ROOT

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))


def code_blocks(path: Path) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S))


def figures(code: str) -> list[str]:
    """The image files a tutorial's code writes (``savefig("...")``, ``draw("...")``)."""
    return [a or b for a, b in re.findall(r'savefig\("([^"]+)"|draw\("([^"]+)"', code)]


def runs_from_the_wheel(session: pytest.Session, path: Path) -> bool:
    """Whether this session also runs tutorial ``path`` from the installed wheel (tests/suites/test_wheel.py, slow):
    the same code in a fresh interpreter outside the checkout, with no warning allowed and the same figures checked.
    ``make test`` selects both; running the tutorial here as well would check nothing more, but for a tutorial
    that reads ``PPL_TOK_LLAMA2`` (set here, absent from a user's environment there: other lines run)."""
    return "PPL_TOK_LLAMA2" not in code_blocks(path) and any(
        item.path.name == "test_wheel.py" and getattr(item, "callspec", None) is not None
        and item.callspec.params.get("path") == path for item in session.items)


#: the tutorials over 10 CPU-s here (1 thread, a loaded 2-core machine): slow, so that ``make test-fast`` runs the
#: others and ``make test`` all of them (from the wheel, or here: 01 and 11)
SLOW = {"01-tokenization-space": 21, "02-marginal-with-pyro": 17, "03-writing-your-own-proposal": 14,
        "06-the-lm-over-strings": 23, "07-surprisal-over-strings": 12, "09-where-the-danger-is": 19,
        "11-reading-times": 50}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW else p for p in TUTORIALS],
                         ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path, tmp_path, monkeypatch, request):
    code = code_blocks(path)
    assert code.strip(), f"{path.name} has no python blocks"
    if runs_from_the_wheel(request.session, path):
        pytest.skip(f"{path.stem} runs from the installed wheel in this session (tests/suites/test_wheel.py)")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PPL_TOK_LLAMA2", str(LLAMA2))
    exec(compile(code, str(path), "exec"), {"__name__": "__tutorial__"})
    for name in figures(code):
        assert (tmp_path / name).stat().st_size > 1000, f"{name} was not written"
