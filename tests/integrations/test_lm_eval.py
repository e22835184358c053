"""The lm-eval model ``ppl-tok``: run through lm-eval's own ``simple_evaluate`` over local task files, offline.

Fast tests use the toy bigram LM (``lm=`` model argument); the slow ones use
SmolLM2 on OpenBookQA copied from ``../shared/data`` into a temporary folder.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest

for _var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")  # before datasets/transformers read them

lm_eval = pytest.importorskip("lm_eval", reason="needs the lm-eval extra: pip install 'ppl-tok[lm-eval]'")

from conftest import SHARED  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from ppl_tok.integrations import lm_eval as ppl_lm_eval  # noqa: E402
from ppl_tok.integrations.lm_eval import (  # noqa: E402
    MODEL_NAME,
    Pair,
    PPLTokLM,
    chunks,
    move_trailing_space,
    write_hf_tokenizer,
    write_tasks,
)
from ppl_tok.scorings import classify  # noqa: E402
from ppl_tok.scorings import PAIR, names as scoring_names  # noqa: E402
from ppl_tok.scorings.registry import record_arrays  # noqa: E402
from ppl_tok.qa.data import load_study  # noqa: E402
from ppl_tok.qa.run import run_study, study_settings  # noqa: E402
from qa_toy import toy_lm  # noqa: E402

OBQA_YAML = """\
task: obqa_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question.stem}}}}"
doc_to_choice: "{{{{question.choices | map(attribute='text') | list}}}}"
doc_to_target: "{{{{(question.choices | map(attribute='label') | list).index(answerKey)}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def _per_request(results: dict, task: str) -> list[float]:
    """The log-likelihoods of every (document, choice) request, in document then choice order."""
    samples = sorted(results["samples"][task], key=lambda s: s["doc_id"])
    return [r[0][0] for s in samples for r in s["resps"]]


def _evaluate(tasks: list[str], folder: Path, model: str, model_args, **kw) -> dict:
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=tasks,
                                   task_manager=TaskManager(include_path=str(folder), include_defaults=False),
                                   log_samples=True,
                                   verbosity="ERROR", **kw)


def test_registered_beside_lm_evals_own_models():
    assert get_model(MODEL_NAME) is PPLTokLM
    assert get_model("hf").__name__ == "HFLM"  # registering ppl-tok did not hide lm-eval's models


def test_every_scoring_runs_through_simple_evaluate(toy_tasks):
    _, _, names, folder = toy_tasks
    per = {}
    for scoring in scoring_names(PAIR):
        res = _evaluate(names, folder, MODEL_NAME, {"lm": toy_lm(), "scoring": scoring, "num_samples": 8,
                                                    "batch_size": 4})
        assert 0.0 <= res["results"]["ppltok_test"]["acc,none"] <= 1.0
        per[scoring] = _per_request(res, "ppltok_test")
    assert len(per["canonical"]) == 15
    for s in ("importance", "canonical+rest", "exact", "stratified"):  # a marginal is at least the canonical probability
        assert all(m >= c - 1e-9 for m, c in zip(per[s], per["canonical"])), s
    # the exact midpoint and the stratified estimate agree with the exact toy marginal
    assert per["exact"] == pytest.approx(per["stratified"], abs=1e-3)
    # mixture: alpha P_can + (1 - alpha) P_non sums to 1 over a question's answers (alpha if none has a
    # non-canonical sample: then P_non = 0)
    for q in range(5):
        assert sum(math.exp(x) for x in per["mixture"][3 * q:3 * q + 3]) in (pytest.approx(1.0), pytest.approx(0.5))


