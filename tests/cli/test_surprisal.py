"""``ppl-tok surprisal`` on a toy LM: TSV, CSV and JSON Lines rows, regions, resuming from --out, bad input."""

import csv
import io
import json
import math

import pytest

import ppl_tok.cli.common
from ppl_tok.cli.main import main
from ppl_tok.strings.surprisal import surprisals
from tests.strings.test_state import WIDE, history_lm
from tests.strings.test_surprisal import VOCAB

SENTENCES = "ab ba.\n\nb ab a\n"


@pytest.fixture
def toy(monkeypatch):
    lm = history_lm(3, VOCAB)
    loads = []
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: loads.append(a) or lm)
    lm.loads = loads
    return lm


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


WIDE_ARGS = ("--beam", "10000", "--prune", "1e4", "--exhaustive")  # the reference setting: rows equal surprisals()


def test_tsv_csv_and_jsonl_rows(toy, capsys, tmp_path):
    path = tmp_path / "s.txt"
    path.write_text(SENTENCES)
    code, out, err = run(capsys, "surprisal", str(path), *WIDE_ARGS)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out), dialect="excel-tab"))
    assert [(r["item"], r["unit"], r["text"]) for r in rows] == [
        ("0", "0", "ab"), ("0", "1", " ba"), ("0", "2", "."), ("1", "0", "b"), ("1", "1", " ab"), ("1", "2", " a")]
    expected = surprisals(toy, "b ab a", config=WIDE)
    assert [float(r["surprisal"]) for r in rows[3:]] == pytest.approx([r.surprisal for r in expected], abs=1e-9)
    assert rows[2]["followed_by"] == "boundary" and rows[0]["followed_by"] == "boundary"  # --final boundary
    code, out, _ = run(capsys, "surprisal", str(path), "--format", "csv", "--units", "char", *WIDE_ARGS)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 6 + 6 and rows[0]["text"] == "a"
    code, out, _ = run(capsys, "surprisal", str(path), "--format", "jsonl", "--units", "byte", *WIDE_ARGS)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 12 and rows[-1]["model"] == "smollm2-135m"
    with_end = surprisals(toy, "b ab a", config=WIDE, final="end")  # bytes end with the string by default
    assert sum(r["surprisal"] for r in rows[6:]) == pytest.approx(sum(r.surprisal for r in with_end), abs=1e-9)


def test_final_and_the_reading_columns(toy, capsys, tmp_path):
    """--final picks the last unit's event; --spillover K adds length, K shifted columns and the item totals."""
    path = tmp_path / "s.txt"
    path.write_text(SENTENCES)
    for final in ("end", "none", "boundary"):
        code, out, err = run(capsys, "surprisal", str(path), "--final", final, "--format", "jsonl", *WIDE_ARGS)
        rows = [json.loads(line) for line in out.splitlines()]
        want = surprisals(toy, "b ab a", config=WIDE, final=final)
        assert code == 0 and [r["surprisal"] for r in rows[3:]] == pytest.approx([r.surprisal for r in want], abs=1e-9)
    code, out, err = run(capsys, "surprisal", str(path), "--spillover", "2", *WIDE_ARGS)
    rows = list(csv.DictReader(io.StringIO(out), dialect="excel-tab"))
    assert code == 0, err
    assert list(rows[0])[-7:] == ["length", "surprisal_prev1", "canonical_prev1", "surprisal_prev2", "canonical_prev2",
                                  "item_surprisal", "item_canonical"]
    assert [r["length"] for r in rows] == ["2", "2", "1", "1", "2", "1"]
    assert rows[0]["surprisal_prev1"] == "" and rows[3]["surprisal_prev1"] == ""  # not across items
    assert [r["surprisal_prev1"] for r in rows[1:3]] == [r["surprisal"] for r in rows[0:2]]
    assert rows[2]["surprisal_prev2"] == rows[0]["surprisal"] and rows[1]["surprisal_prev2"] == ""
    assert float(rows[4]["item_surprisal"]) == pytest.approx(sum(float(r["surprisal"]) for r in rows[3:]), abs=1e-9)
    code, out, err = run(capsys, "surprisal", str(path), "--spillover", "-1")
    assert code == 2 and "--spillover" in err


def test_json_lines_input_regions_and_json(toy, capsys, tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"sentence": "ab ba."}\n{"sentence": "b ab a"}\n')
    regions = tmp_path / "r.csv"
    regions.write_text("item,start,end\n0,0,3\n0,3,6\n1,0,6\n")
    code, out, err = run(capsys, "surprisal", str(path), "--field", "sentence", "--regions", str(regions),
                         "--json", *WIDE_ARGS)
    assert code == 0, err
    data = json.loads(out)
    assert data["units"] == "regions" and [r["text"] for r in data["rows"]] == ["ab ", "ba.", "b ab a"]
    toy.loads.clear()
    regions.write_text("0,0,2\n0,3,6\n1,0,6\n")
    code, _, err = run(capsys, "surprisal", str(path), "--field", "sentence", "--regions", str(regions))
    assert code == 2 and "item 0: regions do not tile the text: characters 2..3 (' ') are in no region" in err
    regions.write_text("0,0,6\n")
    code, _, err = run(capsys, "surprisal", str(path), "--field", "sentence", "--regions", str(regions))
    assert code == 2 and "no regions for item 1" in err
    assert not toy.loads  # every input check before the model loads


