"""The token tree off the canonical cache: brute force over exactly the token sequences each branch covers, the
exhaustive walk when the head is empty, certified brackets under pruning, and LM calls bounded by the tail."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings import StringSearchConfig
from ppl_tok.strings.surprisal import (FINALS, WordRules, canonical_surprisals, surprisal_batch,
                                      surprisals, word_spans)
from ppl_tok.strings.tree import TokenTree, search_tree
from tests.strings.test_state import WIDE, brute_prefix, history_lm, tokenizations
from tests.strings.test_surprisal import VOCAB, byte_spans

LN2 = math.log(2)
ONE_LEVEL = TokenTree(detour_share=None)  # the canonical heads' branches only


def brute_exact_after(lm, x: bytes, context) -> float:
    """log P(the output is exactly x | BOS context): every tokenization of x, then a token without a surface."""
    special = sorted(lm.vocab.special_ids)
    return logsumexp(lm.log_prob(v, context) + logsumexp(lm.state(lm.prefix_ids(context) + v).log_probs[special]
                                                         .tolist()) for v in tokenizations(x, lm.vocab))


def covered_head(lm, data: bytes, cut: int, back_off: int) -> int:
    """The head's canonical token count, from the definition (a token strictly longer than the rest that starts
    with it; the largest canonical boundary at or before min(reach, cut - W), not inside a character)."""
    reach = cut
    for s in range(cut):
        rest = data[s:cut]
        if any(f is not None and f.startswith(rest) and len(f) > len(rest) for f in lm.vocab.surfaces):
            reach = s
            break
    limit = min(reach, cut - back_off)
    ids, at, r = lm.canonical(data.decode()), 0, 0
    for j, t in enumerate(ids, 1):
        at += len(lm.vocab[t])
        if at > limit:
            break
        if at == len(data) or data[at] & 0xC0 != 0x80:
            r = j
    return r


def brute_tree(lm, text: str, spans, rules: WordRules, final: str, back_off: int) -> list[float]:
    """Per unit, -log2 P(E_k | E_{k-1}, BOS h_k) by enumerating the token sequences after the head h_k."""
    data = text.encode()
    ids = lm.canonical(text)
    boundary = rules.boundary_chars
    out = []
    for k, (a, b) in enumerate(spans):
        r = covered_head(lm, data, a, back_off)
        head = tuple(ids[:r])
        start = sum(len(lm.vocab[t]) for t in head)

        def event(u: int) -> float:
            if u < 0:
                return 0.0
            end = spans[u][1]
            x = data[start:end]
            if u == len(spans) - 1 and final != "boundary":
                return brute_exact_after(lm, x, head) if final == "end" else brute_prefix(lm, x, head)
            if u == len(spans) - 1 or data[end:].decode()[:1] in boundary:
                return logsumexp([brute_prefix(lm, x + c.encode(), head) for c in boundary]
                                 + [brute_exact_after(lm, x, head)])
            return brute_prefix(lm, x, head)

        out.append(-(event(k) - event(k - 1)) / LN2)
    return out


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=8), st.sampled_from(FINALS), st.sampled_from([0, 1, 3]))
def test_tree_equals_brute_force_over_the_sequences_it_covers(seed, text, final, back_off):
    lm = history_lm(seed, VOCAB)
    rules = WordRules()
    rows = surprisals(lm, text, config=WIDE, rules=rules, final=final, search=TokenTree(back_off, detour_share=None))
    spans = byte_spans(text, word_spans(text, rules))
    truth = brute_tree(lm, text, spans, rules, final, back_off)
    assert [r.surprisal for r in rows] == pytest.approx(truth, abs=1e-9)
    for r in rows:  # unpruned: the bracket is the figure (up to float64 rounding)
        assert r.lower - 1e-9 <= r.surprisal <= r.upper + 1e-9 and r.upper - r.lower < 1e-9
    assert [r.canonical for r in rows] == pytest.approx(canonical_surprisals(lm, text, rules=rules), abs=1e-12)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=8), st.sampled_from([(2, 1.0), (1, 0.5), (3, 3.0)]))
def test_pruned_brackets_hold_the_brute_force_figure(seed, text, beam_prune):
    lm = history_lm(seed, VOCAB)
    beam, prune = beam_prune
    rows = surprisals(lm, text, config=StringSearchConfig(beam=beam, prune=prune), search=ONE_LEVEL)
    truth = brute_tree(lm, text, byte_spans(text, word_spans(text, WordRules())), WordRules(), "boundary", 0)
    for r, t in zip(rows, truth):
        assert r.lower - 1e-9 <= t <= r.upper + 1e-9


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=9))
def test_a_back_off_past_the_text_is_the_exhaustive_walk(seed, text):
    """Every head empty: each branch is the walk of the text up to its unit, figure for figure."""
    lm = history_lm(seed, VOCAB)
    walk = surprisals(lm, text, config=WIDE)
    tree = surprisals(lm, text, config=WIDE, search=TokenTree(back_off=100, detour_share=None))
    assert [r.surprisal for r in tree] == pytest.approx([r.surprisal for r in walk], abs=1e-9)
    assert [b for r in tree for b in (r.lower, r.upper)] == pytest.approx([b for r in walk for b in (r.lower, r.upper)],
                                                                          abs=1e-9)


def test_lm_calls_are_bounded_by_the_tail_not_the_text():
    """The walk's calls grow with the text; the tree's, past the canonical column's, do not."""
    config = StringSearchConfig()
    walked, branched = [], []
    for n in (1, 3, 12):
        text = "ab ba. a b " * n + "ab"
        lm = history_lm(3, VOCAB)
        canonical_surprisals(lm, text)  # the canonical column alone (a toy LM runs it one position per call)
        column = lm.stats.calls
        lm = history_lm(3, VOCAB)
        surprisals(lm, text, config=config, search=ONE_LEVEL)
        branched.append(lm.stats.calls - column)
        lm = history_lm(3, VOCAB)
        surprisals(lm, text, config=config)
        walked.append(lm.stats.calls - column)
    assert branched[1] == branched[2] <= 8 and branched[0] <= branched[1]  # the longest tail: a unit, its reach
    assert walked[2] > 4 * walked[0]


