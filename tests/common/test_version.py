"""The release number (ppl_tok.common.version): the package's, pyproject's, and a CHANGELOG section for it."""

import re

import ppl_tok
from conftest import ROOT
from ppl_tok.common.version import __version__


def test_one_version_everywhere():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert ppl_tok.__version__ == __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'version = { attr = "ppl_tok.common.version.__version__" }' in pyproject  # pyproject reads it from there


def test_changelog_has_a_section_for_the_version():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.M)
