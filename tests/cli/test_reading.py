"""``ppl-tok reading`` on a toy LM: the focal table on standard output, the study into a run folder, input errors
before the LM loads."""

import io

import pandas as pd
import pytest

from ppl_tok.reading.focal_surprisal import focal_surprisals
from ppl_tok.strings import StringSearchConfig
from tests.cli_run import run, strict_json
from tests.reading.test_study import corpus
from tests.cli.test_surprisal import toy  # noqa: F401 - the shared fixture (a toy LM in place of the load)


def test_focal_prints_every_predictor(toy, capsys, tmp_path):
    (tmp_path / "t.txt").write_text("ab  ba.\nb ab a\n")
    code, out, err = run(capsys, "reading", "focal", str(tmp_path / "t.txt"), "--beam", "4")
    assert code == 0, err
    got = pd.read_csv(io.StringIO(out))
    want = focal_surprisals(toy, ["ab ba.", "b ab a"], text_ids=[0, 1],
                            config=StringSearchConfig(beam=4, extend_threshold=1e-5))
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    code, out, _ = run(capsys, "reading", "focal", str(tmp_path / "t.txt"), "--format", "jsonl")
    rows = [strict_json(line) for line in out.splitlines()]
    assert len(rows) == 5 and rows[0]["word"] == "ab"


@pytest.mark.slow
def test_run_writes_the_study_and_says_where(toy, capsys, tmp_path):
    stimuli, measurements = corpus(tmp_path)
    out = tmp_path / "run"
    argv = ("reading", "run", "--stimuli", str(stimuli), "--measurements", str(measurements), "--out", str(out),
            "--measures", "rt", "--folds", "2", "--repeats", "1", "--beam", "4")
    code, text, err = run(capsys, *argv, "--json")
    assert code == 0, err
    report = strict_json(text)
    assert report["texts"] == report["of_texts"] == 4 and report["index_corrections"] == 1
    assert (out / "summary.csv").exists() and (out / "gains.png").exists()
    code, text, _ = run(capsys, *argv)
    assert code == 0 and "| rt |" in text and "corrections.csv" in text


def test_input_errors_come_before_the_lm(toy, capsys, tmp_path):
    stimuli, measurements = corpus(tmp_path)
    table = pd.read_csv(measurements)
    table.loc[2, "text_id"] = 9
    table.to_csv(tmp_path / "bad.csv", index=False)
    code, _, err = run(capsys, "reading", "run", "--stimuli", str(stimuli), "--measurements",
                       str(tmp_path / "bad.csv"), "--out", str(tmp_path / "o"), "--measures", "rt")
    assert code == 2 and "bad.csv:4: text id 9 is not in the stimuli (ids 1..4)" in err
    assert not toy.loads and not (tmp_path / "o").exists()