def test_out_resumes(toy, capsys, tmp_path):
    """--out is a run folder of the one runner (run.json, records.jsonl: one record per item); a torn batch is
    computed again, a complete folder read back; other settings, or a rows file of an earlier ppl-tok, refused."""
    path = tmp_path / "s.txt"
    path.write_text(SENTENCES)
    out_dir = tmp_path / "rows"
    records = out_dir / "records.jsonl"
    code, whole, _ = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--batch-size", "1", *WIDE_ARGS)
    assert code == 0 and len(records.read_text().splitlines()) == 2
    assert [len(json.loads(line)["units"]) for line in records.read_text().splitlines()] == [3, 3]
    lines = records.read_text().splitlines(keepends=True)
    records.write_text(lines[0] + lines[1][:10])  # a kill: item 1 half written, a torn line
    toy.loads.clear()
    code, again, _ = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--batch-size", "1", *WIDE_ARGS)
    assert code == 0 and again == whole and records.read_text() == "".join(lines)
    assert len(toy.loads) == 1
    code, again, _ = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--batch-size", "1", *WIDE_ARGS)
    assert code == 0 and again == whole and records.read_text() == "".join(lines)  # all stored: nothing computed
    code, _, err = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--batch-size", "1", "--beam", "4",
                       "--prune", "1e4")
    assert code == 2 and "other settings" in err and "beam" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--batch-size", "1", "--units", "char",
                       *WIDE_ARGS)
    assert code == 2 and "units: folder has 'word', this run has 'char'" in err
    path.write_text("ab ab.\n")
    code, _, err = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--batch-size", "1", *WIDE_ARGS)
    assert code == 2 and "input_sha256" in err
    old = tmp_path / "old-rows.jsonl"  # an earlier ppl-tok's --out FILE: one line per unit
    old.write_text(json.dumps({"item": 0, "unit": 0}) + "\n")
    toy.loads.clear()
    code, _, err = run(capsys, "surprisal", str(path), "--out", str(old), *WIDE_ARGS)
    assert code == 2 and "rows file of an earlier ppl-tok surprisal" in err and "new --out folder" in err
    assert not toy.loads and len(err.strip().splitlines()) == 1


