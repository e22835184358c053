"""Timing helpers shared by the benchmarks: device-true timings, peak memory, the raw batched forward baseline."""

from __future__ import annotations

import time
from typing import Any

import torch
from tqdm import tqdm

from ppl_tok.lm.device import peak_memory_mb, reset_peak_memory, synchronize


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


def marginal_throughput(lm, sentence: str, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Look-ahead IS on ``sentence`` with each number of particles: forwards/s and particle-steps/s against raw
    batched decoding on the same device (at the engine's mean batch, and at N)."""
    from ppl_tok.infer.importance import marginal

    rows = []
    for n in tqdm(sizes, desc="(a) throughput", leave=False):
        lm.clear_cache()
        lm.stats.reset()
        reset_peak_memory(lm.device)
        r, seconds = timed(lm.device, marginal, sentence, lm, n, seed=0)
        mean_batch = max(1, round(lm.stats.forwards / max(1, lm.stats.calls)))
        steps = sum(len(s) for s in r.samples)
        rows.append({"num_samples": n, "seconds": seconds, "forwards": lm.stats.forwards,
                     "mean_batch": mean_batch, "is_forwards_per_s": lm.stats.forwards / seconds,
                     "particle_steps_per_s": steps / seconds, "peak_device_mb": peak_memory_mb(lm.device),
                     "raw_forwards_per_s_at_mean_batch": raw_forwards_per_s(lm, mean_batch),
                     "raw_forwards_per_s_at_n": raw_forwards_per_s(lm, n)})
        rows[-1]["ratio_forwards"] = rows[-1]["is_forwards_per_s"] / rows[-1]["raw_forwards_per_s_at_mean_batch"]
        rows[-1]["ratio_particle_steps"] = rows[-1]["particle_steps_per_s"] / rows[-1]["raw_forwards_per_s_at_n"]
    return rows
