"""The hostile suite of issue 56 (round four): backends, lm-eval generation, contexts, scorings, byte audit,
messages and ignored flags.

Each case ends as rounds two and three do (``test_hostile_strings``, ``test_hostile_round3``): refused in one
line naming the input (before the model loads where a loader counts its calls), or answered with a figure
checked against the same figure computed another way. The model cards' cases are ``test_hostile_cards``.
"""

from __future__ import annotations

import pytest

from ppl_tok.cli.main import main
from tests.lm.test_backends import isolate
from tests.suites.test_hostile_strings import BATCH_FILES, one_line, refused, world  # noqa: F401 - the shared fixture


# ------------------------------------------------------------ a misbehaving --backend module:function
LOADERS = ["returns_str", "returns_none", "raises", "no_config"]


@pytest.mark.parametrize("function", LOADERS)
def test_a_misbehaving_backend_is_one_line_naming_it_on_the_command_line(capsys, monkeypatch, function):
    """The audit: "internal error ... please report it" for a loader returning a str or None, raising, or
    taking no ``config``."""
    isolate(monkeypatch)  # a --backend module:function registers itself: not left behind
    name = f"tests.lm.test_backends:{function}"
    one_line(capsys, ["score", "ab", "--model", "x", "--backend", name], [f"LM backend {name!r}"])


@pytest.mark.parametrize("function", LOADERS)
def test_a_misbehaving_backend_is_a_model_argument_error_in_lm_eval(monkeypatch, function):
    """The audit: lm-eval raised a raw ``AttributeError`` (``'str' object has no attribute 'spec'``)."""
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import ModelArgumentError, PPLTokLM

    isolate(monkeypatch)  # a --backend module:function registers itself: not left behind
    name = f"tests.lm.test_backends:{function}"
    with pytest.raises(ModelArgumentError, match=f"model='x': LM backend {name!r}"):
        PPLTokLM(model="x", backend=name)


# ------------------------------------------------------------ contexts="xy": a str where a list of contexts goes
def _api_calls():
    from ppl_tok.infer.search import marginal_bounds_many
    from ppl_tok.infer.smc import smc_marginals
    from ppl_tok.strings.entropy import next_token_entropies
    from ppl_tok.strings.events import string_events
    from ppl_tok.strings.marginal import string_marginals
    from ppl_tok.strings.reading import surprisals_frame
    from ppl_tok.strings.state import initial_many
    from ppl_tok.strings.surprisal import canonical_surprisals_many, surprisals_many

    return {
        "surprisals_many": lambda lm: surprisals_many(lm, ["ab", "ba"], contexts="ab"),
        "surprisals_frame": lambda lm: surprisals_frame(lm, ["ab", "ba"], contexts="ab"),
        "marginal_bounds_many": lambda lm: marginal_bounds_many(["ab", "ba"], lm, contexts="ab"),
        "canonical_surprisals_many": lambda lm: canonical_surprisals_many(lm, ["ab", "ba"], contexts="ab"),
        "next_token_entropies": lambda lm: next_token_entropies(lm, ["ab", "ba"], contexts="ab"),
        "string_marginals": lambda lm: string_marginals(lm, ["ab", "ba"], contexts="ab"),
        "string_events": lambda lm: string_events(lm, ["ab", "ba"], contexts="ab"),
        "initial_many": lambda lm: initial_many(lm, ["ab", "ba"], contexts="ab"),
        "smc_marginals": lambda lm: smc_marginals(["ab", "ba"], lm, 4, contexts="ab"),
    }


@pytest.mark.parametrize("name", list(_api_calls()))
def test_a_str_of_contexts_is_refused_not_read_one_character_per_text(name):
    """The audit: ``contexts="xy"`` was read as the contexts ``"x"`` and ``"y"`` (two texts: no length error)."""
    from qa_toy import toy_lm

    lm = toy_lm()
    with pytest.raises(TypeError, match=r"contexts must be a sequence of contexts \(one per text\), got the str 'ab'"):
        _api_calls()[name](lm)
    assert lm.stats.calls == 0  # refused before any LM call


