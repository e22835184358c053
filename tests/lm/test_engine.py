"""The batched engine: ragged batches of many (context, text) pairs give the one-at-a-time numbers;
the KV pool shares prefixes, stays bounded and gives memory back."""

import math

import pytest
import torch

from ppl_tok import FunctionLM, Vocabulary
from ppl_tok.infer.importance import marginal, marginals
from ppl_tok.lm.config import EngineConfig
from ppl_tok.lm.hf import HFLanguageModel

from tests.lm.test_hf_architectures import tiny

# 16 ids (the tiny models' vocabulary size), with multi-character tokens so that texts have many tokenizations
VOCAB = Vocabulary.from_tokens([None, "a", "b", "c", "ab", "bc", "ca", "abc", "bca", "cab", "aa", "bb", "cc",
                                "d", "e", "f"])
TEXTS = ["abcab", "ca", "bcabca", "abcabc"]
CONTEXTS = [[1, 2, 3], [13], [14, 15, 13, 1, 2, 3, 4], [1, 2, 3]]  # different lengths; two share a context
SEEDS = [11, 12, 13, 14]


@pytest.fixture(params=["gpt2", "llama", "gemma3", "mamba"])
def lm(request):
    return HFLanguageModel(tiny(request.param), None, 0, vocab=VOCAB, name=request.param)


def _one_at_a_time(lm, proposal="lookahead", n=6):
    out = []
    for text, ctx, seed in zip(TEXTS, CONTEXTS, SEEDS):
        lm.clear_cache()
        out.append(marginal(text, lm, n, context=ctx, seed=seed, guide=proposal))
    lm.clear_cache()
    return out


@pytest.mark.parametrize("proposal", ["lookahead", "prior"])
def test_a_ragged_batch_equals_one_at_a_time(lm, proposal):
    singles = _one_at_a_time(lm, proposal)
    batch = marginals(TEXTS, lm, 6, contexts=CONTEXTS, seeds=SEEDS, guide=proposal)
    for one, many in zip(singles, batch):
        assert one.samples == many.samples  # per-pair seeds: the batch does not change what a pair draws
        finite = torch.isfinite(one.log_weights)
        assert torch.equal(finite, torch.isfinite(many.log_weights))
        assert torch.allclose(one.log_weights[finite], many.log_weights[finite], atol=1e-5)
        assert many.canonical_log_prob == pytest.approx(one.canonical_log_prob, abs=1e-5)


def test_the_batch_is_one_forward_per_step_and_shares_contexts():
    calls = []
    lm = FunctionLM(VOCAB, lambda p: calls.append(p) or [0] + [1] * 15, bos_id=0)
    marginals(["abc", "abc", "ab"], lm, 16, contexts=[[1], [1], [2]], seeds=[0, 0, 1])
    # the shared context (BOS, 1) is computed once, and identical particles share their prefixes
    assert calls.count((0, 1)) == 1
    assert len(calls) == len(set(calls))
    # pairs 0 and 1 are identical (same context, text and seed): the same samples
    r = marginals(["abc", "abc"], lm, 16, contexts=[[1], [1]], seeds=[5, 5])
    assert r[0].samples == r[1].samples


def test_many_strings_estimate_each_marginal():
    lm = FunctionLM(VOCAB, lambda p: [0] + [1 + (len(p) * i) % 5 for i in range(15)], bos_id=0)
    results = marginals(TEXTS, lm, 2000, contexts=CONTEXTS, seeds=SEEDS)
    from ppl_tok.infer.exact import exact_marginal

    for text, ctx, r in zip(TEXTS, CONTEXTS, results):
        truth = exact_marginal(text, lm, context=ctx).log_marginal
        assert r.log_marginal == pytest.approx(truth, abs=4 / math.sqrt(r.ess))  # about 4 standard errors


def test_pool_shares_prefixes_and_gives_memory_back():
    lm = HFLanguageModel(tiny("llama"), None, 0, vocab=VOCAB, name="llama")
    root = lm.initial([1, 2, 3])
    assert lm.pool.used == 4  # BOS + 3 context tokens
    a = lm.extend([root] * 8, [4] * 8)  # identical extensions: one new slot
    assert lm.pool.used == 5
    b = lm.extend(a[:1] * 3, [1, 2, 3])  # three children share their parent's slots
    assert lm.pool.used == 8
    del root, a, b
    lm.clear_cache()
    assert lm.pool.used == 0 and lm.pool.nbytes() == 0


