"""The canonical LM against brute force over every canonical sequence of a toy BPE vocabulary and LM."""

from __future__ import annotations

import math

import pytest
import torch

from ppl_tok.canonical_step import CanonicalSteps
from ppl_tok.infer.canonical_lm import canonical_lm_scores, normaliser_bracket, sample_walks
from ppl_tok.canonical_step import START
from tests.canonical_toys import all_texts, bpe_vocab, canonical_set, seq_log_prob, toy_lm

VOCAB = bpe_vocab()
CANON = canonical_set()
PREFIXES = {c[:k] for c in CANON for k in range(len(c) + 1)}
TARGETS = ["ab", "aba", "abab", "bab", "bba", "aab"]


def _lse(xs):
    xs = [x for x in xs if x > -math.inf]
    top = max(xs)
    return top + math.log(math.fsum(math.exp(x - top) for x in xs))


def _brute_local(lm, tokens):
    """log l(v): each step renormalised over the tokens t with u t a prefix of a canonical sequence
    (brute force: the prefixes of the canonical tokenizations of every string), the end where u is canonical."""
    total, u = 0.0, ()
    for t in tokens:
        row = lm._dist((0,) + u)
        allowed = [float(row[b]) for b in range(1, len(VOCAB)) if u + (b,) in PREFIXES]
        if u in CANON or not u:
            allowed.append(float(row[0]))
        total += float(row[t]) - _lse(allowed)
        u += (t,)
    return total


def _brute_global(lm, tokens):
    """log P_g(starts with v) = log sum_{w canonical, w starts with v} p(w end) - log sum_{w canonical} p(w end)."""
    canon = [w for w in all_texts(VOCAB) if not w or w in CANON]
    z = _lse([seq_log_prob(lm, w, end=True) for w in canon])
    num = _lse([seq_log_prob(lm, w, end=True) for w in canon if w[: len(tokens)] == tuple(tokens)])
    return num - z


def test_the_toy_tokenizer_is_canonical_by_pairs():
    steps = CanonicalSteps(VOCAB)
    for w in all_texts(VOCAB, 5):
        assert steps.passes(w) == (not w or w in CANON), w
        assert steps.passes(w) == steps.is_canonical(w), w


@pytest.mark.parametrize("text", TARGETS)
def test_local_equals_brute_force(text):
    lm = toy_lm(VOCAB)
    tokens = VOCAB.encode(text)
    got = canonical_lm_scores(lm, [""], [text], mode="local")[0]
    assert got.estimate == pytest.approx(_brute_local(lm, tuple(tokens)), abs=1e-9)
    assert got.plain == pytest.approx(seq_log_prob(lm, tuple(tokens), end=False), abs=1e-9)
    # every step's normaliser is at most 1: the local figure is never below plain canonical
    assert got.estimate >= got.plain - 1e-12
    assert all(z <= 1e-12 for z in got.log_normalisers)


@pytest.mark.parametrize("text", TARGETS)
def test_global_bracket_closes_on_the_truth(text):
    lm = toy_lm(VOCAB)
    truth = _brute_global(lm, tuple(VOCAB.encode(text)))
    got = canonical_lm_scores(lm, [""], [text], mode="global", budget=10_000, num_samples=64)[0]
    assert got.lower == pytest.approx(truth, abs=1e-9)
    assert got.upper == pytest.approx(truth, abs=1e-9)


def test_global_small_budget_brackets_the_truth():
    lm = toy_lm(VOCAB)
    for text in TARGETS:
        truth = _brute_global(lm, tuple(VOCAB.encode(text)))
        for budget in (1, 3, 20):
            got = canonical_lm_scores(lm, [""], [text], mode="global", budget=budget, num_samples=4)[0]
            assert got.lower - 1e-12 <= truth <= got.upper + 1e-12, (text, budget)


def test_importance_estimate_of_the_normaliser_is_unbiased():
    lm = toy_lm(VOCAB)
    steps = CanonicalSteps(VOCAB)
    exact, exact_hi = normaliser_bracket(lm, (0,), START, steps, 10_000)
    assert exact == pytest.approx(exact_hi, abs=1e-12)
    walks = sample_walks(lm, (0,), START, steps, 4000, 10, torch.Generator().manual_seed(1))
    w = torch.tensor([lw for _, lw, _ in walks], dtype=torch.float64).exp()
    assert all(ended for *_, ended in walks)
    assert all(steps.is_canonical(toks) for toks, _, _ in walks)
    # the mean weight is Z: within 4 standard errors (fixed seed)
    assert abs(float(w.mean()) - math.exp(exact)) < 4 * float(w.std()) / math.sqrt(len(w))


