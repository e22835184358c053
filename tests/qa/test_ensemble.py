"""String-level ensembles of QA runs (ppl_tok.qa.ensemble, ppl_tok.qa.contexts): known answers, self-ensembles, CLI."""

import json
import math
import shutil

import numpy as np
import pytest

import ppl_tok.lm.cards
from ppl_tok.cli.main import main
from ppl_tok.qa import ensemble as E
from ppl_tok.scorings.classify import SplitScores, correct
from ppl_tok.qa.contexts import context_folder, read_context_log_probs
from ppl_tok.qa.data import load_study
from ppl_tok.common.jsonl_store import StoreError
from qa_toy import toy_lm, write_questions


def _table(canonical, labels, nbytes=None):
    canonical = np.log(np.asarray(canonical, dtype=float))
    q, c = canonical.shape
    return SplitScores(ids=[f"q{i}" for i in range(q)], labels=np.asarray(labels), valid=np.isfinite(canonical) | True,
                       nbytes=np.ones((q, c)) if nbytes is None else np.asarray(nbytes, dtype=float),
                       canonical=canonical, log_w=np.zeros((q, c, 1)), is_canonical=np.ones((q, c, 1), dtype=bool))


def test_mixture_and_product_known_values():
    a = _table([[0.6, 0.4], [0.7, 0.3]], [1, 0])
    b = _table([[0.1, 0.9], [0.2, 0.8]], [1, 0])
    # question 0: model b explains the question 3x better; question 1: model a 3x better
    ctx_a, ctx_b = np.log([0.01, 0.03]), np.log([0.03, 0.01])
    w = E.posterior_weights([ctx_a, ctx_b])
    assert np.allclose(w, [[0.25, 0.75], [0.75, 0.25]])
    mix = E.mixture_scores([a.canonical, b.canonical], [ctx_a, ctx_b])
    assert np.allclose(np.exp(mix), [[0.25 * 0.6 + 0.75 * 0.1, 0.25 * 0.4 + 0.75 * 0.9],
                                     [0.75 * 0.7 + 0.25 * 0.2, 0.75 * 0.3 + 0.25 * 0.8]])
    assert correct(mix, a).tolist() == [True, True]  # each question follows the model that explains it
    assert correct(a.canonical, a).tolist() == [False, True] and correct(b.canonical, b).tolist() == [True, False]
    # a prior can overrule the evidence: pi = (0.9, 0.1) makes question 0 follow a
    mix_prior = E.mixture_scores([a.canonical, b.canonical], [ctx_a, ctx_b], [0.9, 0.1])
    w0 = 0.9 * 0.01 / (0.9 * 0.01 + 0.1 * 0.03)
    assert math.isclose(math.exp(mix_prior[0, 0]), w0 * 0.6 + (1 - w0) * 0.1)
    poe = E.product_scores([a.canonical, b.canonical], a.valid, [1.0, 1.0])
    assert np.allclose(np.exp(poe), [[0.06 / 0.42, 0.36 / 0.42], [0.14 / 0.38, 0.24 / 0.38]])
    assert correct(poe, a).tolist() == [True, False]
    raw = E.product_scores([a.canonical, b.canonical], a.valid, [1.0, 1.0], normalise=False)
    assert np.allclose(np.exp(raw), [[0.06, 0.36], [0.14, 0.24]])


def test_padded_answers_stay_out():
    a = _table([[0.5, 0.5, 1.0]], [0])
    a.valid[0, 2] = False
    a.canonical[0, 2] = -math.inf
    poe = E.product_scores([a.canonical, a.canonical], a.valid)
    assert poe[0, 2] == -math.inf and math.isclose(np.exp(poe[0, :2]).sum(), 1.0)


def test_self_ensemble_is_the_model():
    rng = np.random.default_rng(0)
    s = np.log(rng.dirichlet(np.ones(4), size=50))
    ctx = rng.normal(-40, 5, size=50)
    t = _table(np.exp(s), rng.integers(0, 4, size=50))
    assert np.allclose(E.mixture_scores([s, s], [ctx, ctx]), s, atol=1e-12)
    assert np.allclose(E.mixture_scores([s, s], [ctx, ctx], [0.3, 2.0]), s, atol=1e-12)
    assert (correct(E.product_scores([s, s], t.valid, [0.5, 0.5], normalise=False), t) == correct(s, t)).all()


