"""Generation from the LM over strings, and ensembles across tokenizers."""

import math
from dataclasses import replace

import pytest
import torch

from ppl_tok import FunctionLM, Vocabulary
from ppl_tok.strings import StringSearchConfig, initial
from ppl_tok.strings.ensemble import Ensemble
from ppl_tok.strings.generate import generate, nucleus

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab", "ba", "aba", "bb", "abb", "bab"])
OTHER = Vocabulary.from_tokens(["b", None, "a", "aa", "bba", "ab"])  # another tokenizer of the same strings
WIDE = StringSearchConfig(beam=10_000, prune=math.inf)


def history_lm(seed: int, vocab: Vocabulary = VOCAB, bos_id: int | None = 0, end: float = -2.0) -> FunctionLM:
    def fn(p):
        row = [float((7 * len(p) + 3 * sum(p) + t * seed) % 5) - 2.0 for t in range(len(vocab))]
        for t in vocab.special_ids:
            row[t] = end
        return row
    return FunctionLM(vocab, fn, bos_id=bos_id, log=True)


def test_greedy_takes_the_most_probable_byte_each_time():
    lm = history_lm(3)
    result = generate(lm, "ab", 5, greedy=True, config=WIDE)
    state = initial(lm, "ab", config=WIDE)
    expected = bytearray()
    for _ in range(len(result.data) + (result.stopped == "end")):
        dist = state.next_byte_log_probs().log_probs
        b = int(torch.argmax(dist))
        if b == 256:
            break
        expected.append(b)
        state.extend(b)
    assert result.data == bytes(expected)
    assert len(result.log_probs) == len(result.data)


@pytest.mark.slow  # 2,000 seeded generations per case: 82-223 s a case in the loaded profile (issue 45)
@pytest.mark.parametrize("mode, share", [("bytes", 0.0), ("tokens", 0.0), ("bytes", 0.02)])
def test_sampling_follows_the_string_distribution(mode, share):
    """Two bytes (or the end) after a prompt cut inside tokens: frequencies against the chain of next-byte
    probabilities; "tokens" draws a covering of the prompt and then samples tokens, "bytes" byte by byte
    (``share`` > 0: with lazy extension, a forward only where a prefix with that share of the text's mass ends)."""
    lm = history_lm(2, end=-0.5)
    exact = {}
    first = initial(lm, "ab", config=WIDE).next_byte_log_probs().log_probs.exp()
    exact[b""] = float(first[256])
    for b in (97, 98):
        second = initial(lm, "ab" + chr(b), config=WIDE).next_byte_log_probs().log_probs.exp()
        exact[bytes([b])] = float(first[b] * second[256])
        for c in (97, 98):
            exact[bytes([b, c])] = float(first[b] * second[c])
    assert sum(exact.values()) == pytest.approx(1.0, abs=1e-9)
    n = 2000
    counts = dict.fromkeys(exact, 0)
    for seed in range(n):
        r = generate(lm, "ab", 2, seed=seed, config=replace(WIDE, extend_threshold=share), mode=mode)
        assert r.mode == mode and r.stopped == ("max-bytes" if len(r.data) == 2 else "end")
        counts[r.data] += 1
    for key, p in exact.items():  # within 4 standard errors (fixed seeds: deterministic)
        assert abs(counts[key] / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9, (key, counts[key] / n, p)


def test_same_seed_same_text_and_stop_strings_end_the_run():
    lm = history_lm(4, end=-8.0)
    one = generate(lm, "", 12, seed=5, config=WIDE)
    two = generate(lm, "", 12, seed=5, config=WIDE)
    assert one.data == two.data and one.log_probs == two.log_probs
    assert one.stopped == "max-bytes" and len(one.data) == 12
    stop = one.data[3:5].decode()
    cut = generate(lm, "", 12, seed=5, stop=[stop], config=WIDE)
    assert cut.stopped == "stop" and cut.data == one.data[: one.data.find(stop.encode())]


def test_the_end_of_the_string_stops_generation():
    lm = history_lm(1, end=3.0)  # the special token dominates
    result = generate(lm, "ab", 50, greedy=True, config=WIDE)
    assert result.stopped == "end" and len(result.data) < 50


def test_nucleus_keeps_the_smallest_set_holding_top_p():
    lp = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64).log()
    kept = nucleus(lp, 1.0, 0.7).exp()
    assert kept.tolist() == pytest.approx([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0])
    assert nucleus(lp, 2.0).exp().sum().item() == pytest.approx(1.0)


def test_bad_arguments_are_clear_errors():
    lm = history_lm(1)
    for kw, match in [(dict(max_bytes=0), "max_bytes"), (dict(temperature=0.0), "temperature"),
                      (dict(top_p=1.5), "top_p"), (dict(stop=[""]), "stop"), (dict(mode="fast"), "mode"),
                      (dict(mode="tokens", greedy=True), "mode 'tokens'")]:
        with pytest.raises(ValueError, match=match):
            generate(lm, "a", **{"max_bytes": 3, **kw})
    with pytest.raises(ValueError, match="kind"):
        Ensemble([initial(lm)], kind="average")
    with pytest.raises(ValueError, match="same bytes"):
        Ensemble([initial(lm, "a"), initial(lm, "b")])


@pytest.mark.parametrize("kind,weights", [("mixture", None), ("mixture", [0.2, 0.8]), ("product", [0.5, 0.5])])
def test_an_ensemble_of_a_model_with_itself_is_the_model(kind, weights):
    lm = history_lm(3)
    ens = Ensemble.of([lm, lm], "ab", kind, weights, config=WIDE)
    alone = initial(lm, "ab", config=WIDE)
    for b in b"bab":
        assert torch.allclose(ens.next_byte_log_probs(), alone.next_byte_log_probs().log_probs, atol=1e-12)
        ens.extend(b)
        alone.extend(b)


