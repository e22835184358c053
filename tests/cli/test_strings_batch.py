"""``conditional``, ``next`` and ``generate`` with ``--input`` (batches into a resumable ``--out``) and with several
``--model`` (ensembles), on toy LMs the CLI loads by name, and once on SmolLM2."""

import json
from pathlib import Path

import pytest

import ppl_tok.cli.common
from ppl_tok.cli.main import main
from ppl_tok.strings import StringSearchConfig, string_conditional
from ppl_tok.strings.batch import StringsStore
from ppl_tok.strings.ensemble import Ensemble, ensemble_conditional
from ppl_tok.strings.generate import generate
from sigkill import killed_twice_then_finished
from tests.strings.test_ensemble import OTHER
from tests.strings.test_state import history_lm

TESTS = Path(__file__).resolve().parent.parent
PAIRS = [("ab", "ba"), ("", "abba"), ("bab", "a")]
SEARCH = ["--beam", "2", "--prune", "3"]
CONFIG = StringSearchConfig(beam=2, prune=3.0)


def toys() -> dict:
    """Two toy LMs over the same strings with different tokenizers, by the name the CLI's --model gives."""
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    a.name, b.name = "toy-a", "toy-b"
    return {"toy-a": a, "toy-b": b}


@pytest.fixture
def toy(monkeypatch):
    lms = toys()
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda spec: lms[spec.model])
    return lms


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def pairs_file(tmp_path, pairs=PAIRS, name="pairs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps({"prompt": p, "text": t, "id": i}) + "\n" for i, (p, t) in enumerate(pairs)))
    return path


def test_a_batch_streams_records_equal_to_the_api(toy, tmp_path, capsys):
    code, out, err = run(capsys, "conditional", "--input", pairs_file(tmp_path), "--model", "toy-a", *SEARCH)
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["index"] for r in records] == [0, 1, 2]
    for (prompt, text), r in zip(PAIRS, records):
        assert r["estimate"] == string_conditional(toy["toy-a"], prompt, text, config=CONFIG).estimate
        assert r["where"].endswith(f"pairs.jsonl:{r['index'] + 1}")
    code, out, _ = run(capsys, "next", "--input", pairs_file(tmp_path), "--model", "toy-a", *SEARCH, "--json")
    data = json.loads(out)
    assert code == 0 and data["items"] == 3 and data["errors"] == 0 and len(data["records"]) == 3


def test_out_resumes_and_refuses_other_settings(toy, tmp_path, capsys):
    argv = ["conditional", "--input", pairs_file(tmp_path), "--model", "toy-a", "--out", tmp_path / "run", *SEARCH]
    code, out, _ = run(capsys, *argv, "--json")
    first = json.loads(out)
    assert code == 0 and first["computed"] == 3 and first["stored_before"] == 0
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "0 computed now, 3 read back, 0 errors" in out and "(resumable)" in out
    code, _, err = run(capsys, *argv[:-4], "--beam", "3", "--prune", "3")
    assert code == 2 and "beam: folder has 2, this run has 3" in err and len(err.strip().splitlines()) == 1
    pairs_file(tmp_path, PAIRS + [("a", "b")])
    code, _, err = run(capsys, *argv)
    assert code == 2 and "input_sha256: folder has" in err


@pytest.mark.parametrize("kind, weights", [("mixture", []), ("product", ["--weight", "1", "--weight", "0.5"])])
def test_a_two_model_ensemble_on_the_cli_equals_the_python_api(toy, capsys, kind, weights):
    lms = [toy["toy-a"], toy["toy-b"]]
    w = [1.0, 0.5] if weights else None
    models = ["--model", "toy-a", "--model", "toy-b", "--kind", kind, *weights, *SEARCH]
    code, out, _ = run(capsys, "conditional", "--prompt", "ab", "bab", *models, "--event", "prefix", "--json")
    want = ensemble_conditional(Ensemble.of(lms, "ab", kind, w, config=CONFIG), "bab")
    data = json.loads(out)
    assert code == 0 and data["models"] == ["toy-a", "toy-b"] and data["kind"] == kind
    assert (data["lower"], data["estimate"], data["upper"]) == (want.lower, want.estimate, want.upper)
    code, out, _ = run(capsys, "next", "--prompt", "ab", *models, "--json")
    nb = Ensemble.of(lms, "ab", kind, w, config=CONFIG).next_bytes().to_dict()
    assert code == 0 and json.loads(out)["log_probs"] == nb["log_probs"]
    code, out, _ = run(capsys, "generate", "--prompt", "ab", "--max-bytes", "4", "--greedy", *models, "--json")
    gen = generate(Ensemble.of(lms, "ab", kind, w, config=CONFIG), "", 4, greedy=True, progress=False)
    assert code == 0 and json.loads(out)["text"] == gen.text
    code, out, _ = run(capsys, "next", "--prompt", "ab", *models, "--top", "2")
    assert code == 0 and f"{kind} of toy-a + toy-b" in out and len(out.splitlines()) == 4


