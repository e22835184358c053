"""The lm-eval model over strings: ``scoring=conditional`` (brute force, whitespace, ``ppl-tok conditional``) and
``generate_until`` (a generation task this test writes, run through lm-eval)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

for _var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")

lm_eval = pytest.importorskip("lm_eval", reason="needs the lm-eval extra: pip install 'ppl-tok[lm-eval]'")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from ppl_tok.integrations.lm_eval import MODEL_NAME, PPLTokLM, move_trailing_space  # noqa: E402
from ppl_tok.integrations.lm_eval_strings import EXTEND_THRESHOLD, generation_settings  # noqa: E402
from ppl_tok.strings import StringSearchConfig  # noqa: E402
from ppl_tok.strings.generate import generate  # noqa: E402
from qa_toy import toy_lm  # noqa: E402
from ppl_tok.common.logspace import logsumexp  # noqa: E402
from ppl_tok.strings.units import WordRules  # noqa: E402
from tests.strings.test_state import brute_exact, brute_prefix  # noqa: E402

WIDE = {"beam": 10_000, "prune": 1e6}


def request(context: str, continuation: str, doc_id: int = 0, idx: int = 0) -> Instance:
    return Instance("loglikelihood", {}, (context, continuation), idx, ("t", doc_id, 1))


def scores(model: PPLTokLM, pairs: list[tuple[str, str]]) -> list[float]:
    return [s for s, _ in model.loglikelihood([request(c, x, i) for i, (c, x) in enumerate(pairs)], disable_tqdm=True)]


def brute_event(lm, x: str, event: str) -> float:
    """log P(event of x) by brute force: the prefix, or x then a boundary character or the end."""
    if event == "prefix":
        return brute_prefix(lm, x.encode())
    return logsumexp([brute_prefix(lm, (x + b).encode()) for b in WordRules().boundary_chars]
                     + [brute_exact(lm, x.encode())])


@pytest.mark.parametrize("event", ["boundary", "prefix"])
@pytest.mark.parametrize("text", ["ab cd", " abc de", "ba ab  c"])
def test_conditional_equals_brute_force_at_every_cut(text, event):
    """log p(y | x) = log P(event of x y) - log P(x) over all token sequences (and, under the default
    ``event=boundary``, every next character), for every cut of the string (exact prefill)."""
    lm = toy_lm(3)
    model = PPLTokLM(lm=lm, scoring="conditional", prefill="exact", **WIDE,
                     **({} if event == "boundary" else {"event": event}))
    assert model.get_model_info()["ppl_tok_event"] == event
    cuts = [(text[:i], text[i:]) for i in range(len(text))]
    got = scores(model, cuts)
    for (c, x), s in zip(cuts, got):
        c, x = move_trailing_space(c, x)
        want = brute_event(lm, c + x, event) - brute_prefix(lm, c.encode())
        assert s == pytest.approx(want, abs=1e-9), (c, x)
    assert len(model.intervals) == len(cuts)
    assert all(lo - 1e-9 <= s <= hi + 1e-9 for s, (lo, hi) in zip(got, model.intervals))


def test_lazy_extension_by_default_its_interval_certified():
    """The default lazy extension (``extend_threshold``) keeps each interval around the brute-force answer; under
    ``prefill=exact`` (or ``extend_threshold=0``) the beam is exhaustive."""
    lm = toy_lm(3)
    model = PPLTokLM(lm=lm, scoring="conditional", **WIDE)
    assert model.conditional.extend_threshold == EXTEND_THRESHOLD > 0
    assert model.get_model_info()["ppl_tok_extend_threshold"] == EXTEND_THRESHOLD
    assert PPLTokLM(lm=lm, scoring="conditional", prefill="exact").conditional.extend_threshold == 0
    assert PPLTokLM(lm=lm, scoring="conditional", extend_threshold="0").conditional.extend_threshold == 0
    text = "ba ab  c"
    cuts = [move_trailing_space(text[:i], text[i:]) for i in range(len(text))]
    got = scores(model, cuts)
    for (c, x), s, (lo, hi) in zip(cuts, got, model.intervals):
        want = brute_event(lm, c + x, "boundary") - brute_prefix(lm, c.encode())
        assert lo - 1e-9 <= want <= hi + 1e-9 and lo - 1e-9 <= s <= hi + 1e-9, (c, x)
    for bad in (1, -0.1, "x"):
        with pytest.raises(ValueError, match="extend_threshold="):
            PPLTokLM(lm=lm, scoring="conditional", extend_threshold=bad)


def test_is_greedy_follows_the_event():
    """is_greedy: greedy byte decoding writes the continuation (and, under boundary, then ends the word): the
    continuation greedy decoding writes is greedy under prefix; under boundary exactly when a boundary or the end
    is the most probable next."""
    lm = toy_lm(2)
    text = generate(lm, "ab", max_bytes=3, greedy=True, mode="bytes", config=StringSearchConfig(**WIDE)).text
    assert text
    both = {e: PPLTokLM(lm=lm, scoring="conditional", prefill="exact", event=e, **WIDE) for e in ("prefix", "boundary")}
    out = {e: m.loglikelihood([request("ab", text)], disable_tqdm=True)[0] for e, m in both.items()}
    assert out["prefix"][1] is True
    nxt = generate(lm, "ab" + text, max_bytes=1, greedy=True, mode="bytes", config=StringSearchConfig(**WIDE))
    ends = nxt.text == "" or nxt.text in WordRules().boundary_chars
    assert out["boundary"][1] is ends
    wrong = "b" if text[:1] != "b" else "a"
    assert both["prefix"].loglikelihood([request("ab", wrong + text)], disable_tqdm=True)[0][1] is False
    assert PPLTokLM(lm=lm, scoring="canonical").loglikelihood([request("ab", text)], disable_tqdm=True)[0][1] is False
    with pytest.raises(ValueError, match="event='word'"):
        PPLTokLM(lm=lm, scoring="conditional", event="word")


def test_whitespace_placement_does_not_move_the_score():
    """target_delimiter or a trailing space: wherever the space sits, the same score (and never empty)."""
    model = PPLTokLM(lm=toy_lm(1), scoring="conditional")
    a, b, c = scores(model, [("ab cd", " ef"), ("ab cd ", "ef"), ("ab cd", " ef")])
    assert a == b == c and math.isfinite(a) and a < 0
    canonical = PPLTokLM(lm=toy_lm(1), scoring="canonical")
    assert scores(canonical, [("ab cd", " ef")]) == scores(canonical, [("ab cd ", "ef")])  # moved there too


def test_conditional_of_documents_is_the_prefix_scoring():
    model = PPLTokLM(lm=toy_lm(2), scoring="conditional", **WIDE)
    assert model.document_scoring == "prefix"
    doc = " ab cd"
    (got,) = model.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (doc,), 0, ("t", 0, 1))],
                                         disable_tqdm=True)
    assert got == pytest.approx(brute_prefix(toy_lm(2), doc.encode()), abs=1e-9)
    with pytest.raises(ValueError, match="prefill='x'"):
        PPLTokLM(lm=toy_lm(2), prefill="x")


# ------------------------------------------------------------------ generate_until
GEN_YAML = """\
task: gen_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["{stop}"]
  max_gen_toks: 3
{extra}metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