def test_batched_texts_equal_each_alone_and_errors_stay_per_item():
    lm = history_lm(5, VOCAB)
    texts = ["ab ba. a", "b a ab", "a b. ba ab b"]
    together = surprisal_batch(lm, texts, config=WIDE, search="tree")
    for text, rows in zip(texts, together):
        alone = surprisals(history_lm(5, VOCAB), text, config=WIDE, search="tree")
        assert [r.surprisal for r in rows] == pytest.approx([r.surprisal for r in alone], abs=1e-12)
    bad = surprisal_batch(lm, ["ab", "a\u00e9x"], config=WIDE, search="tree")  # "x": no token spells it
    assert not isinstance(bad[0], Exception) and isinstance(bad[1], ValueError) and "unit" in str(bad[1])


@pytest.mark.parametrize("search, message", [("trees", "search must be one of walk, tree"),
                                             (TokenTree, "search must be one of")])
def test_bad_search_is_one_line(search, message):
    with pytest.raises(ValueError, match=message):
        search_tree(search)


@pytest.mark.parametrize("back_off", [-1, 1.5, True])
def test_bad_back_off_is_refused(back_off):
    with pytest.raises(ValueError, match="back_off must be a whole number of bytes"):
        TokenTree(back_off)


def _reference(lm, text: str, context, config, rules: WordRules, final: str = "boundary") -> list[float]:
    """Per word, the byte-synchronous walk restricted to the same paths: the tail after the branch's canonical
    head, walked with the head as token context, split into (the words before the unit, the unit)."""
    from ppl_tok.strings.tree import canonical_ends, plan

    data = text.encode()
    ids = lm.canonical(text)
    spans = byte_spans(text, word_spans(text, rules))
    ends = [0] + canonical_ends(lm, ids)
    prefix = list(lm.prefix_ids(context))[1:] if lm.bos_id is not None else list(lm.prefix_ids(context))
    out = []
    for b in plan(lm, data, ids, spans, ONE_LEVEL):
        tail = data[ends[b.r]: b.end].decode()
        cut = len(data[ends[b.r]: b.cut].decode())
        regions = [0, cut, len(tail)] if cut else [0, len(tail)]
        goes_on = b.unit < len(spans) - 1
        last = ("boundary" if data[b.end:].decode()[:1] in rules.boundary_chars else "none") if goes_on else final
        rows = surprisals(lm, tail, units=regions, context=prefix + list(ids[:b.r]), config=config, rules=rules,
                          final=last)
        out.append(rows[-1].surprisal)
    return out


