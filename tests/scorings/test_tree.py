"""The ``tree`` document scoring: its figure is the token tree's F (brute force on toys, windows summed), its
bracket holds F, LM calls per document stay bounded, and every consumer runs it by name (perplexity in Python, a
resumed run folder, the command line with its flag, lm-eval's ``loglikelihood_rolling``)."""

from __future__ import annotations

import json

import pytest

from ppl_tok.scorings import DOCUMENT, ScoringConfig, score_documents, scoring
from ppl_tok.strings import StringSearchConfig
from ppl_tok.scorings.tree import SEGMENT_BYTES
from ppl_tok.strings.tree_marginal import tree_marginals
from qa_toy import toy_lm
from tests.strings.test_state import WIDE, history_lm
from tests.strings.test_surprisal import VOCAB
from tests.strings.test_tree_marginal import brute_tree_marginal


class Doc:
    def __init__(self, index: int, text: str):
        self.index, self.text = index, text


def test_registered_with_its_own_parameter_and_no_floor_on_the_marginal():
    tree = scoring("tree", DOCUMENT)
    assert not tree.floor and not tree.ceiling  # its bracket is for F, not for log p(x | c)
    settings = ScoringConfig("tree", segment_bytes=6, exhaustive=True).settings()
    assert settings["segment_bytes"] == 6 and settings["exhaustive"] is True
    with pytest.raises(ValueError, match="segment_bytes"):
        ScoringConfig("tree", segment_bytes=-1)


@pytest.mark.parametrize("segment_bytes", [0, 3, 1000])
def test_documents_score_brute_force_f_with_a_bracket_that_holds_it(segment_bytes):
    lm = history_lm(3, VOCAB)
    texts = ["ab ba. a b", "b a ab ba ab", "a"]
    config = ScoringConfig("tree", search=WIDE, segment_bytes=segment_bytes)
    scores = score_documents(lm, [Doc(i, t) for i, t in enumerate(texts)], config)
    for s, t in zip(scores, texts):
        truth = brute_tree_marginal(lm, t, (), segment_bytes)
        assert s.log_likelihood == pytest.approx(truth, abs=1e-9)
        assert s.lower - 1e-9 <= truth <= s.upper + 1e-9
        assert s.canonical == pytest.approx(lm.log_prob(lm.canonical(t)), abs=1e-9) and s.log_likelihood >= s.canonical
        assert s.extra["batch"] == 3 and s.forwards > 0 and s.canonical_forwards == len(lm.canonical(t))
    lazy = score_documents(lm, [Doc(i, t) for i, t in enumerate(texts)], ScoringConfig("tree"))  # the default search
    for s, t in zip(lazy, texts):
        assert s.lower - 1e-9 <= brute_tree_marginal(lm, t, (), SEGMENT_BYTES) <= s.upper + 1e-9


def test_windowed_documents_sum_their_windows():
    lm = history_lm(2, VOCAB)
    text = "ab ba. a b ab ba b a. ab"
    [s] = score_documents(lm, [Doc(0, text)], ScoringConfig("tree", window=6, search=WIDE, segment_bytes=0))
    from ppl_tok.scorings.windows import text_windows

    pieces = text_windows(lm.vocab, lm.canonical(text), 6)
    assert s.windows == len(pieces) > 1
    alone = tree_marginals(lm, [p.text for p in pieces], [p.context for p in pieces], WIDE, 0,
                           canonical=[p.tokens for p in pieces])
    assert s.log_likelihood == pytest.approx(sum(m.estimate for m in alone), abs=1e-9)
    assert s.canonical == pytest.approx(sum(m.canonical for m in alone), abs=1e-9)


def test_lm_calls_per_document_do_not_grow_with_its_length():
    """One document at a time: the calls past its canonical column (one per position on a toy LM) stay put."""
    calls = []
    for n in (2, 8, 32):
        text = "ab ba. a b " * n + "ab"
        lm = history_lm(3, VOCAB)
        [s] = score_documents(lm, [Doc(0, text)], ScoringConfig("tree", segment_bytes=4))
        calls.append(s.extra["calls"] - len(lm.canonical(text)))
    assert calls[1] == calls[2] <= 9 and calls[0] <= calls[1]