def test_prefix_cache_is_bounded_in_bytes_and_evicts():
    model = tiny("gpt2")
    lm = HFLanguageModel(model, None, 0, vocab=VOCAB, name="gpt2",
                         config=EngineConfig(cache_bytes=20 * 2 * 2 * 16 * 4, row_bytes=16 * 4 * 3))
    state = lm.initial([1])
    for t in [2, 3, 4, 5] * 10:
        state = lm.extend([state], [t])[0]
    assert len(lm._cache) <= 20
    assert len(lm._rows) <= 3
    # rows dropped from memory are recomputed on demand, to the same numbers
    reference = HFLanguageModel(model, None, 0, vocab=VOCAB, name="gpt2").state(state.tokens).log_probs
    state.rows = None
    assert torch.allclose(state.log_probs, reference, atol=1e-5)
    assert lm.stats.recomputed >= 1


def test_batched_scoring_equals_stepwise(lm):
    seqs = [[1, 2, 3], [4], [5, 6, 7, 8, 9], [10, 11]]
    batched = lm.log_probs_many(seqs, CONTEXTS)
    lm.clear_cache()
    prefixes = [lm.prefix_ids(c) for c in CONTEXTS]
    lm.states(prefixes)
    lm.stats.reset()
    terms = lm.token_log_probs_after(prefixes, seqs)
    if lm.pooled:  # the first tokens from the prefixes' cached rows, the rest in one forward
        assert lm.stats.calls == 1 and lm.stats.forwards == sum(len(s) - 1 for s in seqs)
    for seq, ctx, value, per in zip(seqs, CONTEXTS, batched, terms):
        lm.clear_cache()
        step, steps = 0.0, []
        state = lm.initial(ctx)
        for i, t in enumerate(seq):
            if i:
                state = lm.extend([state], [seq[i - 1]])[0]
            steps.append(float(state.log_probs[t]))
            step += steps[-1]
        assert value == pytest.approx(step, abs=1e-5)
        assert per == pytest.approx(steps, abs=1e-5) and sum(per) == pytest.approx(value, abs=1e-9)


def test_smollm2_ragged_batch_equals_one_at_a_time(smollm2):
    texts = [" Paris", " Berlin.", " tongueless"]
    contexts = ["The capital of France is", "Germany's capital is", ""]
    singles = []
    for t, c, s in zip(texts, contexts, [1, 2, 3]):
        smollm2.clear_cache()
        singles.append(marginal(t, smollm2, 8, context=c, seed=s))
    smollm2.clear_cache()
    batch = marginals(texts, smollm2, 8, contexts=contexts, seeds=[1, 2, 3])
    for one, many in zip(singles, batch):
        assert one.samples == many.samples
        assert torch.allclose(one.log_weights, many.log_weights, atol=1e-4)
        assert math.isfinite(many.log_marginal)


@pytest.mark.parametrize("proposal", ["lookahead", "prior"])
def test_a_tiny_row_budget_recomputes_and_gives_the_same_numbers(proposal):
    model = tiny("gpt2")
    roomy = HFLanguageModel(model, None, 0, vocab=VOCAB, name="gpt2")
    tight = HFLanguageModel(model, None, 0, vocab=VOCAB, name="gpt2",
                            config=EngineConfig(row_bytes=16 * 4 * 2, cache_bytes=1 << 12, max_batch=3))
    a = marginals(TEXTS, roomy, 6, contexts=CONTEXTS, seeds=SEEDS, guide=proposal)
    b = marginals(TEXTS, tight, 6, contexts=CONTEXTS, seeds=SEEDS, guide=proposal)
    assert tight.stats.recomputed > 0
    for x, y in zip(a, b):
        assert x.samples == y.samples
        assert torch.allclose(x.log_weights, y.log_weights, atol=1e-5)


def test_a_pool_of_many_small_blocks_gives_the_same_numbers(lm):
    """Blocks of 16 slots: every forward gathers its past from several blocks."""
    if not lm.pooled:
        pytest.skip("state-space models keep no KV pool")
    small = HFLanguageModel(lm.model, None, 0, vocab=VOCAB, name=lm.name, config=EngineConfig(kv_block_bytes=1))
    a = marginals(TEXTS, lm, 6, contexts=CONTEXTS, seeds=SEEDS)
    b = marginals(TEXTS, small, 6, contexts=CONTEXTS, seeds=SEEDS)
    assert small.pool.block_slots == 16 and len(small.pool.blocks) > 2
    for x, y in zip(a, b):
        assert x.samples == y.samples
        assert torch.allclose(x.log_weights, y.log_weights, atol=1e-5)


