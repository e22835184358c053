"""Host <-> device traffic per engine step, counted on the CPU (``ppl_tok.lm.syncs``).

On a GPU every synchronisation stalls the host for microseconds to tens of
microseconds; the engine is meant to make none beyond its deliberate reads
(the gathered log-probs, the sampled tokens), whatever the number of layers or
particles. A ``TorchFunctionMode`` counts them on the CPU by tracking which
tensors stand for device ones, so a regression fails here without a GPU.
The models run on ``PPL_TOK_TEST_DEVICE`` (``make gpu-check``: CUDA, where the
counter reads the real devices).
"""

import pytest
import torch

from ppl_tok.canonicity import canonicity
from ppl_tok.infer.importance import marginals
from ppl_tok.lm.device import to_device, to_host
from ppl_tok.lm.hf import HFLanguageModel
from ppl_tok.lm.syncs import TransferCounter
from ppl_tok.infer.search import marginal_bounds
from ppl_tok.infer.smc import smc_marginals

from tests.lm.test_engine import CONTEXTS, SEEDS, TEXTS, VOCAB
from tests.lm.test_hf_architectures import TEST_DEVICE, tiny

WORKLOADS = {
    "lookahead": lambda lm, n: marginals(TEXTS, lm, n, contexts=CONTEXTS, seeds=SEEDS),
    "prior": lambda lm, n: marginals(TEXTS, lm, n, contexts=CONTEXTS, seeds=SEEDS, guide="prior"),
    "smc": lambda lm, n: smc_marginals(TEXTS, lm, n, contexts=CONTEXTS, seeds=SEEDS),
    "bracket": lambda lm, n: marginal_bounds("abcabc", lm, context=[1, 2], tolerance=1e-3, budget=50),
    "canonicity": lambda lm, n: canonicity(lm, n, 6, progress=False),
}


def counted(family: str, workload: str, n: int = 6):
    lm = HFLanguageModel(tiny(family), None, 0, vocab=VOCAB, name=family)
    with TransferCounter(lm.device).watch(lm) as counter:
        WORKLOADS[workload](lm, n)
    return lm, counter


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("family", ["llama", "gemma3", "mamba"])
def test_at_most_two_synchronisations_per_engine_step(family, workload):
    lm, counter = counted(family, workload)
    steps = lm.stats.calls
    # none from ppl-tok itself: what is left is transformers' own check of the padding mask (once per forward,
    # twice for Gemma 3's two kinds of attention)
    ours = [(op, where) for (kind, op, where) in counter.events if kind == "sync" and "transformers/" not in where]
    assert not ours, f"synchronisations made by ppl-tok:\n{counter.report()}"
    assert counter.syncs <= 2 * steps, counter.report()
    # the deliberate reads: about one per step (the gathered log-probs or the sampled tokens), plus the setup's
    assert set(counter.reads) <= {"log-probs", "tokens"}
    assert sum(counter.reads.values()) <= 2 * steps + 2, counter.reads


def test_the_count_does_not_grow_with_particles_or_layers():
    import transformers as tf

    small_lm, small = counted("llama", "lookahead", n=4)
    torch.manual_seed(0)
    deep = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=6,
                                              num_attention_heads=2, num_key_value_heads=1)).to(TEST_DEVICE)
    lm = HFLanguageModel(deep, None, 0, vocab=VOCAB, name="deep")
    with TransferCounter(lm.device).watch(lm) as big:
        marginals(TEXTS, lm, 32, contexts=CONTEXTS, seeds=SEEDS)
    assert big.syncs <= 2 * lm.stats.calls and small.syncs <= 2 * small_lm.stats.calls
    assert big.async_copies <= 3 * lm.stats.calls + 8  # one packed copy per dtype per forward (+ the setup's)


def test_the_counter_sees_what_a_gpu_would_wait_for():
    """The counter itself: each pattern the engine used to have is one event of the right kind."""
    device = TEST_DEVICE
    weights = torch.randn(8, 4, device=device)
    with TransferCounter(device).watch(weights) as c:
        host_index = torch.tensor([0, 2])
        weights[host_index]                      # a host index into a device tensor: copied first
        weights[weights[:, 0] > 0]               # a boolean mask: nonzero, the output size depends on the data
        float(weights[0, 0])                     # a scalar read
        weights.sum(0).tolist()                  # a read
        torch.tensor([1, 2], device=device)      # a blocking copy from host data
        moved = to_device(host_index, device)    # pinned and non-blocking
        weights[moved]                           # a device index: nothing
        to_host(weights[moved], "log-probs")     # a deliberate read
    assert c.syncs == 5, c.report()
    assert c.async_copies == 1
    assert c.reads == {"log-probs": 1}