PROMPTS = [{"prompt": "ab c", "answer": "d"}, {"prompt": "ba ", "answer": "ab"}, {"prompt": "", "answer": "a"}]


def _gen_task(tmp_path: Path, extra: str = "", stop: str = " ") -> Path:
    folder = tmp_path / "gen-tasks"
    folder.mkdir(exist_ok=True)
    data = folder / "gen.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in PROMPTS))
    (folder / "gen_local.yaml").write_text(GEN_YAML.format(path=data, extra=extra, stop=stop))
    return folder


@pytest.mark.parametrize("sampled", [False, True])
def test_generate_until_runs_a_generation_task(tmp_path, sampled):
    """Greedy (byte by byte) and sampled (tokens mode) answers equal ppl_tok.strings.generate's, stop string cut."""
    from ppl_tok.common.seeds import pair_seed

    folder = _gen_task(tmp_path, "  do_sample: true\n  temperature: 1.0\n" if sampled else "")
    res = lm_eval.simple_evaluate(model=MODEL_NAME, model_args={"lm": toy_lm(4), "seed": 5}, tasks=["gen_local"],
                                  task_manager=TaskManager(include_path=str(folder), include_defaults=False),
                                  log_samples=True, verbosity="ERROR")
    samples = sorted(res["samples"]["gen_local"], key=lambda s: s["doc_id"])
    assert len(samples) == 3 and 0.0 <= res["results"]["gen_local"]["exact_match,none"] <= 1.0
    for s, d in zip(samples, PROMPTS):
        got = s["resps"][0][0]
        kw = {"mode": "bytes", "greedy": True} if not sampled else {}
        want = generate(toy_lm(4), d["prompt"], 12, stop=[" "], config=StringSearchConfig(prefill="canonical-head"),
                        seed=pair_seed(5, "generate", str(s["doc_id"]), 0), **kw)
        assert got == want.text and " " not in got and len(got.encode()) <= 12