@pytest.mark.parametrize("line, message", [
    ("{not json", "pairs.jsonl:2: not valid JSON"),
    ('["a", "b"]', "pairs.jsonl:2: expected a JSON object"),
    ('{"prompt": "a"}', "pairs.jsonl:2: missing field 'text'"),
    ('{"prompt": 3, "text": "a"}', "pairs.jsonl:2: field 'prompt' should be a string, got int"),
    ('{"prompt": "a\\u0000", "text": "a"}', "pairs.jsonl:2: field 'prompt' holds a NUL character"),
    ('{"prompt": "a", "text": "\\ud800"}', "pairs.jsonl:2: field 'text' holds a lone surrogate"),
    ('{"prompt": "a", "text": ""}', "pairs.jsonl:2: field 'text' is empty"),
])
def test_malformed_rows_are_file_line_errors_before_the_model_loads(no_work, tmp_path, capsys, line, message):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "a", "text": "b"}) + "\n" + line + "\n")
    code, out, err = run(capsys, "conditional", "--input", path)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == ""


@pytest.mark.parametrize("argv, message", [
    (["conditional", "TEXT", "--input", "{pairs}"], "drop TEXT"),
    (["next", "--prompt", "a", "--input", "{pairs}"], "drop --prompt"),
    (["next", "--model", "a", "--model", "b", "--weight", "1"], "1 --weight for 2 --model"),
    (["next", "--prompt", "a", "--kind", "product"], "--kind combines several LMs"),
    (["next", "--model", "a", "--model", "b", "--chars"], "--chars reads one LM"),
    (["next", "--prompt", "a", "--out", "{tmp}/run"], "--out stores the records of --input"),
    (["generate", "--model", "a", "--model", "b", "--mode", "tokens"], "mode 'tokens'"),
    (["conditional", "b"], "give --prompt"),
    (["conditional", "--input", "{pairs}", "--out", "{pairs}"], "is a file, not a run folder"),
])
def test_bad_flags_are_one_line_before_the_model_loads(no_work, tmp_path, capsys, argv, message):
    pairs = pairs_file(tmp_path)
    code, _, err = run(capsys, *[a.format(pairs=pairs, tmp=tmp_path) for a in argv])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_progress_goes_to_stderr_and_the_json_stays_clean(toy, tmp_path, capsys):
    for argv in (["conditional", "--input", pairs_file(tmp_path), "--out", tmp_path / "run"],
                 ["conditional", "--prompt", "abab", "ba"], ["next", "--prompt", "abba"],
                 ["next", "--prompt", "abba", "--model", "toy-a", "--model", "toy-b"]):
        model = [] if "--model" in argv else ["--model", "toy-a"]
        code, out, err = run(capsys, *argv, *model, "--progress", "--json")
        assert code == 0 and isinstance(json.loads(out), dict)
        assert argv[0] in err and "B/s" in err  # the bar, in bytes


