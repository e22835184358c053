"""The raw baseline at the engine's shapes (``ppl_tok.lm.replay``): the bare model gets exactly the forwards
the engine ran (batch, past length, new tokens, mask, positions, kept logits)."""

import pytest
import torch

from ppl_tok.infer.importance import marginals
from ppl_tok.lm.hf import HFLanguageModel
from ppl_tok.lm.replay import ForwardShape, recording, replay

from tests.lm.test_engine import CONTEXTS, SEEDS, TEXTS, VOCAB
from tests.lm.test_hf_architectures import tiny


def _seen(calls):
    """A hook that keeps what a model call received: ids shape, mask, positions, past length, kept logits."""
    def hook(module, args, kwargs):
        keep = kwargs.get("logits_to_keep", 0)
        calls.append((tuple(kwargs["input_ids"].shape), kwargs["attention_mask"].cpu().clone(),
                      kwargs["position_ids"].cpu().clone(), kwargs["past_key_values"].get_seq_length(),
                      keep if isinstance(keep, int) else tuple(keep.tolist())))
    return hook


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_the_replay_runs_the_forwards_the_engine_ran(family):
    lm = HFLanguageModel(tiny(family), None, 0, vocab=VOCAB, name=family)
    engine, raw = [], []
    handle = lm.model.register_forward_pre_hook(_seen(engine), with_kwargs=True)
    with recording(lm) as rec:
        marginals(TEXTS, lm, 6, contexts=CONTEXTS, seeds=SEEDS)
        lm.log_probs_many([[1, 2, 3], [4]], [[1], [2, 3]])  # chunks of several tokens, every position's logits
    assert rec.forwards == lm.stats.forwards and len(rec.shapes) == lm.stats.calls
    assert rec.seconds > 0
    assert any(max(s.pasts) > min(s.pasts) for s in rec.shapes)  # ragged pasts: left padding
    assert any(not s.last_only for s in rec.shapes) and any(max(s.chunks) > 1 for s in rec.shapes)
    handle.remove()
    took = replay(lm, rec.shapes, on_call=lambda kwargs: _seen(raw)(None, (), kwargs))
    assert took.seconds > 0 and took.cpu_seconds > 0 and rec.cpu_seconds > 0
    assert len(engine) == len(raw) == len(rec.shapes)
    for (shape_e, mask_e, pos_e, past_e, keep_e), (shape_r, mask_r, pos_r, past_r, keep_r) in zip(engine, raw):
        assert shape_e == shape_r and past_e == past_r
        assert torch.equal(mask_e, mask_r) and torch.equal(pos_e, pos_r)
        assert keep_e == keep_r or (keep_e == 1 and keep_r == (shape_r[1] - 1,))


def test_recording_refuses_a_recurrent_model():
    lm = HFLanguageModel(tiny("mamba"), None, 0, vocab=VOCAB, name="mamba")
    with pytest.raises(ValueError, match="recurrent"):
        with recording(lm):
            pass


def test_a_shape_counts_its_new_tokens():
    assert ForwardShape((3, 0, 5), (1, 2, 1), True).forwards == 4