@pytest.mark.slow
def test_smollm2_tree_equals_the_walk_restricted_to_the_same_paths(smollm2):
    from ppl_tok.datasets import BUNDLED_DATA, data_file, load_questions

    texts = [q.context for q in load_questions(data_file("openbookqa", "test", BUNDLED_DATA))[:1]]
    texts.append("The old man the boats, don't they?")
    config = StringSearchConfig()
    rules = WordRules()
    got = surprisal_batch(smollm2, texts, config=config, search=ONE_LEVEL)
    for text, rows in zip(texts, got):
        assert [r.surprisal for r in rows] == pytest.approx(_reference(smollm2, text, "", config, rules), abs=2e-4)
        assert all(r.lower - 1e-9 <= r.surprisal <= r.upper + 1e-9 for r in rows)


def brute_detours(lm, text: str, spans, tau: float, back_off: int = 0) -> list[tuple[tuple[int, ...], int]]:
    """The detours ``(g, b)`` by definition: for each unit's head ``v_{<=r}``, every tokenization of its tail up to a
    canonical boundary ``e_b`` (at most the unit's end) whose last token is not the canonical one at its start,
    holding at least ``tau`` of ``p(v_{<=b})``."""
    data = text.encode()
    ids = lm.canonical(text)
    ends = [0] + list(itertools.accumulate(len(lm.vocab[t]) for t in ids))
    canonical_at = {ends[j]: t for j, t in enumerate(ids)}
    found = {}
    for a, b_end in spans:
        r = covered_head(lm, data, a, back_off)
        for b in range(r + 1, len(ids) + 1):
            if ends[b] > b_end:
                break
            for t in tokenizations(data[ends[r]:ends[b]], lm.vocab):
                g = tuple(ids[:r]) + t
                if canonical_at.get(ends[b] - len(lm.vocab[g[-1]])) == g[-1]:
                    continue
                if lm.log_prob(g, ()) - lm.log_prob(tuple(ids[:b]), ()) >= math.log(tau):
                    found[g] = b
    return list(found.items())


def brute_tree_detours(lm, text: str, spans, rules: WordRules, final: str, tree: TokenTree,
                       roots=None) -> list[float]:
    """Per unit, -log2 [sum over roots h of P(E_k, h) / sum over roots h of P(E_{k-1}, h)]: the roots the canonical
    head and every detour (by definition) rejoining within ``D`` bytes before it, extended by the canonical tokens,
    or the detour roots given per unit."""
    data = text.encode()
    ids = lm.canonical(text)
    ends = [0] + list(itertools.accumulate(len(lm.vocab[t]) for t in ids))
    detours = brute_detours(lm, text, spans, tree.detour_share, tree.back_off) if roots is None else []
    boundary = rules.boundary_chars
    out = []
    for k, (a, b) in enumerate(spans):
        r = covered_head(lm, data, a, tree.back_off)
        heads = [tuple(ids[:r])] + ([g + tuple(ids[j:r]) for g, j in detours
                                     if k > 0 and j <= r and ends[r] - ends[j] <= tree.detour_reach]
                                    if roots is None else roots.get(k, []))

        def event(u: int, head) -> float:
            if u < 0:
                return 0.0
            end = spans[u][1]
            x = data[ends[r]:end]
            if u == len(spans) - 1 and final != "boundary":
                tail = brute_exact_after(lm, x, head) if final == "end" else brute_prefix(lm, x, head)
            elif u == len(spans) - 1 or data[end:].decode()[:1] in boundary:
                tail = logsumexp([brute_prefix(lm, x + c.encode(), head) for c in boundary]
                                 + [brute_exact_after(lm, x, head)])
            else:
                tail = brute_prefix(lm, x, head)
            return lm.log_prob(head, ()) + tail

        out.append(-(logsumexp([event(k, h) for h in heads]) - logsumexp([event(k - 1, h) for h in heads])) / LN2)
    return out


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=1, max_size=7), st.sampled_from(FINALS),
       st.sampled_from([(0, 1e-12, 64), (0, 0.3, 64), (1, 1e-12, 2), (0, 0.05, 0)]))