def test_generation_settings_state_the_budget_and_refuse_unknown_keys():
    assert generation_settings({"until": "\n", "max_gen_toks": 10}, 4) == {
        "max_bytes": 40, "stop": ["\n"], "greedy": True, "mode": "bytes"}
    assert generation_settings({"do_sample": True, "temperature": 0.7, "top_p": 0.9}, 2) == {
        "max_bytes": 512, "stop": [], "greedy": False, "temperature": 0.7, "top_p": 0.9}
    assert generation_settings({"do_sample": True, "temperature": 0}, 4)["greedy"]
    with pytest.raises(ValueError, match="unsupported gen_kwargs 'top_k'"):
        generation_settings({"top_k": 5}, 4)
    with pytest.raises(ValueError, match="max_gen_toks must be a positive integer"):
        generation_settings({"max_gen_toks": 0}, 4)


# ------------------------------------------------------------------ the bundled models (slow)
PUBLIC_CASES = [("Ans", "wer"), ("hello wor", "ld"), ("Question: 2+2? Answer: ", "4"), ("Question: 2+2? Answer:", " 4")]


@pytest.mark.slow
@pytest.mark.parametrize("card", ["smollm2-135m", "gemma3-270m"])
def test_public_boundary_cases_equal_ppl_tok_conditional(card, capsys, monkeypatch):
    """The public cases (lm-eval #1053, #1297, #3336, PR #4055): finite, equal to ``ppl-tok conditional`` with
    the model's settings (its lazy extension) to 1e-6 (one request per batch: the same forwards as the command),
    and the same wherever the delimiter
    space sits. Batched, the float32 forwards of differently shaped batches round differently (measured up to
    2e-5 nats on these cases), so the batched scores are held to 1e-4.

    The model is loaded once: each command asks for the test's own spec (checked) and gets the test's LM with its
    caches cleared, as a fresh load of that spec would be."""
    import ppl_tok.cli.common
    from ppl_tok.cli.main import main
    from ppl_tok.lm.cards import load_lm

    lm = load_lm(card, device="cpu")
    asked = []

    def loaded(spec):
        asked.append(spec)
        lm.clear_cache()
        return lm

    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", loaded)
    model = PPLTokLM(lm=lm, scoring="conditional", batch_size=1, event="prefix")  # the command's --event prefix
    got = scores(model, PUBLIC_CASES)
    batched = scores(PPLTokLM(lm=lm, scoring="conditional", event="prefix"), PUBLIC_CASES)
    assert batched == pytest.approx(got, abs=1e-4)
    for (c, x), s in zip(PUBLIC_CASES, got):
        assert math.isfinite(s) and s < 0
        prompt, text = move_trailing_space(c, x)
        assert main(["conditional", text, "--prompt", prompt, "--model", card, "--device", "cpu",
                     "--prefill", "canonical-head", "--extend-threshold", str(EXTEND_THRESHOLD), "--event", "prefix",
                     "--json"]) == 0
        cli = json.loads(capsys.readouterr().out)
        assert s == pytest.approx(cli["estimate"], abs=1e-6), (c, x)
    assert asked == [lm.spec] * len(PUBLIC_CASES)  # the command would have loaded this very model
    assert got[2] == pytest.approx(got[3], abs=1e-6)
    lm.clear_cache()  # (after the comparisons above: rows cached from other batch shapes round differently)
    boundary = scores(PPLTokLM(lm=lm, scoring="conditional"), PUBLIC_CASES)  # the default event
    assert all(math.isfinite(s) and s < 0 for s in boundary)
    assert boundary[2] == pytest.approx(boundary[3], abs=1e-6)  # wherever the delimiter space sits
    assert all(b <= g + 1e-4 for b, g in zip(boundary, got))  # the boundary event is inside the prefix one


def test_a_byte_budget_that_ends_inside_a_character_ends_at_the_last_complete_one():
    """Issue 56: ``max_gen_toks=1`` after a Japanese prompt gave ``'、\\ufffd'`` (4 bytes: 、 and one of 日)."""
    from ppl_tok import BigramLM, Vocabulary
    from ppl_tok.integrations.lm_eval_strings import complete_characters

    vocab = Vocabulary.from_tokens([None, "a", "、", "日"])
    rows = torch.tensor([[0.1, 0.1, 0.7, 0.1], [0.05, 0.05, 0.8, 0.1], [0.05, 0.05, 0.1, 0.8], [0.1, 0.1, 0.1, 0.7]])
    model = PPLTokLM(lm=BigramLM(vocab, rows, bos_id=0), gen_bytes_per_token=4)
    requests = [Instance("generate_until", {}, ("a", {"max_gen_toks": toks}), 0, ("t", toks, 1)) for toks in (1, 2, 3)]
    got = model.generate_until(requests, disable_tqdm=True)
    # 4 bytes: 、 + 1 byte of 日; 8 bytes: 、日 + 2 bytes; 12 bytes: 、日日日
    assert got == ["、", "、日", "、日日日"]
    assert all("\ufffd" not in text for text in got)
    assert complete_characters("、日".encode()[:5]) == "、" and complete_characters(b"a\xffb\xe6") == "a\ufffdb"