CHILD = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]  # the checkout's ppl_tok, not another install's
import ppl_tok.cli.common
from tests.cli.test_strings_batch import toys
lms = toys()
ppl_tok.cli.common.load_lm = lambda spec: lms[spec.model]
from ppl_tok.cli.main import main
sys.exit(main({argv!r}))
"""

TASKS = {"conditional": [], "generate": ["--max-bytes", "8", "--seed", "5", "--temperature", "0.9"], "next": []}


@pytest.mark.parametrize("task", ["conditional", pytest.param("next", marks=pytest.mark.slow),  # about 9 CPU-s each
                                  pytest.param("generate", marks=pytest.mark.slow)])
def test_sigkill_mid_run_then_a_rerun_stores_what_an_uninterrupted_run_does(tmp_path, task, capsys, monkeypatch):
    pairs = [("ab" * (1 + i % 3) + "a" * (i % 2), "bab" + "ab" * (i % 4)) for i in range(24)]
    path = pairs_file(tmp_path, pairs)
    argv = [task, "--input", str(path), "--model", "toy-a", "--batch-size", "1", "--beam", "4", "--prune", "6", *TASKS[task]]
    lms = toys()
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda spec: lms[spec.model])
    assert run(capsys, *argv, "--out", tmp_path / "ref")[0] == 0
    reference = (tmp_path / "ref" / StringsStore.records_file).read_bytes()
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(TESTS), root=str(TESTS.parent), argv=[*argv, "--out", str(out)]))
    records = out / StringsStore.records_file
    killed_twice_then_finished(script, records, reference.count(b"\n"), capture_output=True)
    assert sorted(records.read_bytes().splitlines()) == sorted(reference.splitlines())


@pytest.mark.slow
def test_a_smollm2_batch_equals_the_one_prompt_command(loaded, tmp_path, capsys):
    pairs = [("The capital of France is P", "aris"), (" wo", "rld")]
    code, out, _ = run(capsys, "conditional", "--input", pairs_file(tmp_path, pairs), "--beam", "2", "--json")
    records = json.loads(out)["records"]
    assert code == 0 and len(records) == 2
    for (prompt, text), r in zip(pairs, records):
        code, out, _ = run(capsys, "conditional", "--prompt", prompt, text, "--beam", "2", "--json")
        one = json.loads(out)
        assert code == 0 and r["estimate"] == pytest.approx(one["estimate"], abs=1e-4)
        assert r["canonical_tokens"] == pytest.approx(one["canonical_tokens"], abs=1e-4)


def test_next_chars_of_a_file_takes_the_default_floor(toy, tmp_path, capsys):
    """``next --input FILE --chars`` without ``--min-log-prob``: the floor's default (NextParams), as for one prompt
    (it crashed on a None floor before the task owned its parameters)."""
    from ppl_tok.strings import initial, next_char_log_probs
    from ppl_tok.strings.tasks import NextParams

    code, out, err = run(capsys, "next", "--input", pairs_file(tmp_path), "--chars", "--model", "toy-a", *SEARCH,
                         "--json")
    assert code == 0, err
    records = json.loads(out)["records"]
    for (prompt, _), r in zip(PAIRS, records):
        want = next_char_log_probs(initial(toy["toy-a"], prompt, config=CONFIG), NextParams().min_log_prob)
        assert r["unit"] == "char" and r["chars"] == {c: list(e) for c, e in want.chars.items()}


# ------------------------------------------------------------------ the conditional's event (issue 58 item 3)
WIDE_FLAGS = ["--beam", "10000", "--prune", "1000"]  # nothing pruned on these toys: brute force's figure


@pytest.fixture
def spaced(monkeypatch):
    """A toy LM over a vocabulary with whitespace and punctuation (the boundary set's), loaded as --model toy-s."""
    from tests.strings.test_conditional import VOCAB
    from tests.strings.test_state import history_lm as toy_lm

    lm = toy_lm(4, VOCAB)
    lm.name = "toy-s"
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda spec: lm)
    return lm


EVENT_PAIRS = [("ab b", "a ba"), ("a", "b. a"), ("b a", "b"), ("", "ab")]


@pytest.mark.parametrize("event", ["boundary", "prefix", None])
def test_one_prompt_under_each_event_equals_python_and_brute_force(spaced, capsys, event):
    """``ppl-tok conditional`` under ``--event`` (``None``: the default, boundary) equals ``string_conditional`` and
    brute force over all token sequences and next characters (1e-9); ``--json`` carries the event."""
    from ppl_tok.strings.conditional_event import DEFAULT_EVENT
    from tests.strings.test_conditional import brute_event
    from tests.strings.test_state import WIDE, brute_prefix

    want_event = event or DEFAULT_EVENT
    flag = ["--event", event] if event else []
    for prompt, text in EVENT_PAIRS:
        code, out, err = run(capsys, "conditional", "--prompt", prompt, text, "--model", "toy-s", *WIDE_FLAGS, *flag,
                             "--json")
        assert code == 0, err
        got = json.loads(out)
        alone = string_conditional(spaced, prompt, text, config=WIDE, **({"event": event} if event else {}))
        brute = brute_event(spaced, (prompt + text).encode(), want_event) - brute_prefix(spaced, prompt.encode())
        assert got["event"] == alone.event == want_event
        assert got["estimate"] == pytest.approx(min(0.0, brute), abs=1e-9)
        assert got["estimate"] == pytest.approx(alone.estimate, abs=1e-12)
        assert got["lower"] - 1e-9 <= brute <= got["upper"] + 1e-9
    code, out, _ = run(capsys, "conditional", "--prompt", "ab b", "a ba", "--model", "toy-s", *WIDE_FLAGS, *flag)
    label = "then a boundary)" if want_event == "boundary" else "is a prefix)"
    assert code == 0 and f"log P(prompt+text {label}" in out