def test_detour_roots_equal_brute_force_over_the_sequences_they_cover(seed, text, final, setting):
    """One level: the detours the canonical heads' branches find, by definition (brute_detours)."""
    back_off, tau, reach = setting
    tree = TokenTree(back_off, detour_share=tau, detour_reach=reach, detour_depth=1, detour_roots=10_000,
                     detour_extend=None)
    lm = history_lm(seed, VOCAB)
    rows = surprisals(lm, text, config=WIDE, final=final, search=tree)
    spans = byte_spans(text, word_spans(text, WordRules()))
    truth = brute_tree_detours(lm, text, spans, WordRules(), final, tree)
    assert [r.surprisal for r in rows] == pytest.approx(truth, abs=1e-9)
    for r in rows:
        assert r.lower - 1e-9 <= r.surprisal <= r.upper + 1e-9 and r.upper - r.lower < 1e-9


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 9), st.text("ab .", min_size=2, max_size=7), st.sampled_from([(2, 1.0, None), (8, 12.0, 0.3)]))
def test_detour_brackets_under_pruning_hold_the_brute_force_figure(seed, text, setting):
    """The detours found by a pruned beam, then their branches pruned (or lazier): the bracket holds the figure
    over exactly the roots found, computed by brute force."""
    beam, prune, extend = setting
    tree = TokenTree(detour_share=0.05, detour_reach=64, detour_extend=extend)
    lm = history_lm(seed, VOCAB)
    found, roots = {}, {}
    import ppl_tok.strings.tree as tree_module

    real = tree_module.detour_branches

    def spy(lm_, contexts, ids, branches, detours, *rest):
        found.update({d.ids: d.b for d in detours})
        out = real(lm_, contexts, ids, branches, detours, *rest)
        for b in out:
            roots.setdefault(b.unit, []).append(b.ids)
        return out

    tree_module.detour_branches = spy
    try:
        rows = surprisals(lm, text, config=StringSearchConfig(beam=beam, prune=prune), search=tree)
    finally:
        tree_module.detour_branches = real
    spans = byte_spans(text, word_spans(text, WordRules()))
    truth = brute_tree_detours(lm, text, spans, WordRules(), "boundary", tree, roots=roots)
    ids = lm.canonical(text)
    for g, b in found.items():  # each root a detour by definition: off the canonical tokens, holding tau of them
        start = sum(len(lm.vocab[t]) for t in g[:-1])
        assert g != tuple(ids[:b]) and sum(len(lm.vocab[t]) for t in ids[:b]) == start + len(lm.vocab[g[-1]])
        assert lm.log_prob(g, ()) - lm.log_prob(tuple(ids[:b]), ()) >= math.log(tree.detour_share) - 1e-9
    for r, t in zip(rows, truth):
        assert r.lower - 1e-9 <= t <= r.upper + 1e-9


@pytest.mark.parametrize("field, value, message", [
    ("detour_share", 0.0, "detour_share must be a share in"), ("detour_share", 1.5, "detour_share must be"),
    ("detour_reach", -1, "detour_reach must be a whole number"), ("detour_extend", 1.0, "detour_extend must be"),
    ("detour_depth", 0, "detour_depth must be a whole number of levels"),
    ("detour_roots", 0, "detour_roots must be a whole number of roots")])
