"""Why the token tree states no bracket on the exhaustive surprisal (docs/strings.md, "No bracket over all
tokenizations"): two LMs that agree on every row the tree reads, but not after a history it leaves out, give the
tree the same figures and the exhaustive definition different ones. So no bound computed from the tree's rows
alone can hold the exhaustive figure except the trivial one (the left-out mass's continuation anywhere in [0, 1])."""

import math

import pytest

from ppl_tok.lm.toy import FunctionLM
from ppl_tok.strings.surprisal import WordRules, surprisals, word_spans
from ppl_tok.strings.tree import TokenTree
from tests.strings.test_state import WIDE, history_lm
from tests.strings.test_surprisal import LN2, VOCAB, brute_events, byte_spans

TEXT = "ab ab ab"  # canonically "ab" " ab" " ab"; the history "a" "b" splits the first word
SPLIT = (0, 1, 2)  # BOS "a" "b": outside the last unit's branch (its head is the canonical "ab")


def _variant(seed: int, toward: str) -> FunctionLM:
    """history_lm(seed), except after the split history once it spells more than 5 bytes (past every row the
    branches read): all mass on tokens that continue a word (``"word"``) or on "." (``"boundary"``)."""
    base = history_lm(seed, VOCAB)
    surfaces = VOCAB.surfaces

    def fn(p):
        spelled = sum(len(surfaces[t] or b"") for t in p)
        if p[:3] == SPLIT and spelled > 5:
            keep = {b"a", b"b", b"ab", b"ba"} if toward == "word" else {b"."}
            return [0.0 if surfaces[t] in keep else -math.inf for t in range(len(VOCAB))]
        return base.fn(p)

    return FunctionLM(VOCAB, fn, bos_id=0, log=True)


@pytest.mark.parametrize("seed", [1, 3, 6])
@pytest.mark.parametrize("tree", [TokenTree(detour_share=None), TokenTree(detour_share=0.99)],
                         ids=["one-level", "detours-too-light"])
def test_the_tree_cannot_see_what_the_exhaustive_figure_depends_on(seed, tree):
    rules = WordRules()
    spans = byte_spans(TEXT, word_spans(TEXT, rules))
    lms = [_variant(seed, "word"), _variant(seed, "boundary")]
    trees = [surprisals(lm, TEXT, config=WIDE, search=tree) for lm in lms]
    exhaustive = []
    for lm in lms:
        events = brute_events(lm, TEXT, spans, rules)
        exhaustive.append([-(b - a) / LN2 for a, b in zip(events, events[1:])])
    # the tree reads the same rows under both LMs: the same figures and brackets, to the last bit
    assert [(r.surprisal, r.lower, r.upper) for r in trees[0]] == [(r.surprisal, r.lower, r.upper) for r in trees[1]]
    # ... while the exhaustive figure of the last word moves, beyond the tree's (exact, zero-width) bracket
    last = trees[0][-1]
    assert abs(exhaustive[0][-1] - exhaustive[1][-1]) > 0.01  # (0.03 to over a bit by seed)
    outside = [e[-1] for e in exhaustive if not last.lower - 1e-9 <= e[-1] <= last.upper + 1e-9]
    assert outside, (last, exhaustive)
    # the earlier words' figures do not depend on the changed rows: there the two definitions agree as before
    assert exhaustive[0][:-1] == pytest.approx(exhaustive[1][:-1], abs=1e-12)