def test_same_numbers_as_qa_run_with_the_same_seed(toy_tasks, tmp_path):
    """canonical, importance, mixture and canonical+rest through lm-eval equal the QA study's stored scores (seed 7)."""
    test, tune, names, folder = toy_tasks
    study = load_study(str(test), tune=tune)
    settings = study_settings(study, model="toy", samples=8, seed=7)
    store = run_study(study, toy_lm(), tmp_path / "run", settings, batch_questions=2, progress=False)
    for split, task in (("test", "ppltok_test"), ("tune", "ppltok_test_tune")):
        t = classify.split_scores(store.records, split, len(study.splits[split]), record_arrays())
        for scoring, expect in (("canonical", classify.canonical_scores(t)),
                                ("importance", classify.marginal_scores(t)),
                                ("mixture", classify.mixture_scores(t, [0.3])[..., 0]),
                                ("canonical+rest", classify.canonical_plus_rest_scores(t))):
            res = _evaluate([task], folder, MODEL_NAME, {"lm": toy_lm(), "scoring": scoring, "num_samples": 8,
                                                         "seed": 7, "alpha": 0.3, "batch_size": 5})
            got = _per_request(res, task)
            want = [math.log(x) if scoring == "mixture" else x for x in expect.reshape(-1).tolist()]
            assert got == pytest.approx(want, abs=1e-9), (split, scoring)


def test_unsupported_request_types_and_arguments_are_clear():
    lm = PPLTokLM(lm=toy_lm())
    assert lm.loglikelihood_rolling([]) == []
    with pytest.raises(NotImplementedError, match=r"loglikelihood_rolling .*scoring=canonical\|beam\|prefix\|with-end\|canonical\+rest"):
        PPLTokLM(lm=toy_lm(), scoring="mixture").loglikelihood_rolling([])
    with pytest.raises(NotImplementedError, match=r"loglikelihood is defined for .*not 'beam'"):
        PPLTokLM(lm=toy_lm(), scoring="beam").score_pairs([Pair("ab", " ab", 0, ("t", 0), 0)])
    assert lm.generate_until([]) == []  # generation tasks: tests/integrations/test_lm_eval_strings.py
    with pytest.raises(ValueError, match=r"'greedy': unknown scoring.*canonical\|importance\|mixture\|canonical\+rest"
                                         r"\|exact\|stratified\|conditional\|canonical-local\|canonical-global"
                                         r"\|marginal\|beam"):
        PPLTokLM(lm=toy_lm(), scoring="greedy")
    with pytest.raises(ValueError, match="alpha"):
        PPLTokLM(lm=toy_lm(), alpha=2)
    with pytest.raises(ValueError, match="no canonical tokenization"):
        lm.score_pairs([Pair("ab", " zz", 0, ("t", 0), 0)])


def test_the_model_loads_and_records_an_lm_spec():
    from ppl_tok.lm.backends import register_backend, unregister_backend
    from ppl_tok.lm.spec import LMSpec

    register_backend("toy-lm-eval", lambda spec, **options: toy_lm())
    try:
        model = PPLTokLM(model="x", backend="toy-lm-eval", dtype="bfloat16", bos_id=0, device="cpu")
        spec = LMSpec(model="x", backend="toy-lm-eval", device="cpu", dtype="bfloat16", bos_id=0)
        assert model.spec == spec and model.get_model_info()["ppl_tok_lm"] == spec.to_dict()
    finally:
        unregister_backend("toy-lm-eval")
    assert PPLTokLM(lm=toy_lm()).get_model_info()["ppl_tok_lm"] is None  # built in Python: no spec
    with pytest.raises(ValueError, match="model='x': unknown LM backend 'toy-lm-eval'"):
        PPLTokLM(model="x", backend="toy-lm-eval")