def test_a_row_budget_block_keeps_a_forwards_rows_until_they_are_read():
    """One forward computes the rows of a whole sequence; with a budget of 3 rows the next call's rows push
    them out before they are read (and they are recomputed), inside ``row_budget`` they are all kept, and
    after it the budget holds."""
    model = tiny("gpt2")
    lm = HFLanguageModel(model, None, 0, vocab=VOCAB, name="gpt2", config=EngineConfig(row_bytes=16 * 4 * 3))
    seq = [1, 2, 3, 4, 5, 6, 7, 8]

    def read_every_prefix() -> int:
        lm.clear_cache()
        lm.stats.reset()
        lm.token_log_probs_after([(0,)], [seq])
        lm.states([(0, 9), (0, 10)])  # another call's rows (a walk's next step)
        for k in range(1, len(seq)):
            lm.state((0, *seq[:k])).log_probs  # noqa: B018 - reading the row is the point
        return lm.stats.recomputed

    assert read_every_prefix() > 0
    with lm.row_budget(4 * len(lm.vocab) * len(seq) + lm.config.row_bytes):
        assert lm.config.row_bytes > 16 * 4 * 3
        assert read_every_prefix() == 0
    assert lm.config.row_bytes == 16 * 4 * 3 and len(lm._rows) <= 3 and lm._rows_used <= 16 * 4 * 3
    with lm.row_budget(1):  # never below the configured budget
        assert lm.config.row_bytes == 16 * 4 * 3


def test_particle_groups_pack_pairs_and_chunk_what_alone_is_too_big():
    from ppl_tok.infer.importance import chunk_seed, particle_groups

    # costs: 8 particles x (bytes + 1) x 10 bytes per position
    texts = ["ab", "abcd", "a", "x" * 99, "abc"]
    groups = particle_groups(texts, 8, 10, budget=700, seeds=[5, 6, 7, 8, 9])
    assert groups[0] == ([0, 1], 8, [5, 6])            # 240 + 400 <= 700
    assert groups[1] == ([2], 8, [7])                  # 160, then the long pair must start alone
    assert [g[0] for g in groups[2:-1]] == [[3]] * 8   # 8000 bytes: 8 particles, one per chunk
    assert [g[1] for g in groups[2:-1]] == [1] * 8
    assert [g[2] for g in groups[2:-1]] == [[chunk_seed(8, c)] for c in range(8)]
    assert groups[-1] == ([4], 8, [9])
    # sizes always add up to num_samples, in as few equal chunks as fit
    for n in (1, 5, 64):
        for budget in (1, 333, 10**9):
            per_pair = {}
            for members, count, _ in particle_groups(["q" * 40], n, 7, budget):
                per_pair[members[0]] = per_pair.get(members[0], 0) + count
            assert per_pair == {0: n}


def test_a_long_text_runs_in_chunks_that_are_ordinary_runs(lm):
    from ppl_tok.infer.importance import chunk_seed

    lm.log_probs_many([[1]], [[1]])  # the pool learns its layout
    position = lm.position_bytes()
    budget = 3 * (len("ca") + 1) * position * 2  # "ca" (and only it) fits with all 6 particles
    tight = HFLanguageModel(lm.model, None, 0, vocab=VOCAB, name=lm.name, config=EngineConfig(particle_bytes=budget))
    tight.log_probs_many([[1]], [[1]])
    grouped = marginals(TEXTS, tight, 6, contexts=CONTEXTS, seeds=SEEDS)
    alone = marginals(TEXTS, lm, 6, contexts=CONTEXTS, seeds=SEEDS)
    for text, ctx, seed, x, y in zip(TEXTS, CONTEXTS, SEEDS, grouped, alone):
        assert len(x.samples) == 6 and torch.isfinite(torch.tensor(x.log_marginal))
        if text == "ca":  # a pair that fits keeps its own seed whatever group it runs in
            assert x.samples == y.samples
            assert torch.allclose(x.log_weights, y.log_weights, atol=1e-5)
            continue
        # too long for all 6 particles at once: chunks of 3, 2 or 1, each an ordinary run with a chunk seed
        size = 6 // math.ceil(6 * (len(text) + 1) * position / budget)
        lm.clear_cache()
        parts = [marginal(text, lm, size, context=ctx, seed=chunk_seed(seed, c)) for c in range(6 // size)]
        assert x.samples == [v for p in parts for v in p.samples]
        assert torch.allclose(x.log_weights, torch.cat([p.log_weights for p in parts]), atol=1e-5)
