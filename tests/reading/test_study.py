"""The study end to end on a toy LM and a toy corpus: the files of the report, the resume from the run folder
(no LM call again), a resume under other settings refused, and the target sets."""

import json

import numpy as np
import pandas as pd
import pytest

from ppl_tok.common.jsonl_store import SettingsMismatchError
from ppl_tok.reading import focal_surprisal
from ppl_tok.reading.focal import AREAS, CONVENTIONS
from ppl_tok.reading.study import FAMILIES, add_spillover, run_study, targets
from ppl_tok.strings import StringSearchConfig
from tests.strings.test_state import history_lm
from tests.strings.test_surprisal import VOCAB

TEXTS = ["ab a. b", "ba ab a", "a b ab. ba", "b. ab a"]


def corpus(tmp_path, seed=0):
    (tmp_path / "stimuli.txt").write_text("\n".join(TEXTS) + "\n")
    rng = np.random.default_rng(seed)
    rows = [{"text_id": t, "region": k, "text": w, "RegionLength": len(w), "WordFreqZipf": rng.normal(5, 1),
             "rt": rng.normal(250, 30)} for t, text in enumerate(TEXTS, 1) for k, w in enumerate(text.split())
            if k > 0]
    rows[-3]["region"] += 1  # text 3's "ba" stated one word too far: aligned back, the correction listed
    pd.DataFrame(rows).to_csv(tmp_path / "m.csv", index=False)
    return tmp_path / "stimuli.txt", tmp_path / "m.csv"


@pytest.mark.slow
def test_the_study_writes_its_report_and_resumes_without_the_lm(tmp_path, monkeypatch):
    stimuli, measurements = corpus(tmp_path)
    lm = history_lm(3, VOCAB)
    out = tmp_path / "run"
    config = StringSearchConfig(beam=4)
    report = run_study(lm, stimuli, measurements, out, measures=["rt"], config=config, folds=2, repeats=2, batch=3)
    for name in ("predictors.csv", "corrections.csv", "folds.csv", "summary.csv", "report.md", "report.json",
                 "gains.png", "events.jsonl", "run.json"):
        assert (out / name).exists(), name
    assert report["rows"] == sum(len(t.split()) - 1 for t in TEXTS) and report["dropped_rows"] == 0
    assert report["corrections"] == report["index_corrections"] == 1
    assert pd.read_csv(out / "corrections.csv").values.tolist() == [[8, 3, "ba", 4, 3, "ba", "index"]]
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == len(FAMILIES) * len(CONVENTIONS) * len(AREAS)
    assert set(report["findings"]["rt"]) >= {"best", "best_string", "best_canonical", "string_minus_canonical_word"}
    assert len(pd.read_csv(out / "predictors.csv")) == sum(len(t.split()) for t in TEXTS)
    assert len((out / "events.jsonl").read_text().splitlines()) == len(TEXTS)

    def no_walk(*a, **k):
        raise AssertionError("the resume walked a text again")

    monkeypatch.setattr(focal_surprisal, "walk_events", no_walk)
    monkeypatch.setattr("ppl_tok.reading.store.walk_events", no_walk)
    again = run_study(lm, stimuli, measurements, out, measures=["rt"], config=config, folds=2, repeats=2)
    assert json.dumps(again) == json.dumps(report)
    with pytest.raises(SettingsMismatchError, match="search"):
        run_study(lm, stimuli, measurements, out, measures=["rt"], config=StringSearchConfig(beam=5), folds=2)


def test_targets_and_spillover():
    sets = targets()
    assert len(sets) == 120
    assert sets["CanonicalTrailingFixed"] == ["CanonicalTrailingFixed", "CanonicalTrailingWholePrev",
                                              "CanonicalTrailingWholePrevPrev"]
    assert sets["SurprisalLeadingDynamic7Corrected"][1] == "SurprisalLeadingWholeCorrectedPrev"
    lm = history_lm(3, VOCAB)
    focal = focal_surprisal.focal_surprisals(lm, ["ab a b", "ba"], config=StringSearchConfig(beam=4))
    spill = add_spillover(focal)
    assert spill.SurprisalLeadingWholePrev.tolist() == [0.0, focal.SurprisalLeadingWhole[0],
                                                        focal.SurprisalLeadingWhole[1], 0.0]
    assert spill.CanonicalNoWhitespaceWholePrevPrev.tolist() == [0, 0, focal.CanonicalNoWhitespaceWhole[0], 0]


class Killed(Exception):
    pass


@pytest.mark.slow
def test_a_run_killed_mid_walk_resumes_to_the_uninterrupted_result(tmp_path):
    """Killed after its first batch of texts (a torn partial line appended, as a kill mid-write leaves), the run
    resumes: it walks only the texts not stored, and every file of its report equals an uninterrupted run's."""
    stimuli, measurements = corpus(tmp_path)
    lm, config = history_lm(3, VOCAB), StringSearchConfig(beam=4)
    kw = dict(measures=["rt"], config=config, folds=2, repeats=1, batch=2)
    whole = run_study(lm, stimuli, measurements, tmp_path / "whole", **kw)

    def kill(done, total):
        raise Killed

    out = tmp_path / "killed"
    with pytest.raises(Killed):
        run_study(history_lm(3, VOCAB), stimuli, measurements, out, progress=kill, **kw)
    stored = (out / "events.jsonl").read_text().splitlines()
    assert len(stored) == 2 and not (out / "report.json").exists()
    with open(out / "events.jsonl", "a") as f:
        f.write('{"text_id": 3, "text": "a b')  # a write torn by the kill
    walked = []
    resumed = run_study(history_lm(3, VOCAB), stimuli, measurements, out,
                        progress=lambda done, total: walked.append((done, total)), **kw)
    assert walked == [(2, 2)]  # the two texts not stored, in one batch
    assert json.dumps(resumed) == json.dumps(whole)
    for name in ("predictors.csv", "summary.csv", "folds.csv", "corrections.csv"):
        assert (out / name).read_text() == (tmp_path / "whole" / name).read_text(), name