def test_bad_detour_settings_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        TokenTree(**{field: value})


def test_lm_calls_with_detours_are_bounded_by_the_tail_and_the_levels():
    """Outside the token-sequence scoring calls (the canonical column's and, per detour level, the roots' canonical
    continuations: one forward per length group on transformers; the toy LM's base class runs one position per
    call), the calls stay constant on texts of growing length, and there is one continuation call per level."""
    tree = TokenTree(detour_share=0.05, detour_reach=12, detour_roots=2)
    walks, continuations = [], []
    for n in (1, 3, 8):
        text = "ab ba. a b " * n + "ab"
        lm = history_lm(3, VOCAB)
        asked, inside = [], [0]
        real = lm.token_log_probs_after

        def counted(prefixes, seqs, keep_states=True):
            before = lm.stats.calls
            try:
                return real(prefixes, seqs, keep_states)
            finally:
                asked.append(len(prefixes))
                inside[0] += lm.stats.calls - before

        lm.token_log_probs_after = counted
        surprisals(lm, text, config=StringSearchConfig(), search=tree)
        walks.append(lm.stats.calls - inside[0])
        continuations.append(len(asked) - 1)  # (the first: the canonical column)
    assert all(c <= tree.detour_depth for c in continuations) and continuations[-1] >= 1
    assert walks[1] == walks[2] <= 2 + 8 * (1 + tree.detour_depth)


@pytest.mark.slow
def test_smollm2_detour_roots_equal_the_walks_restricted_to_the_same_paths(smollm2, monkeypatch):
    """Each unit's figure is the walks from each of its roots (the canonical head's, each detour root's, with the
    root as token context and its search setting), weighted by p(root) / p(head) from the LM, summed."""
    import ppl_tok.strings.tree as tree_module

    text = "Q: Kendall opened their mouth to speak, and Kendall said"
    tree, config, rules = TokenTree(), StringSearchConfig(extend_threshold=1e-4), WordRules()
    roots: dict[int, list] = {}
    real = tree_module.detour_branches

    def spy(*args):
        out = real(*args)
        for b in out:
            roots.setdefault(b.unit, []).append(b.ids)
        return out

    monkeypatch.setattr(tree_module, "detour_branches", spy)
    rows = surprisals(smollm2, text, config=config, rules=rules, search=tree)
    assert sum(map(len, roots.values())) > 0  # the text has detours of share >= 1e-4 (the name, split)
    data, ids = text.encode(), smollm2.canonical(text)
    spans = byte_spans(text, word_spans(text, rules))
    ends = [0] + tree_module.canonical_ends(smollm2, ids)
    for b in tree_module.plan(smollm2, data, ids, spans, ONE_LEVEL):
        tail = data[ends[b.r]: b.end].decode()
        cut = len(data[ends[b.r]: b.cut].decode())
        goes_on = b.unit < len(spans) - 1
        last = ("boundary" if data[b.end:].decode()[:1] in rules.boundary_chars else "none") if goes_on else "boundary"
        before, after = [], []
        for root, setting in [(tuple(ids[:b.r]), config)] + [(r, tree.detour_config(config))
                                                             for r in roots.get(b.unit, [])]:
            weight = smollm2.log_prob(root, "") - smollm2.log_prob(tuple(ids[:b.r]), "")
            got = surprisals(smollm2, tail, units=[0, cut, len(tail)] if cut else [0, len(tail)], context=list(root),
                             config=setting, rules=rules, final=last)
            s1 = got[0].surprisal if cut else 0.0
            before.append(weight - s1 * LN2)
            after.append(weight - (s1 + got[-1].surprisal) * LN2)
        want = -(logsumexp(after) - logsumexp(before)) / LN2
        assert rows[b.unit].surprisal == pytest.approx(want, abs=2e-4)
