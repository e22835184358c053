"""Ensembles over strings: EnsembleNextBytes answers what NextBytes answers; conditionals under an ensemble."""

import inspect
import math

import pytest
import torch

from ppl_tok import Vocabulary
from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings import StringSearchConfig, initial
from ppl_tok.strings.ensemble import Ensemble, EnsembleNextBytes, ensemble_conditional
from ppl_tok.strings.state import NextBytes
from tests.strings.test_state import WIDE, brute_exact, brute_prefix, history_lm

OTHER = Vocabulary.from_tokens(["b", None, "a", "aa", "bba", "ab"])  # another tokenizer of the same strings
NARROW = StringSearchConfig(beam=1, prune=0.5)


def brute_conditional(lms, weights, kind: str, prompt: bytes, text: bytes) -> float:
    """log p(text | prompt) under the ensemble, from brute-force prefix probabilities of each member.

    Mixture: log sum_k pi_k P_k(xy) - log sum_k pi_k P_k(x). Product: the chain over the bytes of y of
    prod_k p_k(b | x)^alpha_k normalised over the outcomes a, b and the end (the toy alphabet).
    """
    if kind == "mixture":
        pi = [w / sum(weights) for w in weights]
        return (logsumexp(math.log(p) + brute_prefix(lm, prompt + text) for p, lm in zip(pi, lms))
                - logsumexp(math.log(p) + brute_prefix(lm, prompt) for p, lm in zip(pi, lms)))
    total = 0.0
    for i, byte in enumerate(text):
        x = prompt + text[:i]
        scores = {}
        for b in (b"a", b"b", None):
            scores[b] = sum(alpha * ((brute_prefix(lm, x + b) if b is not None else brute_exact(lm, x))
                                     - brute_prefix(lm, x)) for alpha, lm in zip(weights, lms))
        total += scores[bytes([byte])] - logsumexp(scores.values())
    return total


def public_methods(cls) -> set[str]:
    """The public methods and properties of a class (its dataclass fields left out)."""
    return {n for n, v in inspect.getmembers(cls) if not n.startswith("_") and (callable(v) or isinstance(v, property))}


def test_ensemble_next_bytes_has_every_method_of_next_bytes():
    assert public_methods(NextBytes) <= public_methods(EnsembleNextBytes)
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    for kind in ("mixture", "product"):
        nb = Ensemble.of([a, b], "ab", kind, config=WIDE).next_bytes()
        top = nb.top(3)
        assert len(top) == 3 and [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        assert top[0][1] == pytest.approx(float(nb.log_probs.max()))
        assert nb.end == pytest.approx(float(nb.log_probs[256]))
        d = nb.to_dict()
        assert set(d["log_probs"]) == {("end" if i == 256 else str(i)) for i in range(257) if nb.log_probs[i] > -math.inf}
        assert (d["prefix"] is None) == (kind == "product")


def test_the_mixture_prefix_is_the_prior_weighted_sum_of_the_members():
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    prior = [0.25, 0.75]
    ens = Ensemble.of([a, b], "abba", "mixture", prior, config=WIDE)
    members = [initial(lm, "abba", config=WIDE).prefix_log_prob().estimate for lm in (a, b)]
    want = math.log(sum(p * math.exp(q) for p, q in zip(prior, members)))
    got = ens.prefix_log_prob()
    assert got.lower == pytest.approx(want, abs=1e-12) and got.upper == pytest.approx(want, abs=1e-12)
    assert ens.next_bytes().prefix.lower == pytest.approx(want, abs=1e-12)
    with pytest.raises(ValueError, match="no prefix probability"):
        Ensemble.of([a, b], "ab", "product", config=WIDE).prefix_log_prob()


@pytest.mark.parametrize("kind, weights", [("mixture", [0.3, 0.7]), ("product", [1.0, 0.5])])
def test_the_conditional_is_the_chain_of_next_bytes_and_its_bounds_hold_under_pruning(kind, weights):
    """Unpruned, log p(y | x) is the brute-force value (every tokenization of every member); pruned, the
    certified interval holds it."""
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    prompt, text = b"ab", b"babba"
    truth = brute_conditional([a, b], weights, kind, prompt, text)
    exact = ensemble_conditional(Ensemble.of([a, b], prompt, kind, weights, config=WIDE), text)
    assert exact.estimate == pytest.approx(truth, abs=1e-9)
    assert exact.lower == pytest.approx(truth, abs=1e-9) and exact.upper == pytest.approx(min(truth, 0.0), abs=1e-9)
    counted = []
    pruned = Ensemble.of([a, b], prompt, kind, weights, config=NARROW)
    got = ensemble_conditional(pruned, text, counted.append)
    assert sum(counted) == len(text) and bytes(pruned.data) == prompt + text
    assert got.lower - 1e-9 <= truth <= got.upper + 1e-9 and got.lower <= got.estimate <= got.upper <= 0.0
    assert any(s.pruned_log_mass() > -math.inf for s in pruned.states)  # the bounds were tested where they matter
    assert not any(math.isnan(x) for x in (got.lower, got.upper, got.estimate))


def test_an_ensemble_of_a_model_with_itself_conditions_as_the_model():
    from ppl_tok.strings.conditional import string_conditional

    lm = history_lm(3)
    alone = string_conditional(lm, "ab", "bab", config=WIDE, event="prefix")  # an ensemble's event
    for kind in ("mixture", "product"):
        got = ensemble_conditional(Ensemble.of([lm, lm], "ab", kind, config=WIDE), "bab")
        assert got.estimate == pytest.approx(alone.estimate, abs=1e-9)


def test_of_takes_a_context():
    a, b = history_lm(3), history_lm(2, OTHER, bos_id=1)
    ens = Ensemble.of([a, b], "ab", context="ba", config=WIDE)
    want = [initial(lm, "ab", "ba", WIDE).next_byte_log_probs().log_probs for lm in (a, b)]
    assert torch.allclose(Ensemble([initial(a, "ab", "ba", WIDE), initial(b, "ab", "ba", WIDE)]).next_byte_log_probs(),
                          ens.next_byte_log_probs())
    assert not torch.allclose(want[0], Ensemble.of([a], "ab", config=WIDE).next_byte_log_probs())
