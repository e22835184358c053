"""A text's marginal through the token tree: brute force over exactly the cut-respecting tokenizations it sums,
certified brackets under pruning, the canonical floor, and LM calls bounded by the longest segment."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings import StringSearchConfig
from ppl_tok.strings.tree_marginal import CUT_BEFORE, segment_cuts, tree_marginals
from tests.strings.test_state import WIDE, history_lm, tokenizations
from tests.strings.test_surprisal import VOCAB


def brute_cuts(lm, text: str, segment_bytes: int) -> list[int]:
    """The segments' ends from the definition: a canonical boundary before whitespace, far enough from the last."""
    data, ids = text.encode(), lm.canonical(text)
    out, at, last = [], 0, 0
    for r, t in enumerate(ids[:-1], 1):
        at += len(lm.vocab[t])
        if chr(data[at]) in " \t\n\r" and at - last >= max(1, segment_bytes):
            out.append(r)
            last = at
    return out + [len(ids)]


def brute_tree_marginal(lm, text: str, context: tuple[int, ...], segment_bytes: int) -> float:
    """F: the sum over every cut-respecting tokenization (w_1 .. w_m) of prod_j p(w_j | BOS context v_{<=r_{j-1}})."""
    data, ids = text.encode(), lm.canonical(text)
    cuts = brute_cuts(lm, text, segment_bytes)
    total, r0, start = 0.0, 0, 0
    for r1 in cuts:
        end = start + sum(len(lm.vocab[t]) for t in ids[r0:r1])
        head = context + tuple(ids[:r0])
        total += logsumexp([lm.log_prob(w, head) for w in tokenizations(data[start:end], lm.vocab)])
        r0, start = r1, end
    return total


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=10).filter(lambda t: t[0] not in " ."),
       st.sampled_from([0, 1, 3, 100]), st.sampled_from([(), (2,), (5, 1)]))
def test_tree_marginal_equals_brute_force_over_the_cut_respecting_tokenizations(seed, text, segment_bytes, context):
    lm = history_lm(seed, VOCAB)
    [m] = tree_marginals(lm, [text], [context], WIDE, segment_bytes)
    assert list(m.cuts) == brute_cuts(lm, text, segment_bytes)
    assert m.estimate == pytest.approx(brute_tree_marginal(lm, text, context, segment_bytes), abs=1e-9)
    assert m.canonical == pytest.approx(lm.log_prob(lm.canonical(text), context), abs=1e-9)
    assert m.lower - 1e-9 <= m.estimate <= m.upper + 1e-9 and m.upper - m.lower < 1e-9  # unpruned: exact
    assert m.estimate >= m.canonical - 1e-12


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=12).filter(lambda t: t[0] not in " ."))
def test_one_segment_is_the_exact_marginal(seed, text):
    """A segment as long as the text: F is log p(x | c), the sum over every tokenization of x."""
    lm = history_lm(seed, VOCAB)
    [m] = tree_marginals(lm, [text], [()], WIDE, 10_000)
    assert m.cuts == (len(lm.canonical(text)),)
    truth = logsumexp([lm.log_prob(v) for v in tokenizations(text.encode(), lm.vocab)])
    assert m.estimate == pytest.approx(truth, abs=1e-9)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=12).filter(lambda t: t[0] not in " ."),
       st.sampled_from([(2, 1.0), (1, 0.5), (3, 3.0)]), st.sampled_from([None, 0.1, 0.5]))
def test_pruned_and_lazy_brackets_hold_the_brute_force_figure(seed, text, beam_prune, lazy):
    lm = history_lm(seed, VOCAB)
    beam, prune = beam_prune
    config = StringSearchConfig(beam=beam, prune=prune, **({} if lazy is None else {"extend_threshold": lazy}))
    [m] = tree_marginals(lm, [text], [()], config, 0)
    truth = brute_tree_marginal(lm, text, (), 0)
    assert m.lower - 1e-9 <= truth <= m.upper + 1e-9
    assert m.canonical - 1e-12 <= m.estimate <= truth + 1e-9  # the mass found: a floor on F, above canonical


def test_batched_texts_equal_each_alone():
    lm = history_lm(4, VOCAB)
    texts, contexts = ["ab ba. a", "b a ab", "a b. ba ab b"], [(), (3,), ()]
    together = tree_marginals(lm, texts, contexts, WIDE, 2)
    alone = [tree_marginals(history_lm(4, VOCAB), [t], [c], WIDE, 2)[0] for t, c in zip(texts, contexts)]
    assert [m.estimate for m in together] == pytest.approx([m.estimate for m in alone], abs=1e-12)


def test_lm_calls_are_bounded_by_the_longest_segment_not_the_text():
    """Past the canonical column (a toy LM runs it one position per call), the calls do not grow with the text."""
    calls = []
    for n in (1, 4, 16):
        text = "ab ba. a b " * n + "ab"
        lm = history_lm(3, VOCAB)
        lm.token_log_probs_after([lm.prefix_ids()], [lm.canonical(text)])
        column = lm.stats.calls
        lm = history_lm(3, VOCAB)
        tree_marginals(lm, [text], [()], StringSearchConfig(), 4)
        calls.append(lm.stats.calls - column)
    longest = 4 + 4  # a segment: at least 4 bytes, then to the next whitespace (at most 3 bytes on) and the cut
    assert calls[1] == calls[2] <= 1 + longest and calls[0] <= calls[1]


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_bad_segment_bytes_is_refused(bad):
    lm = history_lm(1, VOCAB)
    with pytest.raises(ValueError, match="segment_bytes must be a whole number of bytes >= 0"):
        segment_cuts(lm, b"ab ab", lm.canonical("ab ab"), bad)


def test_cuts_fall_before_whitespace_only():
    lm = history_lm(1, VOCAB)
    text = "ab ba. ab b a"
    data, ids = text.encode(), lm.canonical(text)
    ends = [sum(len(lm.vocab[t]) for t in ids[:r]) for r in segment_cuts(lm, data, ids, 0)]
    assert ends[-1] == len(data) and all(data[e] in CUT_BEFORE for e in ends[:-1])