# ------------------------------------------------------------ learn-proposal's word list: the one line reader
def test_learn_proposal_reads_a_crlf_word_list_without_its_carriage_returns(tmp_path, monkeypatch):
    """The audit: ``learn-proposal`` did not read its word list with the one line reader (a lone ``\\r`` inside a
    line ended it there, splitting one word in two); ``\\r\\n`` ends a line and leaves no ``\\r``."""
    import ppl_tok.cli.tokenization as cli
    import ppl_tok.infer.learn

    words = tmp_path / "words.txt"
    words.write_bytes(b" unbelievable\r\n deflated\r\n\r\n eggplant\xe2\x80\xa8x\r\n half\rway\r\n")
    seen = []

    class Trained(BaseException):
        """Stops the command where training would start (past main's error handling)."""

    def train(texts, lm, *a, **k):
        seen.append(texts)
        raise Trained

    monkeypatch.setattr(cli, "_load_lm", lambda args: "the LM")
    monkeypatch.setattr(ppl_tok.infer.learn, "train_proposal", train)
    with pytest.raises(Trained):
        main(["learn-proposal", str(words), "--out", str(tmp_path / "p.pt")])
    assert seen == [[" unbelievable", " deflated", " eggplant\u2028x", " half\rway"]]  # U+2028, lone \r: characters


@pytest.mark.parametrize("data, needles", [(b"\r\n  \r\n", ["words.txt holds no text"]),
                                           (b" caf\xe9\n", ["words.txt", "UTF-8"])])
def test_learn_proposal_refuses_a_bad_word_list_in_one_line_before_the_load(capsys, tmp_path, monkeypatch, data,
                                                                            needles):
    import ppl_tok.cli.tokenization as cli

    monkeypatch.setattr(cli, "_load_lm", lambda args: pytest.fail("the LM loaded before the refusal"))
    (tmp_path / "words.txt").write_bytes(data)
    one_line(capsys, ["learn-proposal", str(tmp_path / "words.txt"), "--out", str(tmp_path / "p.pt")], needles)


# ------------------------------------------------------------ a scoring that returns the wrong number of scores
@pytest.fixture
def short_scoring():
    """A registered scoring that drops its last document's (and its last pair's) score."""
    from ppl_tok.scorings import register, unregister
    from tests.scorings.test_adding_a_scoring import UniformBytes

    class DropsOne(UniformBytes):
        name = "toy-drops-one"
        classifiers = ("toy-drops-one",)

        def score_documents(self, lm, docs, config, *, on_bytes=None):
            return super().score_documents(lm, docs, config, on_bytes=on_bytes)[:-1]

        def score_pairs(self, lm, pairs, config):
            return super().score_pairs(lm, pairs, config)[:-1]

    register(DropsOne)
    yield DropsOne.name
    unregister(DropsOne.name)


def test_a_scoring_short_of_documents_is_refused_by_perplexity(capsys, tmp_path, short_scoring, monkeypatch):
    """The audit: bits per byte over fewer documents than the corpus, no error."""
    from ppl_tok.lm.backends import register_backend, unregister_backend
    from qa_toy import toy_lm

    (tmp_path / "docs.txt").write_text("ab ba\n\nb a ab\n", encoding="utf-8")
    isolate(monkeypatch)  # a --backend module:function registers itself: not left behind
    register_backend("toy-short", lambda spec, **options: toy_lm())
    try:
        one_line(capsys, ["perplexity", str(tmp_path / "docs.txt"), "--split", "paragraphs", "--backend", "toy-short",
                          "--model", "x", "--scoring", short_scoring],
                 ["scoring 'toy-drops-one' returned 1 scores for 2 documents"])
    finally:
        unregister_backend("toy-short")


def test_a_scoring_short_of_pairs_is_refused_by_lm_eval_and_the_qa_study(tmp_path, short_scoring):
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import PPLTokLM
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.run import run_study, study_settings
    from ppl_tok.scorings import Pair
    from qa_toy import toy_lm, write_questions

    model = PPLTokLM(lm=toy_lm(), scoring=short_scoring)
    with pytest.raises(ValueError, match="scoring 'toy-drops-one' returned 1 scores for 2 pairs"):
        model.score_pairs([Pair("ab", " ab"), Pair("ab", " b", choice=1)])
    study = load_study(str(write_questions(tmp_path / "test.jsonl", 2, seed=1)))
    settings = study_settings(study, model="toy", samples=4, seed=0, scores=[short_scoring])
    with pytest.raises(ValueError, match=r"scoring 'toy-drops-one' returned \d+ scores for \d+ pairs"):
        run_study(study, toy_lm(), tmp_path / "run", settings, batch_questions=2, progress=False)


