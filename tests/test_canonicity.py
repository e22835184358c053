import pytest

from ppl_tok import FunctionLM, Vocabulary
from ppl_tok.canonicity import canonicity

VOCAB = Vocabulary.from_tokens([None, "a", "b", "aa"])  # canonical = longest match


def test_canonicity_on_a_toy_lm_with_known_answers():
    # always "a": after two tokens "aa" is re-encoded as [aa], never canonical again at even lengths
    lm = FunctionLM(VOCAB, lambda p: [0, 1, 0, 0], bos_id=0)
    r = canonicity(lm, num_samples=5, max_tokens=4, progress=False)
    assert r.canonical == [1.0, 0.0, 0.0, 0.0]
    # only "b" or "aa": every sequence is canonical
    lm = FunctionLM(VOCAB, lambda p: [0, 0, 1, 1], bos_id=0)
    r = canonicity(lm, num_samples=20, max_tokens=5, seed=3, progress=False)
    assert r.canonical == [1.0] * 5 and r.undecodable == [0.0] * 5


def test_special_tokens_are_never_sampled_and_seed_repeats():
    lm = FunctionLM(VOCAB, lambda p: [10, 1, 1, 1], bos_id=0)  # mass on BOS is masked out
    r = canonicity(lm, num_samples=10, max_tokens=3, seed=1, progress=False)
    assert all(0 not in s for s in r.samples)
    assert r == canonicity(lm, num_samples=10, max_tokens=3, seed=1, progress=False)
    with pytest.raises(ValueError):
        canonicity(lm, num_samples=0)