def test_scoring_names_are_those_of_the_one_table():
    """Distinct estimators, distinct names; the old name ``marginal`` keeps meaning what it meant per request type."""
    from ppl_tok.scorings import Pair as NeutralPair

    assert Pair is NeutralPair  # lm-eval's requests are the scorings' own pairs
    old = PPLTokLM(lm=toy_lm(), scoring="marginal")
    assert (old.pair_scoring, old.document_scoring) == ("importance", "beam")
    assert (PPLTokLM(lm=toy_lm(), scoring="importance").document_scoring, PPLTokLM(lm=toy_lm(), scoring="beam")
            .pair_scoring) == (None, None)
    pairs = [Pair("ab", " ab", 3, ("t", 0), 0), Pair("ab", " ba", 4, ("t", 0), 1)]
    assert old.score_pairs(pairs) == PPLTokLM(lm=toy_lm(), scoring="importance").score_pairs(pairs)
    with pytest.raises(ppl_lm_eval.ModelArgumentError, match="unknown scoring"):
        PPLTokLM.create_from_arg_string("scoring=nonsense", {})
    from ppl_tok.strings import StringSearchConfig

    from ppl_tok.scorings.beam import BeamParams

    assert PPLTokLM(lm=toy_lm()).search is None  # canonical runs no beam
    assert PPLTokLM(lm=toy_lm(), scoring="beam").search == BeamParams().search  # the beam scoring's own defaults
    assert PPLTokLM(lm=toy_lm(), scoring="beam", beam="3", prune=2).search == BeamParams(beam=3, prune=2.0).search
    assert PPLTokLM(lm=toy_lm(), scoring="with-end", beam="3").search == StringSearchConfig(beam=3)