def test_checked_scores_names_the_scoring_for_a_wrong_count_or_kind():
    from ppl_tok.scorings.pairs import PairScore
    from ppl_tok.scorings.results import checked_scores

    ok = [PairScore(-1.0), PairScore(-2.0)]
    assert checked_scores("s", iter(ok), 2, PairScore, "pairs") == ok
    for bad, needle in [(ok + ok, "returned 4 scores for 2 pairs"), ([-1.0, -2.0], "returned a float for its input 0"),
                        ("ab", "returned a str"), (None, "returned a NoneType")]:
        with pytest.raises(ValueError, match=f"scoring 's' {needle}"):
            checked_scores("s", bad, 2, PairScore, "pairs")


# ------------------------------------------------------------ byte-audit --table: every entry, before any load
def _table(tmp_path, name, value):
    import numpy as np
    import torch

    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(value, encoding="utf-8")
    elif name.endswith(".npy"):
        np.save(path, value)
    else:
        torch.save(value, path)
    return path


def _tables():
    import numpy as np
    import torch

    return [("inf.json", "[1, 2, Infinity]", "entry 2 (token id 2) is inf"),
            ("nan.json", "[1, NaN]", "entry 1 (token id 1) is nan"),
            ("big.json", "[1, 1e400]", "entry 1 (token id 1) is inf"),
            ("neg.json", "[0, 1, -3]", "entry 2 (token id 2) is -3"),
            ("half.json", "[2.5]", "entry 0 (token id 0) is 2.5"),
            ("word.json", '[1, "2"]', "entry 1 (token id 1) is '2'; each entry must be a number, not a str"),
            ("bool.json", "[true]", "entry 0 (token id 0) is True"),
            ("nested.json", "[[1, 2]]", "entry 0 (token id 0) is [1, 2]"),
            ("string.json", '"abc"', "holds a value of type str, not a flat list"),
            ("inf.pt", torch.tensor([1.0, float("inf")]), "entry 1 (token id 1) is inf"),
            ("nan.pt", torch.tensor([float("nan")]), "entry 0 (token id 0) is nan"),
            ("matrix.pt", torch.ones(2, 2), "entry 0 (token id 0) is [1.0, 1.0]"),
            ("dict.pt", {"a": 1}, "holds a value of type dict, not a flat list"),
            ("list.pt", [1, -1], "entry 1 (token id 1) is -1"),
            ("scalar.pt", torch.tensor(3), "holds a value of type int, not a flat list"),
            ("nan.npy", np.array([1.0, np.nan]), "entry 1 (token id 1) is nan")]


@pytest.mark.parametrize("index", range(16))
def test_a_bad_byte_table_is_one_line_naming_the_file_and_the_entry_before_any_load(capsys, tmp_path, monkeypatch,
                                                                                    index):
    """The audit: an ``inf`` entry, a ``.pt`` list or dict were internal errors; a NaN named neither file nor entry."""
    import ppl_tok.cli.perplexity

    name, value, needle = _tables()[index]
    table = _table(tmp_path, name, value)
    (tmp_path / "c.txt").write_text("Hello world\n", encoding="utf-8")
    monkeypatch.setattr(ppl_tok.cli.perplexity, "_vocab", lambda args: pytest.fail("the vocabulary loaded first"))
    one_line(capsys, ["byte-audit", str(tmp_path / "c.txt"), "--table", str(table)], [f"byte table {table}", needle])


def test_a_pt_list_or_a_dict_of_bytes_is_read_as_its_json_twin(tmp_path):
    import torch

    from ppl_tok.perplexity.audit import read_byte_table

    assert read_byte_table(_table(tmp_path, "l.pt", [1, 0, 2])) == [1, 0, 2]
    assert read_byte_table(_table(tmp_path, "d.pt", {"bytes": torch.tensor([3, 1])})) == [3, 1]
    assert read_byte_table(_table(tmp_path, "f.pt", torch.tensor([3.0, 1.0]))) == [3, 1]