def test_local_sampler_draws_the_local_model():
    """Walks of the local model hit each canonical text with its local probability (times its end)."""
    lm = toy_lm(VOCAB)
    steps = CanonicalSteps(VOCAB)
    n = 4000
    walks = sample_walks(lm, (0,), START, steps, n, 10, torch.Generator().manual_seed(2))
    counts: dict[tuple[int, ...], int] = {}
    for toks, _, _ in walks:
        counts[tuple(toks)] = counts.get(tuple(toks), 0) + 1
    top = max(counts, key=counts.get)
    score = canonical_lm_scores(lm, [""], [list(top)], mode="local")[0].estimate
    # l(top, end) = l(top) * l(end | top)
    u = top
    row = lm._dist((0,) + u)
    allowed = [float(row[b]) for b in range(1, len(VOCAB)) if u + (b,) in PREFIXES] + [float(row[0])]
    p = math.exp(score + float(row[0]) - _lse(allowed))
    assert abs(counts[top] / n - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_a_non_canonical_continuation_scores_minus_infinity():
    lm = toy_lm(VOCAB)
    a, b = VOCAB.ids_of("a")[0], VOCAB.ids_of("b")[0]
    got = canonical_lm_scores(lm, [""], [[a, b]], mode="local")[0]  # "ab" is one token
    assert got.estimate == -math.inf and got.plain > -math.inf


def test_bad_input_is_one_clear_error():
    lm = toy_lm(VOCAB)
    with pytest.raises(ValueError, match="mode"):
        canonical_lm_scores(lm, [""], ["ab"], mode="sideways")
    with pytest.raises(ValueError, match="empty continuation"):
        canonical_lm_scores(lm, [""], [""])
    with pytest.raises(ValueError, match="contexts"):
        canonical_lm_scores(lm, ["", ""], ["ab"])


def test_canonical_generation_draws_the_local_model_on_a_toy():
    """Every draw is canonical, and the text a seed draws is drawn as often as the local model says."""
    from ppl_tok.infer.canonical_lm import canonical_generate

    lm = toy_lm(VOCAB)
    steps = CanonicalSteps(VOCAB)
    n = 400
    draws = [canonical_generate(lm, "", 64, seed=s, steps=steps) for s in range(n)]
    assert all(d.stopped == "end" and steps.is_canonical(d.tokens) for d in draws)
    top = max({tuple(d.tokens) for d in draws}, key=lambda t: sum(tuple(d.tokens) == t for d in draws))
    u = top
    row = lm._dist((0,) + u)
    allowed = [float(row[b]) for b in range(1, len(VOCAB)) if u + (b,) in PREFIXES] + [float(row[0])]
    p = math.exp(_brute_local(lm, top) + float(row[0]) - _lse(allowed))
    hits = sum(tuple(d.tokens) == top for d in draws)
    assert abs(hits / n - p) < 4 * math.sqrt(p * (1 - p) / n)
    same = canonical_generate(lm, "", 64, seed=3, steps=steps)
    assert same.tokens == draws[3].tokens and same.log_prob == draws[3].log_prob  # seeded


def test_canonical_generation_on_smollm2_is_canonical_and_seeded(smollm2):
    """SmolLM2: the prompt's canonical tokens and the drawn ones are the encoding of their text (encode(decode(v))
    == v), for several seeds; the same seed draws the same tokens; the local log-prob is at least the plain one."""
    from ppl_tok.infer.canonical_lm import canonical_generate

    prompt = "The capital of France is"
    head = smollm2.vocab.encode(prompt)
    for seed in range(4):
        g = canonical_generate(smollm2, prompt, 24, seed=seed)
        assert len(g.text.encode()) <= 24 and g.tokens
        assert smollm2.vocab.encode(prompt + g.text) == head + g.tokens, (seed, g.text)
        assert g.log_prob >= g.plain - 1e-9
    again = canonical_generate(smollm2, prompt, 24, seed=1)
    assert again.tokens == canonical_generate(smollm2, prompt, 24, seed=1).tokens
    with pytest.raises(ValueError, match="max_bytes"):
        canonical_generate(smollm2, prompt, 0)
