"""A Llama-2-style model folder (the real Llama 2 tokenizer as transformers 5 loads it, with its dummy prefix,
and a tiny random Llama): texts without a leading space score, contexts are fed as the tokenizer feeds them,
and `ppl-tok qa` runs on a bundled data set."""

import json

import pytest
import torch

from ppl_tok import compile_mdd, load_lm
from ppl_tok.infer.exact import exact_marginal
from tests.cli_run import run, strict_json
from tests.conftest import SHARED
from tests.tiny_tokenizers import llama2_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return llama2_folder(tmp_path_factory.mktemp("llama2-style"))


@pytest.fixture(scope="module")
def lm(folder):
    return load_lm(str(folder))


def _plain(lm, ids):
    """``log p(ids[1:] | ids[0])`` from one plain transformers forward."""
    with torch.inference_mode():
        rows = lm.model(input_ids=torch.tensor([list(ids)])).logits[0].double().log_softmax(-1)
    return sum(float(rows[i, ids[i + 1]]) for i in range(len(ids) - 1))


def test_texts_without_a_leading_space_score_and_contexts_are_fed_as_the_tokenizer_does(lm):
    assert lm.bos_id == 1 and lm.vocab.dummy_prefix
    tokens = lm.canonical("Paris is")
    assert lm.vocab.decode(tokens) == b"Paris is"
    assert lm.canonical_log_prob("Paris is") == pytest.approx(_plain(lm, [1] + tokens), abs=1e-4)
    context = "Q: Where is Paris?\nA:"
    assert lm.prefix_ids(context) == tuple(lm.tokenizer(context).input_ids)  # BOS, then [▁Q, :, ...]
    both = list(lm.prefix_ids(context)) + lm.canonical(" France")
    expected = _plain(lm, both) - _plain(lm, list(lm.prefix_ids(context)))
    assert lm.canonical_log_prob(" France", context) == pytest.approx(expected, abs=1e-4)


def test_counts_and_marginals_work_on_the_text_as_given(lm):
    mdd = compile_mdd("Paris is", lm.vocab)
    assert mdd.count() > 1 and mdd.count() != compile_mdd(" Paris is", lm.vocab).count()
    exact = exact_marginal("Paris", lm)
    assert exact.canonical_log_prob <= exact.log_marginal < 0
    assert len(exact.tokenizations) == compile_mdd("Paris", lm.vocab).count()


def test_qa_runs_on_a_bundled_data_set(folder, tmp_path, capsys):
    code, out, err = run(capsys, "qa", "run", "--dataset", "socialiqa", "--data-dir", str(SHARED / "data"),
                         "--model", str(folder), "--limit", "1", "--samples", "2", "--out", str(tmp_path / "run"),
                         "--json")
    assert code == 0, err
    assert strict_json(out)["records"] == 2
    assert json.loads((tmp_path / "run" / "run.json").read_text())["lm"]["model"] == str(folder)