def test_perplexity_runs_it_into_a_folder_and_resumes(tmp_path):
    from ppl_tok.perplexity import corpus_from_texts
    from ppl_tok.perplexity.run import run_perplexity

    lm = toy_lm()
    corpus = corpus_from_texts(["ab ba cd", "a b", "dc ab e"])
    config = ScoringConfig("tree", segment_bytes=2)
    scores = run_perplexity(lm, corpus, config, out=tmp_path / "run", progress=False)
    assert all(s.log_likelihood >= s.canonical for s in scores)
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored["scoring"] == "tree" and stored["segment_bytes"] == 2
    again = run_perplexity(lm, corpus, config, out=tmp_path / "run", progress=False)
    assert [s.to_record() for s in again] == [s.to_record() for s in scores]
    with pytest.raises(ValueError, match=f"segment_bytes: folder has 2, this run has {SEGMENT_BYTES}"):
        run_perplexity(lm, corpus, ScoringConfig("tree"), out=tmp_path / "run", progress=False)


def _perplexity(doc, *flags):
    from ppl_tok.cli.main import main
    from ppl_tok.lm.backends import register_backend, unregister_backend

    register_backend("toy-tree-test", lambda spec, **options: toy_lm())
    try:
        return main(["perplexity", str(doc), "--backend", "toy-tree-test", "--model", "x", "--scoring", "tree",
                     "--json", *flags])
    finally:
        unregister_backend("toy-tree-test")


def test_the_command_line_offers_it_with_its_flag_and_resumes_its_folder(tmp_path, capsys):
    doc = tmp_path / "d.txt"
    doc.write_text("ab ba cd a", encoding="utf-8")
    lm = toy_lm()
    [want] = score_documents(lm, [Doc(0, "ab ba cd a")], ScoringConfig("tree", segment_bytes=3))
    assert _perplexity(doc, "--segment-bytes", "3", "--out", str(tmp_path / "run")) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["scoring"] == "tree" and out["log_likelihood"] == pytest.approx(want.log_likelihood, abs=1e-9)
    assert "certified" not in out  # no floor on the marginal is claimed
    assert _perplexity(doc, "--segment-bytes", "3", "--out", str(tmp_path / "run")) in (0, None)  # resumed
    assert json.loads(capsys.readouterr().out)["log_likelihood"] == pytest.approx(want.log_likelihood, abs=1e-9)
    assert _perplexity(doc, "--segment-bytes", "5", "--out", str(tmp_path / "run")) == 2
    assert "segment_bytes: folder has 3, this run has 5" in capsys.readouterr().err
    assert _perplexity(doc, "--segment-bytes", "-2") == 2
    assert "--segment-bytes" in capsys.readouterr().err


def test_lm_eval_scores_documents_with_it():
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import ModelArgumentError, PPLTokLM

    model = PPLTokLM.create_from_arg_obj({"lm": toy_lm(), "scoring": "tree", "segment_bytes": "4"})

    class Request:
        args = ("ab ba cd ab",)

    [want] = score_documents(toy_lm(), [Doc(0, "ab ba cd ab")], ScoringConfig("tree", segment_bytes=4))
    assert model.loglikelihood_rolling([Request()], disable_tqdm=True) == [pytest.approx(want.log_likelihood,
                                                                                          abs=1e-9)]
    with pytest.raises(ModelArgumentError, match="segment_bytes"):
        PPLTokLM.create_from_arg_obj({"lm": toy_lm(), "scoring": "tree", "segment_bytes": "x"})


@pytest.mark.slow
def test_smollm2_tree_equals_the_beam_restricted_to_the_same_paths(smollm2):
    """Each segment's term is the beam's marginal of the segment after its canonical head (BOS, the canonical tokens
    before the cut): the same token sequences, summed by the byte-synchronous beam (bundled OpenBookQA stems)."""
    from ppl_tok.datasets import BUNDLED_DATA, data_file, load_questions
    from ppl_tok.strings import string_marginals

    texts = [q.context for q in load_questions(data_file("openbookqa", "test", BUNDLED_DATA))[:1]]
    texts.append("The old man the boats, don't they? Jordan's split name, Jordan again.")
    config = StringSearchConfig(beam=8, prune=12.0)  # the same search on both sides: a narrower one checks as much
    got = tree_marginals(smollm2, texts, [""] * len(texts), config, 8)
    for text, m in zip(texts, got):
        ids = smollm2.canonical(text)
        ends = [0]
        for t in ids:
            ends.append(ends[-1] + len(smollm2.vocab[t] or b""))
        data, pieces, contexts, r0 = text.encode(), [], [], 0
        for r1 in m.cuts:
            pieces.append(data[ends[r0]:ends[r1]].decode())
            contexts.append(tuple(ids[:r0]))
            r0 = r1
        assert len(pieces) > 1
        ref = string_marginals(smollm2, pieces, contexts, config)
        assert m.estimate == pytest.approx(sum(r.estimate for r in ref), abs=2e-3)
        assert m.canonical == pytest.approx(sum(r.canonical for r in ref), abs=2e-3)
        assert m.lower - 1e-9 <= m.estimate <= m.upper + 1e-9