def test_trailing_space_and_batches():
    assert move_trailing_space("Q: a  ", "b") == ("Q: a", "  b")
    pairs = [Pair("c", " a", 0, ("t", i // 3), i % 3) for i in range(9)]
    assert list(chunks(pairs, 4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert list(chunks(pairs, 4, whole_groups=True)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


# ------------------------------------------------------------------ perplexity tasks (loglikelihood_rolling)
ROLLING_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{page}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
metadata:
  version: 1.0
"""


def _rolling_task(tmp_path: Path, pages: list[str], task: str = "wiki_local") -> Path:
    """A wikitext-style task (``loglikelihood_rolling`` over the field ``page``) over a local JSON Lines file."""
    folder = tmp_path / "rolling-tasks"
    folder.mkdir(exist_ok=True)
    data = folder / f"{task}.jsonl"
    data.write_text("".join(json.dumps({"page": p}) + "\n" for p in pages))
    (folder / f"{task}.yaml").write_text(ROLLING_YAML.format(task=task, path=data))
    return folder


def _per_document(results: dict, task: str) -> list[float]:
    samples = sorted(results["samples"][task], key=lambda s: s["doc_id"])
    return [float(s["resps"][0][0]) for s in samples]


TOY_PAGES = [" ab cd ef gh", "abc de fgh ab cd ba", " a b c abc de", "hgfe dcba ab ef gh cd ab"]


def test_rolling_scorings_through_simple_evaluate(tmp_path):
    """Perplexity tasks run for canonical, beam and canonical+rest; the figures are lm-eval's aggregates."""
    from ppl_tok.common.params import split_values
    from ppl_tok.perplexity import ScoringConfig, corpus_from_texts, score_documents
    from ppl_tok.perplexity.metrics import figures
    from ppl_tok.scorings import DOCUMENT, scoring as find_scoring

    folder = _rolling_task(tmp_path, TOY_PAGES)
    docs = corpus_from_texts(TOY_PAGES).documents
    for scoring in ("canonical", "beam", "canonical+rest"):
        res = _evaluate(["wiki_local"], folder, MODEL_NAME, {"lm": toy_lm(), "scoring": scoring, "max_length": 4,
                                                             "num_samples": 8})
        got = _per_document(res, "wiki_local")
        own = split_values(find_scoring(scoring, DOCUMENT).params, {"num_samples": 8})[0]  # where it draws particles
        want = [s.log_likelihood for s in score_documents(toy_lm(), docs, ScoringConfig(scoring, window=4, **own))]
        assert got == pytest.approx(want, abs=1e-9), scoring
        f = figures(got, [len(p.encode()) for p in TOY_PAGES], [len(re.split(r"\s+", p)) for p in TOY_PAGES])
        r = res["results"]["wiki_local"]
        for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
            assert r[f"{metric},none"] == pytest.approx(f[metric], rel=1e-9), (scoring, metric)


# ------------------------------------------------------------------ SmolLM2 (slow)
@pytest.fixture
def obqa(tmp_path):
    """OpenBookQA copied into a fixture folder, with a task YAML over the raw file."""
    data = tmp_path / "data" / "openbookqa"
    data.mkdir(parents=True)
    for name in ("dev.jsonl", "test.jsonl"):
        shutil.copy(SHARED / "data" / "openbookqa" / name, data / name)
    tasks = tmp_path / "raw-tasks"
    tasks.mkdir()
    (tasks / "obqa_local.yaml").write_text(OBQA_YAML.format(path=data / "test.jsonl"))
    return tmp_path / "data", tasks


@pytest.mark.slow
def test_canonical_equals_lm_evals_hf_model(obqa, tmp_path):
    """Same per-request log-likelihoods as lm-eval's ``hf`` on the converted folder, BOS id 0 for both."""
    from ppl_tok.lm.cards import _convert, list_cards

    folder = _convert(list_cards()["smollm2-135m"], "model")
    tok = write_hf_tokenizer("smollm2-135m", tmp_path / "tok")
    _, tasks = obqa
    hf = _evaluate(["obqa_local"], tasks, "hf", f"pretrained={folder},tokenizer={tok},add_bos_token=True,"
                   "prefix_token_id=0,dtype=float32,device=cpu", limit=2)
    ours = _evaluate(["obqa_local"], tasks, MODEL_NAME, "model=smollm2-135m,scoring=canonical,device=cpu", limit=2)
    a, b = _per_request(hf, "obqa_local"), _per_request(ours, "obqa_local")
    assert len(a) == 8
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4


@pytest.mark.slow
def test_marginal_through_the_cli_equals_qa_run(obqa, tmp_path, capsys):
    """``ppl-tok-lm-eval`` (lm-eval's CLI) with scoring=marginal equals ``ppl-tok qa run``, seed 3, N 4."""
    from ppl_tok.cli.main import main

    data, _ = obqa
    assert main(["qa", "run", "--dataset", "openbookqa", "--data-dir", str(data), "--limit", "1", "--samples", "4",
                 "--seed", "3", "--out", str(tmp_path / "run"), "--json"]) == 0
    names = write_tasks("openbookqa", tmp_path / "tasks", data_dir=data, limit=1)
    ppl_lm_eval.cli(["--model", MODEL_NAME, "--model_args", "model=smollm2-135m,scoring=marginal,num_samples=4,"
                     "seed=3,device=cpu", "--tasks", ",".join(names), "--include_path", str(tmp_path / "tasks"),
                     "--output_path", str(tmp_path / "out"), "--log_samples"])
    capsys.readouterr()
    from ppl_tok.qa.store import read_records

    records = list(read_records(tmp_path / "run" / "scores.jsonl"))
    for split, task in (("test", "ppltok_openbookqa"), ("tune", "ppltok_openbookqa_tune")):
        t = classify.split_scores(records, split, 1, record_arrays())
        (log,) = (p for p in (tmp_path / "out").rglob(f"samples_{task}_*.jsonl")
                  if p.name[len(f"samples_{task}_"):][:1].isdigit())  # not ..._tune_<date>
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        got = [float(r[0][0]) for r in rows[0]["resps"]]  # the samples log writes them as strings
        # same particles (same seeds); float32 sums in differently shaped batches differ by ~1e-5 nats
        assert got == pytest.approx(classify.marginal_scores(t).reshape(-1).tolist(), abs=1e-4)


WIKI_PAGES = [
    " = Valkyria Chronicles III = \n\n Senjō no Valkyria 3 @-@ game . \n",
    "Plants need sunlight, water and carbon dioxide; in 1772 mint restored air.",
    "Short one.",
]


@pytest.mark.slow
def test_rolling_canonical_equals_lm_evals_hf_model(tmp_path):
    """Perplexity task, rolling windows of 6 positions: ppl-tok canonical = lm-eval's hf per document (1e-4 nats).

    Both run SmolLM2 in float64. In float32 the two are each ~1e-4 from the float64 value and differ by up to
    2e-4 nats per page (measured: hf's float32 full forward and float64 differ by 1.7e-4 on "Short one."; the
    engine's chunked forwards round differently), so a float32 comparison at 1e-4 would test rounding, not the
    definition.
    """
    from ppl_tok.lm.cards import _convert, list_cards, load_lm

    folder = _convert(list_cards()["smollm2-135m"], "model")
    tasks = _rolling_task(tmp_path, WIKI_PAGES)
    hf = _evaluate(["wiki_local"], tasks, "hf", f"pretrained={folder},prefix_token_id=0,max_length=6,"
                   "dtype=float64,device=cpu")
    lm = load_lm("smollm2-135m", device="cpu")
    lm.model.double()
    ours = _evaluate(["wiki_local"], tasks, MODEL_NAME, {"lm": lm, "scoring": "canonical", "max_length": 6})
    a, b = _per_document(hf, "wiki_local"), _per_document(ours, "wiki_local")
    assert len(a) == 3 and all(x < 0 for x in a)
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
    for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        x, y = hf["results"]["wiki_local"][f"{metric},none"], ours["results"]["wiki_local"][f"{metric},none"]
        assert y == pytest.approx(x, rel=1e-6), metric


def test_a_learned_proposal_through_model_args(tmp_path, monkeypatch):
    """proposal=learned,proposal_file=F: importance, canonical+rest and mixture from marginals(..., guide=learned)."""
    from ppl_tok.infer.importance import marginals
    from ppl_tok.proposals import LearnedProposal
    from qa_toy import learned_proposal_file

    lm = toy_lm()
    path = learned_proposal_file(tmp_path / "q.pt", lm)
    pairs = [Pair("ab", " ab", 3, ("t", 0), 0), Pair("ab", " ba", 4, ("t", 0), 1), Pair("ab", "cde", 5, ("t", 0), 2)]
    direct = marginals([p.continuation for p in pairs], lm, 8, contexts=["ab"] * 3, seeds=[3, 4, 5],
                       guide=LearnedProposal.load(path).guide)
    learned = PPLTokLM(lm=lm, scoring="importance", num_samples=8, proposal="learned", proposal_file=str(path))
    assert learned.score_pairs(pairs) == pytest.approx([r.log_marginal for r in direct], abs=1e-12)
    assert learned.get_model_info()["ppl_tok_proposal"]["proposal"] == "learned"
    lookahead = PPLTokLM(lm=lm, scoring="importance", num_samples=8).score_pairs(pairs)
    assert lookahead != pytest.approx(learned.score_pairs(pairs), abs=1e-9)
    import ppl_tok.scorings.canonical_rest as canonical_rest
    import ppl_tok.scorings.mixture as mixture

    for scoring, module in (("canonical+rest", canonical_rest), ("mixture", mixture)):
        ours = PPLTokLM(lm=lm, scoring=scoring, num_samples=8, proposal="learned", proposal_file=str(path))
        with monkeypatch.context() as patch:  # the same pairs' particles, replaced by the direct call's: the same scores
            patch.setattr(module, "particles", lambda *args, **kwargs: direct)
            expected = ours.score_pairs(pairs)
        assert ours.score_pairs(pairs) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="go together"):
        PPLTokLM(lm=lm, scoring="importance", proposal="learned")


def test_canonical_lm_pair_scorings_match_the_function():
    """``scoring=canonical-local|canonical-global``: the continuation's canonical tokens under the canonical LM."""
    from ppl_tok.infer.canonical_lm import canonical_lm_scores
    from tests.canonical_toys import bpe_vocab, toy_lm as toy_bpe_lm

    lm = toy_bpe_lm(bpe_vocab())
    pair = Pair("ab", "bab", 0, ("t", 0), 0)
    local = PPLTokLM(lm=lm, scoring="canonical-local").score_pairs([pair])[0]
    assert local == pytest.approx(canonical_lm_scores(lm, ["ab"], ["bab"], mode="local")[0].estimate, abs=1e-12)
    assert local >= lm.log_probs_many([lm.canonical("bab")], ["ab"])[0] - 1e-12
    glob = PPLTokLM(lm=lm, scoring="canonical-global", num_samples=16).score_pairs([pair])[0]
    assert math.isfinite(glob)