@pytest.mark.parametrize("event", ["boundary", "prefix"])
def test_input_under_each_event_equals_conditionals_many(spaced, tmp_path, capsys, event):
    """``--input`` (batches of 3) under each event: every record equals Python's batched conditional and carries
    the event."""
    from ppl_tok.strings.conditional import conditionals_many

    code, out, err = run(capsys, "conditional", "--input", pairs_file(tmp_path, EVENT_PAIRS), "--model", "toy-s",
                         "--batch-size", "3", *SEARCH, "--event", event, "--json")
    assert code == 0, err
    records = json.loads(out)["records"]
    want = conditionals_many(spaced, [p for p, _ in EVENT_PAIRS], [t for _, t in EVENT_PAIRS], config=CONFIG,
                             event=event)
    assert [r["event"] for r in records] == [event] * len(EVENT_PAIRS)
    for r, w in zip(records, want):
        assert (r["lower"], r["estimate"], r["upper"]) == pytest.approx((w.lower, w.estimate, w.upper), abs=1e-12)


@pytest.mark.parametrize("event", ["boundary", "prefix"])
def test_search_tree_under_each_event_equals_conditionals_tree(spaced, tmp_path, capsys, event):
    from ppl_tok.strings.conditional_tree import conditionals_tree

    pairs = EVENT_PAIRS[:3]
    want = conditionals_tree(spaced, [p for p, _ in pairs], [t for _, t in pairs], config=CONFIG, event=event)
    code, out, err = run(capsys, "conditional", "--input", pairs_file(tmp_path, pairs), "--model", "toy-s",
                         *SEARCH, "--search", "tree", "--event", event, "--json")
    assert code == 0, err
    records = json.loads(out)["records"]
    assert [r["event"] for r in records] == [event] * len(pairs)
    assert [r["estimate"] for r in records] == pytest.approx([w.estimate for w in want], abs=1e-12)
    code, out, _ = run(capsys, "conditional", "--prompt", pairs[0][0], pairs[0][1], "--model", "toy-s", *SEARCH,
                       "--search", "tree", "--event", event, "--json")
    (one,) = conditionals_tree(spaced, [pairs[0][0]], [pairs[0][1]], config=CONFIG, event=event)
    assert code == 0 and json.loads(out)["estimate"] == pytest.approx(one.estimate, abs=1e-12)


def test_a_folder_resumes_under_its_event_and_an_older_one_under_prefix(spaced, tmp_path, capsys):
    """A folder stores its event and refuses a resume under the other (one line naming the flag that resumes it); a
    folder written before the event was stored (no ``event`` in its run.json) scored the prefix event: it resumes
    under ``--event prefix`` and is refused under the default."""
    argv = ["conditional", "--input", pairs_file(tmp_path, EVENT_PAIRS), "--model", "toy-s", *SEARCH,
            "--out", tmp_path / "run"]
    assert run(capsys, *argv)[0] == 0
    settings = json.loads((tmp_path / "run" / StringsStore.settings_file).read_text())
    assert settings["event"] == "boundary"
    code, _, err = run(capsys, *argv, "--event", "prefix")
    assert code == 2 and "event: folder has 'boundary', this run has 'prefix'" in err
    assert len(err.strip().splitlines()) == 1
    old = tmp_path / "old"
    assert run(capsys, *argv[:-1], old, "--event", "prefix")[0] == 0
    path = old / StringsStore.settings_file
    stored = json.loads(path.read_text())
    del stored["event"]  # as a folder of an older ppl-tok holds it
    path.write_text(json.dumps(stored))
    code, _, err = run(capsys, *argv[:-1], old)
    assert code == 2 and "event: folder has 'prefix', this run has 'boundary' (the folder's run: --event prefix)" in err
    code, out, err = run(capsys, *argv[:-1], old, "--event", "prefix")
    assert code == 0 and f"0 computed now, {len(EVENT_PAIRS)} read back" in out, err


def test_an_ensemble_asks_for_the_prefix_event(toy, capsys):
    code, out, err = run(capsys, "conditional", "--prompt", "ab", "bab", "--model", "toy-a", "--model", "toy-b")
    assert code == 2 and out == "" and "add --event prefix" in err and len(err.strip().splitlines()) == 1