# ------------------------------------------------------------ unclear messages and flags accepted and ignored
MESSAGES = [
    # --out '' was Path('') = the current folder: the run's files landed there
    (["perplexity", "{tmp}/ok.txt", "--model", "toy-bigram", "--out", ""], ["--out", "expected a run folder, got ''"]),
    (["surprisal", "{tmp}/items.txt", "--model", "toy-bigram", "--out", ""], ["--out", "expected a run folder"]),
    (["conditional", "--input", "{tmp}/pairs.jsonl", "--model", "toy-bigram", "--out", ""], ["--out", "run folder"]),
    (["next", "--input", "{tmp}/pairs.jsonl", "--model", "toy-bigram", "--out", ""], ["--out", "run folder"]),
    (["bench", "gpu-check", "--device", "cpu", "--quick", "--out", ""], ["--out", "expected a folder, got ''"]),
    # flags accepted and ignored
    (["generate", "--prompt", "ab", "--canonical", "--beam", "3", "--model", "toy-bigram"],
     ["--beam would be ignored", "--canonical"]),
    (["generate", "--prompt", "ab", "--canonical", "--prune", "3", "--model", "toy-bigram"],
     ["--prune would be ignored"]),
    (["generate", "--prompt", "ab", "--canonical", "--prefill", "exact", "--model", "toy-bigram"], ["--prefill"]),
    (["generate", "--prompt", "ab", "--canonical", "--out", "{tmp}/g", "--model", "toy-bigram"], ["--out would be"]),
    (["generate", "--prompt", "ab", "--canonical", "--model", "toy-bigram", "--model", "toy-bigram-2"],
     ["--canonical samples from one LM"]),
    (["perplexity", "{tmp}/ok.txt", "--model", "toy-bigram", "--checkpoint-every", "5"],
     ["--checkpoint-every would be ignored", "--out"]),
    # the request numbered from 0 after the model load: now file:line, before it
    (["boundary", "{tmp}/requests.jsonl", "--model", "toy-bigram"], ["requests.jsonl:2", "continuation", "empty"]),
]


@pytest.mark.parametrize("argv, needles", MESSAGES)
def test_unclear_messages_and_ignored_flags_are_one_line_before_the_load(capsys, world, monkeypatch, argv,
                                                                          needles):
    tmp, _ = world
    for name, text in BATCH_FILES.items():
        (tmp / name).write_text(text, encoding="utf-8")
    (tmp / "items.txt").write_text("ab ba\nb a\n", encoding="utf-8")
    (tmp / "requests.jsonl").write_text('{"context": "ab", "continuation": " ba"}\n{"context": "ab", '
                                        '"continuation": ""}\n', encoding="utf-8")
    (tmp / "cwd").mkdir()
    monkeypatch.chdir(tmp / "cwd")
    refused(capsys, world, argv, needles)
    assert not any((tmp / "cwd").iterdir())  # nothing written into the current folder


def test_the_checkpoint_flag_with_out_and_canonical_generation_alone_still_run(capsys, world):
    tmp, _ = world
    assert main(["perplexity", str(tmp / "ok.txt"), "--model", "toy-bigram", "--checkpoint-every", "5", "--out",
                 str(tmp / "ck")]) == 0
    assert main(["generate", "--prompt", "ab", "--canonical", "--max-bytes", "3", "--model", "toy-bigram"]) == 0


def test_a_damaged_surprisal_unit_is_one_line_naming_the_line_and_the_field(capsys, world):
    """The audit: a stored unit without ``lower`` ended ``surprisal`` with ``error: 'lower'``."""
    import json

    tmp, _ = world
    (tmp / "items.txt").write_text("ab ba\nb a\n", encoding="utf-8")
    argv = ["surprisal", str(tmp / "items.txt"), "--model", "toy-bigram", "--out", str(tmp / "s")]
    assert main(argv) == 0
    records = tmp / "s" / "records.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    del rows[0]["units"][1]["lower"]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    refused(capsys, world, argv, [f"{records}:1", "unit 1 has no field 'lower'", "damaged"], before_load=False)


def test_a_record_without_its_key_names_the_missing_field(tmp_path):
    from ppl_tok.common.jsonl_store import StoreError, read_jsonl_records

    path = tmp_path / "r.jsonl"
    path.write_text('{"index": 0}\n{"other": 1}\n')
    with pytest.raises(StoreError, match=r"r.jsonl:2: not an item record \(no field 'index'\); the line is damaged"):
        list(read_jsonl_records(path, lambda r: r["index"], "item record"))