def test_items_walked_in_lockstep_print_what_one_at_a_time_does_and_a_failure_keeps_the_rest(toy, capsys,
                                                                                           tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("ab ba.\nb ab a\na b. ab\nba\n")
    code, one, _ = run(capsys, "surprisal", str(path), "--batch-size", "1", *WIDE_ARGS)
    assert code == 0
    code, many, _ = run(capsys, "surprisal", str(path), *WIDE_ARGS)
    assert code == 0 and many == one
    path.write_text("ab ba.\nab c\nb ab a\n")  # item 1 has a byte no token covers
    out_dir = tmp_path / "rows"
    code, printed, err = run(capsys, "surprisal", str(path), "--out", str(out_dir), *WIDE_ARGS)
    assert code == 2 and "s.txt: item 1: unit 1 (' c'" in err and "no token spells byte 0x63" in err
    assert {line.split("\t")[0] for line in printed.splitlines()[1:]} == {"0"}  # the items before it printed
    stored = [json.loads(line) for line in (out_dir / "records.jsonl").read_text().splitlines()]
    assert [("units" in r, "error" in r) for r in stored] == [(True, False), (False, True), (True, False)]


def test_an_infinite_upper_bound_is_written_as_every_json_output_writes_it(toy, capsys, tmp_path):
    """One JSON convention: no upper bound is "Infinity" in --json, --format jsonl and --out (TSV: inf)."""
    path = tmp_path / "s.txt"
    path.write_text("ab ba.\n")
    out_dir = tmp_path / "rows"
    code, _, _ = run(capsys, "surprisal", str(path), "--out", str(out_dir), *WIDE_ARGS)
    (record,) = [json.loads(line) for line in (out_dir / "records.jsonl").read_text().splitlines()]
    record["units"][1]["upper"] = "Infinity"  # a bracket with no upper bound, as the store keeps it
    (out_dir / "records.jsonl").write_text(json.dumps(record) + "\n")
    code, out, _ = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--format", "jsonl", *WIDE_ARGS)
    assert code == 0 and json.loads(out.splitlines()[1])["upper"] == "Infinity"
    code, out, _ = run(capsys, "surprisal", str(path), "--out", str(out_dir), "--json", *WIDE_ARGS)
    assert code == 0 and json.loads(out)["rows"][1]["upper"] == "Infinity"
    code, out, _ = run(capsys, "surprisal", str(path), "--out", str(out_dir), *WIDE_ARGS)
    header = out.splitlines()[0]
    assert code == 0 and dict(zip(header.split("\t"), out.splitlines()[2].split("\t")))["upper"] == "inf"
    from ppl_tok.cli.surprisal import _row

    assert _row(0, {**record["units"][1], "upper": math.inf}, "m")["upper"] == "Infinity"


def test_bad_input(toy, capsys, tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("\n\n")
    code, _, err = run(capsys, "surprisal", str(path))
    assert code == 2 and "holds no items" in err
    path.write_text("ab c\n")
    code, _, err = run(capsys, "surprisal", str(path))
    assert code == 2 and "unit 1 (' c'" in err and "no token spells byte 0x63" in err
    path.write_text('{"text": 3}\n')
    code, _, err = run(capsys, "surprisal", str(path), "--field", "text")
    assert code == 2 and ":1: no string field 'text'" in err


@pytest.mark.parametrize("line, message", [('{"text": "a\\ud800b"}', ":1: field 'text' holds a lone surrogate"),
                                           ('{"text": "a\\u0000b"}', ":1: field 'text' holds a NUL character")])
def test_json_escapes_that_are_not_text_are_refused_by_line(toy, capsys, tmp_path, line, message):
    path = tmp_path / "s.jsonl"
    path.write_text(line + "\n")
    code, _, err = run(capsys, "surprisal", str(path), "--field", "text")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


SURPRISAL_CHILD = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]  # the checkout's ppl_tok, not another install's
import ppl_tok.cli.common
from tests.strings.test_state import history_lm
from tests.strings.test_surprisal import VOCAB
lm = history_lm(3, VOCAB)
ppl_tok.cli.common.load_lm = lambda *a, **k: lm
from ppl_tok.cli.main import main
sys.exit(main({argv!r}))
"""


@pytest.mark.slow
def test_sigkill_mid_run_then_a_rerun_keeps_what_an_uninterrupted_run_does(toy, capsys, tmp_path):
    from pathlib import Path

    from sigkill import killed_twice_then_finished

    tests = Path(__file__).resolve().parents[1]
    path = tmp_path / "s.txt"
    path.write_text("".join(f"{'ab ' * (1 + i % 3)}b{'a' * (i % 4)}.\n" for i in range(30)))
    # batches of 2 items: rows are appended in small bursts all through the run, so both kills land part-way
    # (at the default 16, the second half's 14 items came in one burst the second kill could miss)
    argv = ["surprisal", str(path), "--beam", "4", "--prune", "6", "--format", "jsonl", "--batch-size", "2"]
    code, whole, _ = run(capsys, *argv, "--out", str(tmp_path / "ref"))
    assert code == 0
    reference = (tmp_path / "ref" / "records.jsonl").read_bytes()
    out = tmp_path / "rows"
    script = tmp_path / "child.py"
    script.write_text(SURPRISAL_CHILD.format(tests=str(tests), root=str(tests.parent), argv=[*argv, "--out", str(out)]))
    done = killed_twice_then_finished(script, out / "records.jsonl", reference.count(b"\n"), delays=(0.0, 0.011),
                                      progress=4, capture_output=True, text=True)
    assert (out / "records.jsonl").read_bytes() == reference and done.stdout == whole  # the same rows and output


def test_exhaustive_is_one_flag_and_refused_beside_a_lazy_share(toy, capsys, tmp_path, monkeypatch):
    """--exhaustive gives --extend-threshold 0's rows whatever the default is; beside a lazy share it is refused."""
    import ppl_tok.cli.surprisal as command

    path = tmp_path / "s.txt"
    path.write_text(SENTENCES)
    monkeypatch.setattr(command, "DEFAULT_LAZY", {"extend_threshold": 0.5})
    _, lazy, _ = run(capsys, "surprisal", str(path), "--format", "jsonl", "--beam", "8", "--prune", "1e4")
    _, exhaustive, _ = run(capsys, "surprisal", str(path), "--format", "jsonl", "--exhaustive", "--beam", "8",
                           "--prune", "1e4")
    _, zero, _ = run(capsys, "surprisal", str(path), "--format", "jsonl", "--extend-threshold", "0", "--beam", "8",
                     "--prune", "1e4")
    assert exhaustive == zero and exhaustive != lazy
    code, _, err = run(capsys, "surprisal", str(path), "--exhaustive", "--extend-threshold", "0.1")
    assert code == 2 and "--exhaustive extends every kept prefix: drop --extend-threshold" in err


def test_search_tree_rows_equal_the_api_and_the_run_records_it(toy, capsys, tmp_path):
    from ppl_tok.strings.tree import TokenTree

    path = tmp_path / "s.txt"
    path.write_text(SENTENCES)
    code, out, err = run(capsys, "surprisal", str(path), *WIDE_ARGS, "--search", "tree", "--tree-back-off", "1",
                         "--format", "jsonl", "--out", str(tmp_path / "run"))
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    want = [r.surprisal for t in ("ab ba.", "b ab a") for r in surprisals(toy, t, config=WIDE, search=TokenTree(1))]
    assert [r["surprisal"] for r in rows] == pytest.approx(want, abs=1e-9)
    settings = json.loads((tmp_path / "run" / "run.json").read_text())
    assert settings["search"] == "tree" and settings["tree_back_off"] == 1
    code, out, err = run(capsys, "surprisal", str(path), "--tree-back-off", "-1")
    assert code == 2 and "--tree-back-off: expected an integer >= 0" in err and len(err.strip().splitlines()) == 1


def test_one_default_lazy_share_for_the_command_line_and_python(toy, capsys, tmp_path, monkeypatch):
    """Issue 57 item 5: ``ppl-tok surprisal`` and the Python surprisal functions read one default
    (:data:`~ppl_tok.strings.surprisal_default.SURPRISAL_LAZY`): set it to another share and both follow it."""
    from ppl_tok.strings.beam import StringSearchConfig
    from ppl_tok.strings.surprisal_default import SURPRISAL_LAZY, surprisal_config
    from ppl_tok.strings.surprisal import surprisals_many

    texts = ("ab ba.", "b ab a")
    path = tmp_path / "s.txt"
    path.write_text(SENTENCES)
    monkeypatch.setitem(SURPRISAL_LAZY, "extend_threshold", 0.5)  # a share whose figures differ from exhaustive ones
    code, out, err = run(capsys, "surprisal", str(path), "--format", "jsonl")
    assert code == 0, err
    command = [json.loads(line)["surprisal"] for line in out.splitlines()]
    python = [r.surprisal for rows in surprisals_many(toy, list(texts)) for r in rows]
    lazy = [r.surprisal for t in texts for r in surprisals(toy, t, config=StringSearchConfig(extend_threshold=0.5))]
    exhaustive = [r.surprisal for t in texts for r in surprisals(toy, t, config=StringSearchConfig())]
    assert surprisal_config() == StringSearchConfig(extend_threshold=0.5)
    assert command == pytest.approx(python, abs=1e-9) and python == pytest.approx(lazy, abs=1e-9)
    assert lazy != pytest.approx(exhaustive, abs=1e-6)  # the default is the lazy share, not the exhaustive walk


def test_reading_says_and_takes_the_surprisal_default():
    """``ppl-tok reading``'s --extend-threshold: the default it takes is the one its help says, surprisal's."""
    from ppl_tok.cli.main import build_parser
    from ppl_tok.strings.surprisal_default import SURPRISAL_LAZY

    share = SURPRISAL_LAZY["extend_threshold"]
    parser = build_parser()
    for part in (["focal", "t.txt"], ["run", "--stimuli", "s", "--measurements", "m", "--out", "o"]):
        assert parser.parse_args(["reading", *part]).extend_threshold == share
    reading = next(a for a in parser._subparsers._group_actions[0].choices["reading"]._actions
                   if a.dest == "reading_command").choices["focal"]
    text = " ".join(reading.format_help().split())
    assert f"default {share:g})" in text and "default 0)" not in text


def test_the_task_flags_are_surprisal_params_own(tmp_path):
    """``--units``, ``--final``, ``--wide``...: derived from :class:`SurprisalParams`, so each default lives there
    once; ``--final none`` is the choice ``none`` (nothing follows), not a missing value."""
    from ppl_tok.cli.main import build_parser
    from ppl_tok.cli.surprisal import surprisal_params
    from ppl_tok.common.params import specs
    from ppl_tok.strings.tasks import SurprisalParams

    def parsed(*flags):
        return surprisal_params(build_parser().parse_args(["surprisal", str(tmp_path / "x.txt"), *flags]))

    assert parsed() == SurprisalParams()
    assert parsed("--final", "none", "--units", "char", "--wide", "2", "--entropy") == SurprisalParams(
        final="none", units="char", wide=2.0, entropy=True)
    assert parsed("--final", "none").final == "none" and parsed("--final", "auto").final == "auto"
    parser = build_parser()._subparsers._group_actions[0].choices["surprisal"]
    parser.format_help()  # the task's flags are added when the command first parses or shows its help
    flags = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for spec in specs(SurprisalParams):
        assert getattr(flags[spec.flag], "param_field", None) == spec.name, spec.flag
