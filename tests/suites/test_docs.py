"""Tutorials are executed: every ```python block of each docs/tutorials/*.md, in order."""

import re
from pathlib import Path

import pytest

from conftest import LLAMA2, ROOT

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))


def code_blocks(path: Path) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path, tmp_path, monkeypatch):
    code = code_blocks(path)
    assert code.strip(), f"{path.name} has no python blocks"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PPL_TOK_LLAMA2", str(LLAMA2))
    exec(compile(code, str(path), "exec"), {"__name__": "__tutorial__"})
    for image in re.findall(r'savefig\("([^"]+)"|draw\("([^"]+)"', code):
        name = image[0] or image[1]
        assert (tmp_path / name).stat().st_size > 1000, f"{name} was not written"