def test_bad_weights_and_evidence():
    s = np.log([[0.5, 0.5]])
    with pytest.raises(ValueError, match="weights must be 2"):
        E.mixture_scores([s, s], [np.zeros(1), np.zeros(1)], [1.0])
    with pytest.raises(ValueError, match="weights must be 2"):
        E.product_scores([s, s], np.ones((1, 2), bool), [1.0, -1.0])
    with pytest.raises(ValueError, match="probability zero under every model"):
        E.posterior_weights([np.array([-math.inf]), np.array([-math.inf])])


# ------------------------------------------------------------------ end to end (toy LMs, CLI)
@pytest.fixture
def two_toys(monkeypatch):
    lms = {"toy-a": toy_lm(0), "toy-b": toy_lm(1)}
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda spec, **kw: lms[getattr(spec, "model", spec)])
    return lms


def _runs(tmp_path):
    test = write_questions(tmp_path / "test.jsonl", 10, seed=1)
    for name in ("toy-a", "toy-b"):
        assert main(["qa", "run", "--dataset", str(test), "--model", name, "--samples", "4", "--scores", "exact",
                     "--out", str(tmp_path / name), "--json"]) == 0
    return test


def test_cli_contexts_and_ensemble(tmp_path, two_toys, capsys):
    test = _runs(tmp_path)
    capsys.readouterr()
    a, b = tmp_path / "toy-a", tmp_path / "toy-b"
    assert main(["qa", "ensemble", str(a), str(b)]) == 2
    assert "qa contexts" in capsys.readouterr().err  # the evidence is missing: the command that computes it
    for run in (a, b):
        assert main(["qa", "contexts", str(run), "--dataset", str(test), "--json"]) == 0
        assert main(["qa", "contexts", str(run), "--dataset", str(test), "--json"]) == 0  # resumed: nothing to do
    capsys.readouterr()
    study = load_study(str(test))
    ids = [q.id for q in study.splits["test"]]
    for name, run in (("toy-a", a), ("toy-b", b)):
        got = read_context_log_probs(run, "canonical", "test", ids)
        want = [two_toys[name].canonical_log_prob(q.context) for q in study.splits["test"]]
        assert np.allclose(got, want)
        assert len((context_folder(run, "canonical") / "contexts.jsonl").read_text().splitlines()) == 10
    assert main(["qa", "ensemble", str(a), str(b), "--json", "--resamples", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["accuracy"]) == {"toy-a (canonical)", "toy-b (canonical)", "mixture", "product"}
    assert set(report["differences"]["acc"]) == {f"{c} - toy-{m} (canonical)" for c in ("mixture", "product")
                                                 for m in "ab"}
    assert sum(v["dominant"] for v in report["mixture_weights"].values()) == 10
    # the mixture's answers, recomputed from the stored scores by hand
    def is_records(run):
        return [r for r in map(json.loads, (run / "scores.jsonl").read_text().splitlines()) if r["kind"] == "is"]

    records, other = is_records(a), {r["index"]: r for r in is_records(b)}
    ctx_a, ctx_b = (read_context_log_probs(r, "canonical", "test", ids) for r in (a, b))
    hits = 0
    for r in records:
        i = r["index"]
        wa = 1 / (1 + math.exp(ctx_b[i] - ctx_a[i]))
        mix = [math.log(wa * math.exp(ca["canonical_log_prob"]) + (1 - wa) * math.exp(cb["canonical_log_prob"]))
               for ca, cb in zip(r["choices"], other[i]["choices"])]
        hits += int(np.argmax(mix)) == r["label"]
    assert math.isclose(report["accuracy"]["mixture"], hits / 10)
    # the exact source and the Markdown
    assert main(["qa", "ensemble", str(a), str(b), "--sources", "exact", "canonical", "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "toy-a (exact)" in out and "mixture - toy-b (canonical)" in out


def test_cli_self_ensemble_equals_the_model(tmp_path, two_toys, capsys):
    test = _runs(tmp_path)
    a = tmp_path / "toy-a"
    assert main(["qa", "contexts", str(a), "--dataset", str(test), "--json"]) == 0
    shutil.copytree(a, tmp_path / "copy")
    capsys.readouterr()
    assert main(["qa", "ensemble", str(a), str(tmp_path / "copy"), "--json", "--resamples", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    alone = next(k for k in report["accuracy"] if k.startswith("toy-a"))
    for metric in ("accuracy", "acc_norm"):
        assert report[metric]["mixture"] == report[metric]["product"] == report[metric][alone]
    assert all(d["diff"] == 0 and d["low"] == d["high"] == 0 for m in report["differences"].values()
               for d in m.values())


def test_cli_ensemble_refuses_other_questions(tmp_path, two_toys, capsys):
    _runs(tmp_path)
    other = write_questions(tmp_path / "other.jsonl", 10, seed=7)
    assert main(["qa", "run", "--dataset", str(other), "--model", "toy-b", "--samples", "4",
                 "--out", str(tmp_path / "other"), "--json"]) == 0
    capsys.readouterr()
    assert main(["qa", "ensemble", str(tmp_path / "toy-a"), str(tmp_path / "other")]) == 2
    assert "other questions" in capsys.readouterr().err
    assert main(["qa", "ensemble", str(tmp_path / "toy-a"), str(tmp_path / "toy-b"), "--weights", "1"]) == 2
    assert "weights must be 2" in capsys.readouterr().err
    with pytest.raises(StoreError, match="no context log-probabilities"):
        read_context_log_probs(tmp_path / "toy-a", "prefix", "test", ["q0"])


@pytest.mark.parametrize("prefill", ["exact", "canonical-head"])
def test_cli_prefix_contexts_take_the_prefill_mode_and_batch_the_heads(tmp_path, two_toys, capsys, monkeypatch, prefill):
    import ppl_tok.qa.contexts as contexts
    from ppl_tok.strings import StringSearchConfig, initial

    monkeypatch.setattr(contexts, "HEAD_BATCH", 4)  # 10 questions: heads prefilled in three batched calls
    test = _runs(tmp_path)
    run = tmp_path / "toy-a"
    assert main(["qa", "contexts", str(run), "--dataset", str(test), "--method", "prefix", "--prefill", prefill,
                 "--json"]) == 0
    capsys.readouterr()
    study = load_study(str(test))
    ids = [q.id for q in study.splits["test"]]
    got = read_context_log_probs(run, "prefix", "test", ids)
    config = StringSearchConfig(prefill=prefill)
    want = [initial(two_toys["toy-a"], q.context, config=config).prefix_log_prob().estimate
            for q in study.splits["test"]]
    assert np.allclose(got, want, rtol=0, atol=1e-9)
    records = [json.loads(line) for line in (context_folder(run, "prefix") / "contexts.jsonl").read_text().splitlines()]
    assert len(records) == 10 and (any(r["head_bytes"] > 0 for r in records) == (prefill == "canonical-head"))
    settings = json.loads((context_folder(run, "prefix") / contexts.ContextStore.settings_file).read_text())
    assert settings.get("prefill", "exact") == prefill
    assert settings.get("prefill_backoff") == (None if prefill == "exact" else "reach")
    if prefill == "canonical-head":  # a store of 0.2.0's longest-token back-off is refused, not mixed
        settings.pop("prefill_backoff")
        (context_folder(run, "prefix") / contexts.ContextStore.settings_file).write_text(json.dumps(settings))
        code = main(["qa", "contexts", str(run), "--dataset", str(test), "--method", "prefix", "--prefill", prefill])
        assert code == 2 and "prefill_backoff" in capsys.readouterr().err


def test_the_sources_are_the_deterministic_scorings_classifiers(request):
    """``qa ensemble --sources`` offers the classifiers of the scorings that say they are deterministic (no particles,
    tuning or time budget): the built-ins' canonical and exact, and a user's such scoring, on the command line too."""
    from ppl_tok import scorings
    from ppl_tok.cli.main import build_parser
    from ppl_tok.qa.ensemble import member_scores
    from ppl_tok.scorings.registry import ensemble_sources

    assert ensemble_sources() == ("canonical", "exact")
    with pytest.raises(ValueError, match="source must be one of canonical, exact, got 'canonical\\+rest'"):
        member_scores(None, "canonical+rest")

    class Fixed(scorings.Scoring):
        name, estimator, levels, doc = "fixed-toy", "canonical, again", (scorings.PAIR, scorings.QUESTION), "fixed"
        classifiers, deterministic = ("fixed-toy",), True

        def score_pairs(self, lm, pairs, config):
            config = scorings.ScoringConfig("canonical", level=scorings.PAIR)
            return scorings.SCORINGS["canonical"].score_pairs(lm, pairs, config)

    scorings.register(Fixed)
    request.addfinalizer(lambda: scorings.unregister("fixed-toy"))
    assert ensemble_sources() == ("canonical", "exact", "fixed-toy")
    args = build_parser().parse_args(["qa", "ensemble", "a", "b", "--sources", "fixed-toy", "canonical"])
    assert args.sources == ["fixed-toy", "canonical"]
