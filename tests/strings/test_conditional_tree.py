"""The conditional through the token tree: brute force over exactly the token sequences each unit's branch covers
(both events), the exhaustive walk when every head is empty, certified brackets under pruning, each factor the
walk restricted to the same head, and LM calls bounded by the alternatives, not by the continuation's length."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok.common.logspace import logsumexp
from ppl_tok.scorings import PAIR, Pair, ScoringConfig
from ppl_tok.strings import StringSearchConfig
from ppl_tok.strings.conditional import EVENTS, conditionals_many, string_conditional
from ppl_tok.strings.conditional_tree import conditionals_tree, tree_units
from ppl_tok.strings.surprisal import WordRules
from ppl_tok.strings.tree import TokenTree
from tests.strings.test_state import WIDE, brute_prefix, history_lm
from tests.strings.test_surprisal import VOCAB, byte_spans
from tests.strings.test_tree import brute_exact_after, covered_head

ONE_LEVEL = TokenTree(detour_share=None)  # the canonical heads' branches only
BOUNDARY = WordRules().boundary_chars


def brute_conditional(lm, prompt: str, text: str, event: str, back_off: int) -> float:
    """sum over the continuation's units of log P(E_k | E_{k-1}, BOS h_k), each by enumerating the token sequences
    after the unit's canonical head h_k."""
    data = (prompt + text).encode()
    spans = byte_spans(prompt + text, tree_units(prompt, text))
    ids = lm.canonical(prompt + text)
    total = 0.0
    for k in range(1 if prompt else 0, len(spans)):
        r = covered_head(lm, data, spans[k][0], back_off)
        head = tuple(ids[:r])
        start = len(b"".join(lm.vocab[t] for t in head))

        def logp(u: int) -> float:
            if u < 0:
                return 0.0
            x = data[start:spans[u][1]]
            if u == len(spans) - 1 and event == "boundary":
                return logsumexp([brute_prefix(lm, x + c.encode(), head) for c in BOUNDARY]
                                 + [brute_exact_after(lm, x, head)])
            return brute_prefix(lm, x, head)

        total += logp(k) - logp(k - 1)
    return total


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 9), st.text("ab .", max_size=5), st.text("ab .", min_size=1, max_size=6),
       st.sampled_from(EVENTS), st.sampled_from([0, 1, 3]))
def test_tree_equals_brute_force_over_the_sequences_it_covers(seed, prompt, text, event, back_off):
    lm = history_lm(seed, VOCAB)
    (got,) = conditionals_tree(lm, [prompt], [text], config=WIDE, event=event,
                               tree=TokenTree(back_off, detour_share=None))
    truth = brute_conditional(lm, prompt, text, event, back_off)
    assert got.estimate == pytest.approx(min(0.0, truth), abs=1e-9)
    assert got.lower - 1e-9 <= truth <= got.upper + 1e-9 and got.width < 1e-9  # unpruned: the bracket is the figure
    assert got.event == event and got.prefill == "tree" and math.isfinite(got.estimate)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 9), st.text("ab .", max_size=5), st.text("ab .", min_size=1, max_size=6),
       st.sampled_from(EVENTS), st.sampled_from([(2, 1.0), (1, 0.5), (3, 3.0)]))
def test_pruned_brackets_hold_the_brute_force_figure(seed, prompt, text, event, beam_prune):
    lm = history_lm(seed, VOCAB)
    beam, prune = beam_prune
    (got,) = conditionals_tree(lm, [prompt], [text], config=StringSearchConfig(beam=beam, prune=prune), event=event,
                               tree=ONE_LEVEL)
    truth = brute_conditional(lm, prompt, text, event, 0)
    assert got.lower - 1e-9 <= truth <= got.upper + 1e-9


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 9), st.text("ab .", max_size=5), st.text("ab .", min_size=1, max_size=6),
       st.sampled_from(EVENTS))
def test_a_back_off_past_the_text_is_the_exhaustive_walk(seed, prompt, text, event):
    """Every head empty: the factors telescope to the walk's conditional, and the bracket holds the exact one."""
    lm = history_lm(seed, VOCAB)
    (walk,) = conditionals_many(lm, [prompt], [text], config=WIDE, event=event)
    (tree,) = conditionals_tree(lm, [prompt], [text], config=WIDE, event=event,
                                tree=TokenTree(back_off=100, detour_share=None))
    assert tree.estimate == pytest.approx(walk.estimate, abs=1e-9)
    assert tree.lower - 1e-9 <= walk.estimate <= tree.upper + 1e-9 and tree.head_bytes == 0


def test_batched_pairs_equal_each_alone():
    lm = history_lm(5, VOCAB)
    prompts, texts = ["ab b", "ab b", "a"], ["a ba", " b", "b ab."]
    together = conditionals_tree(lm, prompts, texts, config=WIDE)
    for p, t, got in zip(prompts, texts, together):
        (alone,) = conditionals_tree(history_lm(5, VOCAB), [p], [t], config=WIDE)
        assert got.estimate == pytest.approx(alone.estimate, abs=1e-12)
        assert (got.lower, got.upper) == pytest.approx((alone.lower, alone.upper), abs=1e-12)


