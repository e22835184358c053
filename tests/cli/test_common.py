"""The helpers below every command (ppl_tok.cli.common): the text read and checked, the LM flags, the JSON."""

import io
import math

import pytest

import ppl_tok.cli.common
from cli_run import run, strict_json
from ppl_tok import FunctionLM, Vocabulary
from ppl_tok.common.jsonout import to_json


def test_unavailable_device_and_unknown_dtype_are_clear(capsys):
    import torch

    if not torch.cuda.is_available():
        code, _, err = run(capsys, "score", " Paris", "--device", "cuda")
        assert code == 2 and "device 'cuda' is not available" in err


def test_json_is_rfc8259_with_non_finite_numbers_as_strings(capsys, monkeypatch):
    assert to_json({"a": -math.inf, "b": [math.inf, math.nan], "c": (1, 2.5)}) == \
        '{"a": "-Infinity", "b": ["Infinity", "NaN"], "c": [1, 2.5]}'
    assert float("-Infinity") == -math.inf  # the strings read back with float()
    vocab = Vocabulary.from_tokens([None, "a", "b", "ab"])
    zero = FunctionLM(vocab, lambda p: [1, 0, 0, 0], bos_id=0, name="zero")  # every text has p = 0
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: zero)
    code, out, _ = run(capsys, "score", "ab", "--json")
    assert code == 0 and strict_json(out)["canonical_log_prob"] == "-Infinity"
    code, out, _ = run(capsys, "distribution", "ab", "--json")
    data = strict_json(out)
    assert code == 0 and data["log_marginal"] == "-Infinity" and data["top"][0]["posterior"] == 0.0


def test_bos_id_flag_and_the_converted_folder(capsys, smollm2):  # smollm2: the model is converted
    from ppl_tok.lm.cards import cache_dir

    folder = str(cache_dir() / "smollm2-135m" / "model")
    code, out, _ = run(capsys, "score", " tongueless", "--model", folder, "--json")
    assert code == 0 and strict_json(out)["canonical_log_prob"] == pytest.approx(-26.694, abs=2e-3)
    code, out, _ = run(capsys, "score", " tongueless", "--model", folder, "--bos-id", "1", "--json")
    assert code == 0 and strict_json(out)["canonical_log_prob"] == pytest.approx(-37.169, abs=2e-3)


def test_text_from_a_file_and_from_stdin(capsys, loaded, tmp_path, monkeypatch):
    f = tmp_path / "t.txt"
    f.write_text(" tongueless", encoding="utf-8")
    code, out, _ = run(capsys, "count", "--file", str(f))
    assert code == 0 and out == "597\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(" tongueless".encode())))
    code, out, _ = run(capsys, "tokenize", "-", "--json")
    assert code == 0 and strict_json(out)["count"] == "597"
    f.write_bytes(b"caf\xe9")
    code, _, err = run(capsys, "count", "--file", str(f))
    assert code == 2 and f"{f} is not UTF-8 text" in err
    code, _, err = run(capsys, "count", "--file", str(tmp_path / "none.txt"))
    assert code == 2 and "--file: cannot read" in err


def test_context_errors_and_window_warning(capsys, loaded, monkeypatch):
    code, _, err = run(capsys, "score", " Paris", "--context", "a\x04b")
    assert code == 2 and "--context:" in err and "U+0004" in err
    monkeypatch.setattr(loaded.model.config, "max_position_embeddings", 4)
    code, _, err = run(capsys, "score", " Paris", "--context", "The capital of France is")
    assert code == 0 and "more than smollm2-135m's window of 4" in err


@pytest.fixture
def torch_threads():
    import torch

    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


@pytest.mark.parametrize("argv, env, want", [
    (["score", "x"], None, 1),                       # the default: one thread
    (["score", "x"], "3", 3),                        # OMP_NUM_THREADS, as the user set it
    (["score", "x", "--threads", "2"], "3", 2),      # --threads over everything
    (["perplexity", "-", "--threads", "2"], None, 2),
    (["count", "x"], None, None),                    # no LM, no threads
])
def test_threads_come_from_the_flag_else_omp_num_threads_else_one(torch_threads, monkeypatch, argv, env, want):
    from ppl_tok.cli.common import set_threads
    from ppl_tok.cli.main import build_parser

    if env is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", env)
    torch_threads.set_num_threads(4)
    assert set_threads(build_parser().parse_args(argv)) == want
    assert torch_threads.get_num_threads() == (4 if want is None else want)


def test_threads_below_one_is_a_usage_error_before_any_work(capsys, no_work):
    code, out, err = run(capsys, "score", "x", "--threads", "0")
    assert code == 2 and "--threads" in err and not out