def test_the_mixture_is_bayesian_across_tokenizers():
    """The product of the mixture's next-byte probabilities is the prior-weighted sum of prefix probabilities."""
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    prior = [0.3, 0.7]
    ens = Ensemble.of([a, b], "", "mixture", prior, config=WIDE)
    total = 0.0
    text = b"abbab"
    for byte in text:
        total += float(ens.next_byte_log_probs()[byte])
        ens.extend(byte)
    prefixes = [initial(lm, text, config=WIDE).prefix_log_prob().estimate for lm in (a, b)]
    assert total == pytest.approx(math.log(sum(p * math.exp(q) for p, q in zip(prior, prefixes))), abs=1e-9)
    w = ens.member_weights()
    assert float(w.sum()) == pytest.approx(1.0) and float(w[1]) != pytest.approx(0.7)
    product = Ensemble.of([a, b], "ab", "product", config=WIDE).next_byte_log_probs()
    assert float(product.exp().sum()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("kind, weights", [("mixture", [0.3, 0.7]), ("product", [1.0, 0.5])])
def test_ensemble_bounds_hold_under_pruning_and_close_without_it(kind, weights):
    """Walks with a pruning beam: the certified bounds contain the unpruned ensemble's exact values at every byte;
    unpruned, the bounds equal the estimate."""
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    narrow = StringSearchConfig(beam=1, prune=0.5)
    ens = Ensemble.of([a, b], "", kind, weights, config=narrow)
    exact = Ensemble.of([a, b], "", kind, weights, config=WIDE)
    pruned = 0
    for byte in b"abbabab":
        got, truth = ens.next_bytes(), exact.next_bytes()
        assert torch.allclose(truth.lower, truth.log_probs, atol=1e-9)
        assert torch.allclose(truth.upper, truth.log_probs, atol=1e-9)
        assert bool((got.lower <= truth.log_probs + 1e-9).all()) and bool((truth.log_probs <= got.upper + 1e-9).all())
        assert bool((got.lower <= got.log_probs + 1e-9).all()) and bool((got.log_probs <= got.upper + 1e-9).all())
        assert not any(bool(t.isnan().any()) for t in (got.lower, got.upper, got.log_probs))
        pruned += any(s.pruned_log_mass() > -math.inf for s in ens.states)
        ens.extend(byte)
        exact.extend(byte)
    assert pruned  # the narrow beam did prune, so the bounds were tested where they matter


def test_an_ensemble_generates_byte_by_byte():
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    ens = Ensemble.of([a, b], "ab", config=WIDE)
    expected = ens.next_byte_log_probs().argmax().item()
    out = generate(ens, "", 3, greedy=True)
    assert out.mode == "bytes" and (out.data[:1] == bytes([expected]) or (expected == 256 and out.stopped == "end"))
    with pytest.raises(ValueError, match="mode 'tokens'"):
        generate(Ensemble.of([a, b], "a", config=WIDE), "", 2, mode="tokens")


def test_tokens_mode_stops_at_the_context_window_as_bytes_mode_does():
    """Issue 37 finding 5: tokens mode ran past the window where bytes mode raised ContextLengthError."""
    from types import SimpleNamespace

    from ppl_tok.strings import ContextLengthError

    lm = history_lm(3, end=-30.0)  # the string almost never ends
    lm.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=6))
    for mode in ("tokens", "bytes"):
        with pytest.raises(ContextLengthError, match="context window of 6"):
            generate(lm, "a", 40, seed=0, mode=mode)


def test_tokens_mode_reports_a_certified_floor_on_the_log_probability():
    from ppl_tok.strings import string_conditional
    from tests.strings.test_state import brute_prefix

    lm = history_lm(5)
    for seed in range(6):
        g = generate(lm, "ab", 4, seed=seed, mode="tokens", config=StringSearchConfig(beam=2, prune=2.0))
        exact = brute_prefix(lm, b"ab" + g.data) - brute_prefix(lm, b"ab")
        assert g.log_prob is None and g.tokens_log_prob <= 0 and g.log_prob_lower <= exact + 1e-12
        wide = string_conditional(lm, "ab", g.text, config=StringSearchConfig(beam=10_000, prune=math.inf),
                                  event="prefix")
        assert wide.lower <= exact <= wide.upper
    with pytest.raises(ValueError, match="generated_bytes"):
        generate(lm, "ab", 1 << 17)


def test_lazy_byte_generation_runs_fewer_forwards_and_keeps_the_text_probable():
    """With lazy extension a generated byte costs a forward only where a probable prefix ends: fewer
    forwards than extending every kept prefix, and each byte's log-prob under the lazy estimate stays
    within its certified bracket of the exact next-byte probability."""
    lm = history_lm(3, end=-4.0)
    full = generate(lm, "ab", 12, seed=1, config=StringSearchConfig(beam=4))
    lazy = generate(lm, "ab", 12, seed=1, config=StringSearchConfig(beam=4, extend_threshold=0.1))
    assert lazy.forwards < full.forwards
    state = initial(lm, "ab", config=StringSearchConfig(beam=4, extend_threshold=0.1))
    exact = initial(lm, "ab", config=WIDE)
    for b in lazy.data:
        nb, truth = state.next_byte_log_probs(), exact.next_byte_log_probs().log_probs[b]
        assert float(nb.lower[b]) - 1e-9 <= float(truth) <= float(nb.upper[b]) + 1e-9
        state.extend(b)
        exact.extend(b)
