"""The conditional's defaults benchmark and the events' accuracy benchmark on a toy LM: the figures are the lm-eval
model's, the summary's rule and choice follow from them, the request sets are what the docstring says."""

import json
import math
from pathlib import Path

import pytest

from benchmarks import conditional_defaults as cd
from benchmarks import lm_eval_events as ev
from ppl_tok.datasets import DATA_ROOT as _ROOT
from ppl_tok.integrations.lm_eval import PPLTokLM
from ppl_tok.scorings import Pair
from qa_toy import toy_lm

DATA_ROOT = Path(_ROOT)
PAIRS = [("ab c", " da"), ("ab", "c d"), ("", " abc")]


def test_midword_cuts_inside_the_first_long_word():
    assert cd._midword("Jo said", "to fight Ivan now") == ("Jo said to fig", "ht Ivan now")
    assert cd._midword("Jo", "a b c") is None  # no word of four letters


def test_a_chunk_is_the_lm_eval_models_figures_and_the_summary_applies_the_rule():
    lm = toy_lm(3)
    row = cd.measure_chunk(lm, PAIRS, [0.0, 0.2], "boundary")
    for s, figures in row["settings"].items():
        model = PPLTokLM(lm=lm, scoring="conditional", extend_threshold=float(s))
        want = [p.estimate for p in model.pair_scores([Pair(c, x, group=(0,), choice=i)
                                                      for i, (c, x) in enumerate(PAIRS)])]
        assert figures["estimate"] == pytest.approx(want, abs=1e-12)
        assert all(lo <= e <= hi for lo, e, hi in zip(figures["lower"], figures["estimate"], figures["upper"]))
    rows = [{"set": name, "chunk": 0, "pairs": PAIRS, **row} for name in ("openbookqa", "socialiqa")]
    summary = cd.summarise(rows, [0.0, 0.2])
    diff = [abs(a - b) for a, b in zip(row["settings"]["0.2"]["estimate"], row["settings"]["0.0"]["estimate"])]
    held = summary["held_out"]["0.2"]
    assert held["requests"] == 3 and held["max_nats"] == pytest.approx(max(diff))  # openbookqa (tuning) left out
    assert held["meets_rule"] == (max(diff) <= cd.MAX_NATS and cd._quantile(diff, 0.99) <= cd.P99_NATS)
    assert summary["chosen"] == (0.2 if held["meets_rule"] else 0.0)
    assert summary["sets"]["openbookqa"]["held_out"] is False and summary["sets"]["socialiqa"]["held_out"]


def test_the_request_sets_read_the_bundled_data():
    if not (DATA_ROOT / "socialiqa" / "dev.jsonl").is_file():
        pytest.skip("the bundled data is not here")
    sets = cd.request_sets(DATA_ROOT, ["socialiqa", "midword"], 2)
    assert len(sets["socialiqa"]) == 2 and all(len(g) == 3 for g in sets["socialiqa"])
    assert sets["midword"][0] == [cd.ISSUE_REQUEST] and len(sets["midword"]) == 2
    c, x = sets["midword"][1][0]
    assert c[-1].isalpha() and x[0].isalpha()  # cut mid-word
    with pytest.raises(ValueError, match="unknown set 'piqa'"):
        cd.request_sets(DATA_ROOT, ["piqa"], 1)


def test_events_accuracy_scores_and_summary(tmp_path):
    lm = toy_lm(2)
    scores = ev.score_question(lm, "ab", ["cd", "a", "dab"], 0.0)
    assert all(b <= p + 1e-12 for b, p in zip(scores["conditional-boundary"], scores["conditional-prefix"]))
    assert scores["canonical"] == pytest.approx(
        list(lm.log_probs_many([lm.canonical(" " + c) for c in ["cd", "a", "dab"]], ["ab"] * 3)), abs=1e-12)
    rows = [{"id": str(i), "label": i % 3, "scores": scores} for i in range(6)]
    s = ev.summarise(rows)
    best = max(range(3), key=scores["canonical"].__getitem__)
    assert s["accuracy"]["canonical"]["mean"] == pytest.approx(sum(i % 3 == best for i in range(6)) / 6)
    lo, hi = s["accuracy"]["canonical"]["ci95"]
    assert lo <= s["accuracy"]["canonical"]["mean"] <= hi and math.isfinite(lo)
    json.dumps(s)