def test_lm_calls_are_bounded_by_the_alternatives_not_the_continuation():
    """The walk's calls grow with the continuation; the tree's, past the canonical column's, do not."""
    config = StringSearchConfig()
    walked, branched = [], []
    for n in (1, 3, 12):
        prompt, text = "ab ba. a", "b ab. a b" * n + " ab"
        lm = history_lm(3, VOCAB)
        lm.token_log_probs_after([lm.prefix_ids("")], [lm.canonical(prompt + text)])  # the column alone
        column = lm.stats.calls
        lm = history_lm(3, VOCAB)
        conditionals_tree(lm, [prompt], [text], config=config, tree=ONE_LEVEL)
        branched.append(lm.stats.calls - column)
        lm = history_lm(3, VOCAB)
        conditionals_many(lm, [prompt], [text], config=config)
        walked.append(lm.stats.calls - column)
    assert branched[1] == branched[2] <= 10 and branched[0] <= branched[1]  # the longest tail: a unit, its reach
    assert walked[2] > 4 * walked[0]


def test_search_reaches_the_tree_from_the_scoring_and_lm_eval():
    from ppl_tok.integrations.lm_eval_params import ModelArgumentError, checked_parameters

    lm = history_lm(3, VOCAB)
    pair = Pair("ab b", "a ba", group=(0,), choice=0)
    (tree,) = conditionals_tree(lm, ["ab b"], ["a ba"], config=ScoringConfig("conditional", level=PAIR).search,
                                event="boundary")
    for values in ({"search": "tree"}, {"searcher": "tree"}):
        config = ScoringConfig("conditional", level=PAIR, **values)
        (got,) = config.implementation.score_pairs(lm, [pair], config)
        assert got.estimate == pytest.approx(tree.estimate, abs=1e-12) and got.greedy is None
    assert ScoringConfig("conditional", level=PAIR).searcher == "walk"  # the walk stays the default
    assert checked_parameters({"search": "tree"}) == {"searcher": "tree"}
    with pytest.raises(ModelArgumentError, match="search='bush'"):
        checked_parameters({"search": "bush"})
    with pytest.raises(ValueError, match="expected one of walk, tree, got 'bush'"):
        ScoringConfig("conditional", level=PAIR, search="bush")
    with pytest.raises(ValueError, match="give search or searcher, not both"):
        ScoringConfig("conditional", level=PAIR, search="tree", searcher="walk")


def test_bad_input_is_named():
    lm = history_lm(3, VOCAB)
    with pytest.raises(ValueError, match="pair 1: .*non-empty"):
        conditionals_tree(lm, ["a", "b"], ["a", ""])
    with pytest.raises(ValueError, match="event must be one of"):
        conditionals_tree(lm, ["a"], ["b"], event="word")
    with pytest.raises(ValueError, match="2 prompts but 1 texts"):
        conditionals_tree(lm, ["a", "b"], ["b"])


def walk_factors(lm, prompt: str, text: str, event: str, config: StringSearchConfig) -> float:
    """The byte-synchronous walk restricted to the tree's paths: per unit of the continuation, the walk's
    conditional of the unit after the tail from its canonical head, the head as token context."""
    data = (prompt + text).encode()
    spans = byte_spans(prompt + text, tree_units(prompt, text))
    ids = lm.canonical(prompt + text)
    total = 0.0
    for k in range(1 if prompt else 0, len(spans)):
        r = covered_head(lm, data, spans[k][0], 0)
        start = len(b"".join(lm.vocab[t] for t in ids[:r]))
        a, b = spans[k]
        total += string_conditional(lm, data[start:a].decode(), data[a:b].decode(), context=list(ids[:r]),
                                    config=config, event=event if k == len(spans) - 1 else "prefix").estimate
    return total


@pytest.mark.parametrize("event", EVENTS)
def test_each_factor_is_the_walk_from_the_same_head(event):
    """The tree's sum equals the walk restricted to the same paths (each factor's walk from its head)."""
    lm = history_lm(4, VOCAB)
    prompt, text = "ab ba. a", "b ab ba a."
    (got,) = conditionals_tree(lm, [prompt], [text], config=WIDE, event=event, tree=ONE_LEVEL)
    assert got.estimate == pytest.approx(walk_factors(lm, prompt, text, event, WIDE), abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("event", EVENTS)
def test_smollm2_tree_equals_the_walk_restricted_to_the_same_paths(smollm2, event):
    prompts = ["To fight Iv", "Q: Which is a conductor? A:"]
    texts = ["an Drago in Rocky", " a copper wire."]
    config = StringSearchConfig()
    got = conditionals_tree(smollm2, prompts, texts, config=config, event=event, tree=ONE_LEVEL)
    for p, t, g in zip(prompts, texts, got):
        assert g.estimate == pytest.approx(walk_factors(smollm2, p, t, event, config), abs=2e-4)
        assert g.lower - 1e-9 <= g.estimate <= g.upper + 1e-9


@pytest.mark.slow
def test_smollm2_lm_calls_stay_bounded_with_detour_roots(smollm2):
    """With the default tree (detour roots) on the real LM, whose backend runs the detours' canonical continuations
    in one batched call: a continuation four times as long costs a few calls more, the walk's about three times."""
    prompt = "Q: Kendall opened their mouth to speak. What will Kendall want to do next?\nA:"
    config = StringSearchConfig(extend_threshold=1e-4)
    calls = {}
    for n in (1, 4):
        text = " tell Kendall's friends about Jordan and Casey" * n
        for name, score in (("tree", lambda: conditionals_tree(smollm2, [prompt], [text], config=config)),
                            ("walk", lambda: conditionals_many(smollm2, [prompt], [text], config=config))):
            smollm2.clear_cache()
            before = smollm2.stats.calls
            score()
            calls[name, n] = smollm2.stats.calls - before
    assert calls["tree", 4] <= calls["tree", 1] + 12 and calls["tree", 4] < calls["walk", 4] / 3
    assert calls["walk", 4] > 2 * calls["walk", 1]
