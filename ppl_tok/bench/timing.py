"""Timing helpers shared by the benchmarks: device-true timings, peak memory, the raw batched forward baseline."""

from __future__ import annotations

import time
from typing import Any

import torch

from ppl_tok.lm.device import synchronize

def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(device: Any, fn, *args, **kwargs) -> tuple[Any, float]:
    """``fn(*args, **kwargs)`` and its wall-clock seconds, the device's queued work included
    (``torch.cuda.synchronize`` before and after on CUDA: a kernel launch returns before the kernel runs)."""
    synchronize(device)
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    synchronize(device)
    return out, time.perf_counter() - start


def device_case(lm) -> dict[str, Any]:
    """Where a benchmark ran: the model's device and dtype."""
    return {"device": str(lm.device), "dtype": str(next(lm.model.parameters()).dtype).replace("torch.", "")}


def raw_forwards_per_s(lm, batch: int, steps: int = 8, prefix_len: int = 8) -> float:
    """A raw batched decoding loop of the same model on its device: KV cache, full-vocab log_softmax per step."""
    model = lm.model
    ids = torch.full((batch, prefix_len), lm.bos_id or 0, dtype=torch.long, device=lm.device)
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
        cache = out.past_key_values
        tok = torch.zeros((batch, 1), dtype=torch.long, device=lm.device)

        def loop() -> None:
            nonlocal out, cache
            for _ in range(steps):
                out = model(input_ids=tok, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                torch.log_softmax(out.logits[:, -1].float(), -1)

        _, seconds = timed(lm.device, loop)
        return batch * steps / seconds


def uncached(lm):
    """The same HF model behind an LM that recomputes its whole prefix at every step (no KV, no prefix cache)."""
    from ppl_tok.lm.base import EngineConfig, LanguageModel
    from ppl_tok.lm.hf import HFLanguageModel

    class Uncached(HFLanguageModel):
        @torch.inference_mode()
        def _prefill(self, keys):
            rows = [self._log_softmax(self.model(input_ids=torch.tensor([k], device=self.device)).logits[0, -1])
                    for k in keys]
            return torch.stack(rows), list(keys)

        def _extend(self, payloads, tokens):
            return self._prefill([p + (t,) for p, t in zip(payloads, tokens)])

        def log_probs_many(self, texts_tokens, contexts):
            return LanguageModel.log_probs_many(self, texts_tokens, contexts)

    naive = Uncached(lm.model, lm.tokenizer, lm.bos_id, vocab=lm.vocab, name=lm.name + "-uncached",
                     config=EngineConfig(cache_bytes=0, row_bytes=0))
    naive.pooled = False
    return naive


def raw_decode_rate(lm, batch: int, past: int, steps: int = 6) -> float:
    """Token-forwards/s of a raw batched decoding loop (KV cache, full-vocab log_softmax) after ``past`` tokens."""
    return raw_forwards_per_s(lm, batch, steps=steps, prefix_len=max(1, past))
