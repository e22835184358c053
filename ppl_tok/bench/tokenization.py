"""Benchmarks: speed as ratios against a baseline run in the same process.

``ppl-tok bench mdd``: bytes per second of :func:`~ppl_tok.mdd.compile_mdd`
(byte trie) against :func:`~ppl_tok.mdd.compile_mdd_naive` (Algorithm 1 as
written: the whole vocabulary scanned at every position), on the same texts,
and the time to compile one 10 kB text.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ppl_tok.lm.cards import load_vocabulary
from ppl_tok.datasets import continuation, data_file, find_data_files, load_questions, texts_of
from ppl_tok.lm.device import peak_memory_mb, reset_peak_memory, synchronize
from ppl_tok.mdd import compile_mdd, compile_mdd_naive


def load_texts(source: str | Path) -> list[str]:
    """Texts to benchmark on: every context and answer of a data folder, or the paragraphs of a file."""
    source = Path(source)
    if source.is_dir():
        return [t for f in find_data_files(source) for t in texts_of(load_questions(f))]
    if source.suffix in (".jsonl", ".gz"):
        return list(texts_of(load_questions(source)))
    if not source.is_file():
        raise FileNotFoundError(f"no data folder or text file at {source}")
    return [p for p in source.read_text(encoding="utf-8").split("\n\n") if p.strip()]


def _rate(texts: list[str], compile_fn, vocab, desc: str) -> tuple[float, int, float]:
    done, start = 0, time.perf_counter()
    for text in tqdm(texts, desc=desc, unit="text", leave=False):
        compile_fn(text, vocab)
        done += len(text.encode("utf-8"))
    seconds = time.perf_counter() - start
    return done / seconds, done, seconds


def _take(texts: list[str], budget: int) -> list[str]:
    out, total = [], 0
    for t in texts:
        if total >= budget:
            break
        out.append(t)
        total += len(t.encode("utf-8"))
    return out


MDD_MODELS = ("smollm2-135m", "gemma3-270m")


def bench_mdd(data: str | Path, models: list[str], naive_bytes: int = 3_000,
              max_bytes: int = 2_000_000) -> dict[str, Any]:
    """Compile the texts under ``data`` with each model's vocabulary, trie against naive."""
    texts = load_texts(data)
    # Interleave the data sets so a byte budget samples all of them.
    texts = texts[::7] + [t for i, t in enumerate(texts) if i % 7]
    rows = []
    for name in models:
        vocab = load_vocabulary(name)
        compile_mdd("warm up the trie", vocab)
        fast_texts = _take(texts, max_bytes)
        fast, fast_bytes, fast_s = _rate(fast_texts, compile_mdd, vocab, f"{name}: trie compiler")
        naive_texts = _take(texts, naive_bytes)
        trie_same, _, _ = _rate(naive_texts, compile_mdd, vocab, f"{name}: trie compiler (same texts)")
        naive, naive_done, naive_s = _rate(naive_texts, compile_mdd_naive, vocab, f"{name}: naive compiler")
        big = " ".join(_take(texts, 10_000))[:10_000]
        start = time.perf_counter()
        mdd = compile_mdd(big, vocab)
        big_s = time.perf_counter() - start
        rows.append({
            "model": name, "vocab_size": len(vocab),
            "trie_bytes_per_s": fast, "trie_bytes": fast_bytes, "trie_seconds": fast_s,
            "trie_bytes_per_s_on_naive_texts": trie_same,
            "naive_bytes_per_s": naive, "naive_bytes": naive_done, "naive_seconds": naive_s,
            "speedup": trie_same / naive,
            "ten_kb_seconds": big_s, "ten_kb_edges": mdd.number_of_edges(),
            "ten_kb_log10_count": len(str(mdd.count())) - 1,
        })
    return {"data": str(data), "texts": len(texts), "results": rows}


def format_mdd(result: dict[str, Any]) -> list[str]:
    lines = [f"MDD compilation on {result['data']} ({result['texts']} texts)",
             f"{'model':<14} {'trie B/s':>10} {'naive B/s':>10} {'speedup':>8} {'10 kB text':>11}"]
    for r in result["results"]:
        lines.append(f"{r['model']:<14} {r['trie_bytes_per_s']:>10.0f} {r['naive_bytes_per_s']:>10.0f} "
                     f"{r['speedup']:>7.0f}x {r['ten_kb_seconds']:>10.3f}s")
    return lines


# ----------------------------------------------------------------- marginal
MARGINAL_STRINGS = (" Tokens", " tongueless", " Hypnopaturist", " The capital of France is Paris.")
#: ``ppl-tok bench marginal --quick``: every part once, small (a smoke test of the benchmark, not a measurement).
QUICK_MARGINAL: dict[str, Any] = {"sizes": (8,), "baseline_samples": 4, "strings": (" Tokens",)}


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(device: Any, fn, *args, **kwargs) -> tuple[Any, float]:
    """``fn(*args, **kwargs)`` and its wall-clock seconds, the device's queued work included
    (``torch.cuda.synchronize`` before and after on CUDA: a kernel launch returns before the kernel runs)."""
    synchronize(device)
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    synchronize(device)
    return out, time.perf_counter() - start


def _device_case(lm) -> dict[str, Any]:
    """Where a benchmark ran: the model's device and dtype."""
    return {"device": str(lm.device), "dtype": str(next(lm.model.parameters()).dtype).replace("torch.", "")}


def _raw_forwards_per_s(lm, batch: int, steps: int = 8, prefix_len: int = 8) -> float:
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

        _, seconds = _timed(lm.device, loop)
        return batch * steps / seconds


def _uncached(lm):
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


def marginal_throughput(lm, sentence: str, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Look-ahead IS on ``sentence`` with each number of particles: forwards/s and particle-steps/s against raw
    batched decoding on the same device (at the engine's mean batch, and at N)."""
    from ppl_tok.infer.importance import marginal

    rows = []
    for n in tqdm(sizes, desc="(a) throughput", leave=False):
        lm.clear_cache()
        lm.stats.reset()
        reset_peak_memory(lm.device)
        r, seconds = _timed(lm.device, marginal, sentence, lm, n, seed=0)
        mean_batch = max(1, round(lm.stats.forwards / max(1, lm.stats.calls)))
        steps = sum(len(s) for s in r.samples)
        rows.append({"num_samples": n, "seconds": seconds, "forwards": lm.stats.forwards,
                     "mean_batch": mean_batch, "is_forwards_per_s": lm.stats.forwards / seconds,
                     "particle_steps_per_s": steps / seconds, "peak_device_mb": peak_memory_mb(lm.device),
                     "raw_forwards_per_s_at_mean_batch": _raw_forwards_per_s(lm, mean_batch),
                     "raw_forwards_per_s_at_n": _raw_forwards_per_s(lm, n)})
        rows[-1]["ratio_forwards"] = rows[-1]["is_forwards_per_s"] / rows[-1]["raw_forwards_per_s_at_mean_batch"]
        rows[-1]["ratio_particle_steps"] = rows[-1]["particle_steps_per_s"] / rows[-1]["raw_forwards_per_s_at_n"]
    return rows


def bench_marginal(model: str = "smollm2-135m", sizes: tuple[int, ...] = (16, 64, 256), baseline_samples: int = 64,
                   strings: tuple[str, ...] = MARGINAL_STRINGS, device: str | None = None, dtype: str | None = None,
                   bos_id: int | None = None) -> dict[str, Any]:
    """(a) throughput against raw batched forwards, (b) against stock sequential Pyro, (c) forwards per
    sample against the paper's sample-then-rescore scheme, (d) accuracy against time for every estimator."""
    import pyro
    from pyro.infer import Importance

    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.importance import marginal
    from ppl_tok.infer.exact import exact_marginal
    from ppl_tok.model import tokenization_model
    from ppl_tok.proposals import lookahead_guide
    from ppl_tok.infer.search import marginal_bounds

    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    sentence = strings[-1]
    out: dict[str, Any] = {"model": model, **_device_case(lm)}
    # (a) throughput
    rows = marginal_throughput(lm, sentence, sizes)
    out["throughput"] = rows
    # (b) stock sequential Pyro with an uncached LM call per step
    text = " tongueless"
    naive = _uncached(lm)
    mdd = compile_mdd(text, lm.vocab)
    pyro.set_rng_seed(0)
    seq, seq_s = _timed(lm.device, Importance(tokenization_model, lookahead_guide, num_samples=baseline_samples).run,
                        naive, mdd)
    lm.clear_cache()
    fast, fast_s = _timed(lm.device, marginal, text, lm, baseline_samples, seed=0)
    out["sequential"] = {"text": text, "num_samples": baseline_samples, "stock_importance_seconds": seq_s,
                         "stock_log_normalizer": float(seq.get_log_normalizer()),
                         "vectorized_seconds": fast_s, "speedup": seq_s / fast_s}
    # (c) forwards per sample, against the paper's scheme
    lm.clear_cache()
    lm.stats.reset()
    r = marginal(sentence, lm, 64, seed=0)
    context_len = len(lm.prefix_ids(""))
    paper = sum(len(s) for s in r.samples) + sum(context_len + len(s) for s in r.samples)
    out["forwards_per_sample"] = {"text": sentence, "num_samples": 64, "ours": lm.stats.forwards / 64,
                                  "paper_scheme": paper / 64, "peak_rss_mb": _peak_rss_mb()}
    # (d) accuracy against time
    acc = []
    for s in tqdm(strings, desc="(d) accuracy", leave=False):
        lm.clear_cache()
        truth = (exact_marginal(s, lm).log_marginal if compile_mdd(s, lm.vocab).count() <= 10_000
                 else marginal_bounds(s, lm, tolerance=1e-6, budget=5000).estimate)
        runs = [("lookahead N=64", lambda s=s: marginal(s, lm, 64, seed=0)),
                ("lookahead N=256", lambda s=s: marginal(s, lm, 256, seed=0)),
                ("stratified N=64", lambda s=s: marginal(s, lm, 64, guide="stratified", seed=0)),
                ("bracket 1e-3", lambda s=s: marginal_bounds(s, lm, tolerance=1e-3))]
        for name, fn in runs:
            lm.clear_cache()
            res, secs = _timed(lm.device, fn)
            est = res.estimate if hasattr(res, "estimate") else res.log_marginal
            acc.append({"text": s, "estimator": name, "estimate": est, "truth": truth, "error": abs(est - truth),
                        "seconds": secs, "chars_per_s": len(s) / secs})
    out["accuracy"] = acc
    # genlm-bytes is compared on next-byte log-probs, in its own environment: `ppl-tok bench strings --genlm-python PY`
    return out


def format_marginal(r: dict[str, Any]) -> list[str]:
    lines = [f"Marginal estimation on {r['model']}", "(a) throughput on the sentence, vectorized IS vs raw batched forward loop"]
    lines.append(f"{'N':>5} {'secs':>7} {'fwd':>6} {'batch':>6} {'IS fwd/s':>9} {'raw fwd/s':>10} {'ratio':>6} "
                 f"{'steps/s':>8} {'raw@N':>7} {'ratio':>6}")
    for t in r["throughput"]:
        lines.append(f"{t['num_samples']:>5} {t['seconds']:>7.2f} {t['forwards']:>6} {t['mean_batch']:>6} "
                     f"{t['is_forwards_per_s']:>9.1f} {t['raw_forwards_per_s_at_mean_batch']:>10.1f} "
                     f"{t['ratio_forwards']:>6.2f} {t['particle_steps_per_s']:>8.1f} {t['raw_forwards_per_s_at_n']:>7.1f} "
                     f"{t['ratio_particle_steps']:>6.2f}")
    s = r["sequential"]
    lines.append(f"(b) {s['text']!r}, N={s['num_samples']}: stock sequential Importance (uncached LM) "
                 f"{s['stock_importance_seconds']:.1f} s, vectorized {s['vectorized_seconds']:.2f} s: {s['speedup']:.0f}x")
    f = r["forwards_per_sample"]
    lines.append(f"(c) forwards per sample on {f['text']!r}: ours {f['ours']:.2f}, paper's scheme {f['paper_scheme']:.1f}; "
                 f"peak RSS {f['peak_rss_mb']:.0f} MB")
    lines.append("(d) accuracy against time")
    for a in r["accuracy"]:
        lines.append(f"  {a['text']!r:36} {a['estimator']:16} error {a['error']:9.4f} nats  {a['seconds']:7.2f} s  "
                     f"{a['chars_per_s']:7.2f} chars/s")
    lines.append("genlm-bytes: see `ppl-tok bench strings --genlm-python PY` (docs/benchmarks.md)")
    return lines


# ------------------------------------------------------------- most likely
BB_SENTENCE = ("Language models typically tokenize text into subwords, utilizing a learned deterministic set of "
               "merge rules to aggregate tokens.")


def bench_most_likely(model: str = "smollm2-135m", time_budget: float = 60.0, sentence: str = BB_SENTENCE,
                      png: str | None = None, device: str | None = None, dtype: str | None = None,
                      bos_id: int | None = None) -> dict[str, Any]:
    """Branch and bound on the sentence grown one word at a time (the paper's Fig. 4 setting).

    Stops after the first prefix whose budget runs out. ``recompute_forwards``
    is what the paper's scheme would cost for the same expansions: every
    expansion scores each child by a full forward of its whole prefix.
    """
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.search import most_likely

    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    words = sentence.split(" ")
    from ppl_tok.common.jsonout import count_fields

    rows = []
    for k in tqdm(range(1, len(words) + 1), desc="growing the sentence", leave=False):
        text = " " + " ".join(words[:k])
        lm.clear_cache()
        mdd = compile_mdd(text, lm.vocab)
        r = most_likely(text, lm, time_budget=time_budget, mdd=mdd)
        rows.append({"words": k, "chars": len(text), **count_fields(mdd.count()), "seconds": r.seconds,
                     "expanded": r.expanded, "forwards": r.forwards, "recompute_forwards": r.recompute_forwards,
                     "optimal": r.optimal, "canonical_is_best": r.tokens == r.canonical,
                     "best_log_prob": r.log_prob, "canonical_log_prob": r.canonical_log_prob})
        if not r.optimal:
            break
    if png:
        from ppl_tok.common.plotting import pyplot

        plt = pyplot()

        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot([r["chars"] for r in rows], [r["seconds"] for r in rows], marker="o", label="seconds")
        ax.plot([r["chars"] for r in rows], [r["forwards"] for r in rows], marker="s", label="LM forwards")
        ax.set_yscale("log")
        ax.set_xlabel("string length (characters)")
        ax.set_title(f"Branch and bound on {model} (budget {time_budget:g} s per prefix)", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(png, dpi=150)
        plt.close(fig)
    return {"model": model, "time_budget": time_budget, "rows": rows, "png": png}


def format_most_likely(r: dict[str, Any]) -> list[str]:
    lines = [f"Branch and bound on {r['model']}, budget {r['time_budget']:g} s per prefix",
             f"{'words':>5} {'chars':>5} {'tokenizations':>14} {'secs':>7} {'expanded':>8} {'forwards':>8} "
             f"{'paper-style':>11} {'optimal':>7} {'canonical best':>14}"]
    for x in r["rows"]:
        lines.append(f"{x['words']:>5} {x['chars']:>5} {float(x['count']):>14.3g} {x['seconds']:>7.2f} {x['expanded']:>8} "
                     f"{x['forwards']:>8} {x['recompute_forwards']:>11} {str(x['optimal']):>7} "
                     f"{str(x['canonical_is_best']):>14}")
    return lines


# ------------------------------------------------------------------ engine
ENGINE_SENTENCE = " The capital of France is Paris."


def _raw_decode_rate(lm, batch: int, past: int, steps: int = 6) -> float:
    """Token-forwards/s of a raw batched decoding loop (KV cache, full-vocab log_softmax) after ``past`` tokens."""
    return _raw_forwards_per_s(lm, batch, steps=steps, prefix_len=max(1, past))


def _recording(lm):
    """:func:`~ppl_tok.lm.replay.recording` of a pooled (attention) model; nothing for a recurrent one."""
    import contextlib

    from ppl_tok.lm.replay import recording

    return recording(lm) if lm.pooled else contextlib.nullcontext()


def _against_replay(lm, rec, seconds: float, cpu_seconds: float) -> dict[str, Any]:
    """The engine's forwards (``rec``, run in ``seconds`` in all, ``cpu_seconds`` of this process's CPU time)
    against the bare model replaying them (:mod:`ppl_tok.lm.replay`): the raw baseline at the engine's own
    batch sizes, past lengths and padding. On the CPU the same ratios in CPU time too (``cpu_``: on a machine
    shared with other jobs the wall clock also measures the scheduler)."""
    from ppl_tok.lm.replay import replay

    if rec is None:
        return {}
    raw = replay(lm, rec.shapes)
    out = {"engine_forward_seconds": rec.seconds, "raw_at_engine_shapes_seconds": raw.seconds,
           "raw_at_engine_shapes_forwards_per_s": rec.forwards / raw.seconds,
           # the same forwards on both sides: the ratio of rates is the ratio of times
           "ratio_to_raw_at_engine_shapes": raw.seconds / seconds,
           "forward_ratio_to_raw_at_engine_shapes": raw.seconds / rec.seconds}
    if lm.device.type == "cpu":
        out.update({"cpu_seconds": cpu_seconds, "engine_forward_cpu_seconds": rec.cpu_seconds,
                    "raw_at_engine_shapes_cpu_seconds": raw.cpu_seconds,
                    "cpu_ratio_to_raw_at_engine_shapes": raw.cpu_seconds / cpu_seconds,
                    "cpu_forward_ratio_to_raw_at_engine_shapes": raw.cpu_seconds / rec.cpu_seconds})
    return out


def _qa_pairs(questions) -> tuple[list[str], list[str]]:
    return [continuation(c) for q in questions for c in q.choices], [q.context for q in questions for c in q.choices]


def bench_engine(model: str = "smollm2-135m", data: str | Path | None = None,
                 questions: int = 20, num_samples: int = 64, batch_questions: int = 8, big_n: int = 256,
                 device: str | None = None, dtype: str | None = None, bos_id: int | None = None) -> dict[str, Any]:
    """The batched engine against a raw batched forward and against one ``marginal`` call per answer.

    (a) OpenBookQA questions/min: look-ahead IS with ``num_samples`` particles for
    every answer, ``batch_questions`` questions per engine run, against one
    :func:`~ppl_tok.infer.importance.marginal` call per answer (0.1.0's way of running
    the study); (b) the engine's token-forwards/s against a raw decoding loop of
    the same model at the engine's mean batch size and context length (unpadded
    pasts of the mean length), and against the bare model replaying the engine's
    own forwards (:mod:`ppl_tok.lm.replay`: the same batch sizes, past lengths and
    padding), for the whole run and for the time inside the forwards;
    (c) look-ahead IS on one sentence with ``big_n`` particles: particle-steps/s
    against the raw forward at batch ``big_n``, and its forwards against their replay.
    ``data``: a multiple-choice data file (default: OpenBookQA's dev split under
    :data:`ppl_tok.datasets.DATA_ROOT`).
    """
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.importance import marginal, marginals

    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    qs = load_questions(data_file("openbookqa", "dev") if data is None else data)[:questions]
    out: dict[str, Any] = {"model": model, **_device_case(lm), "questions": len(qs),
                           "num_samples": num_samples, "batch_questions": batch_questions,
                           "threads": torch.get_num_threads()}
    # (a) questions/min, batched engine
    lm.clear_cache()
    lm.stats.reset()
    reset_peak_memory(lm.device)
    steps = 0

    def batched() -> None:
        nonlocal steps
        for lo in tqdm(range(0, len(qs), batch_questions), desc="(a) batched engine", leave=False):
            texts, contexts = _qa_pairs(qs[lo: lo + batch_questions])
            for r in marginals(texts, lm, num_samples, contexts=contexts):
                steps += sum(len(s) for s in r.samples)

    cpu = time.process_time()
    with _recording(lm) as rec:
        _, secs = _timed(lm.device, batched)
    cpu = time.process_time() - cpu
    batched_peak = peak_memory_mb(lm.device)
    fwd, calls = lm.stats.forwards, max(1, lm.stats.calls)
    mean_batch = max(1, round(fwd / calls))
    past = round(sum(len(lm.prefix_ids(q.context)) for q in qs) / max(1, len(qs))) + 3
    raw = _raw_decode_rate(lm, mean_batch, past)
    out["batched"] = {"seconds": secs, "questions_per_min": 60 * len(qs) / secs, "forwards": fwd, "calls": calls,
                      "mean_batch": mean_batch, "forwards_per_s": fwd / secs, "particle_steps_per_s": steps / secs,
                      "raw_forwards_per_s_at_mean_batch": raw, "ratio_to_raw": fwd / secs / raw,
                      "mean_context_tokens": past, "peak_device_mb": batched_peak,
                      **_against_replay(lm, rec, secs, cpu)}
    # (a') one marginal call per answer, same model
    lm.clear_cache()

    def per_answer() -> None:
        for q in tqdm(qs, desc="(a') one call per answer", leave=False):
            for c in q.choices:
                marginal(continuation(c), lm, num_samples, context=q.context, seed=0)

    _, secs = _timed(lm.device, per_answer)
    out["per_answer"] = {"seconds": secs, "questions_per_min": 60 * len(qs) / secs}
    out["speedup_over_per_answer"] = out["batched"]["questions_per_min"] / out["per_answer"]["questions_per_min"]
    # (c) one sentence, many particles
    lm.clear_cache()
    lm.stats.reset()
    reset_peak_memory(lm.device)
    cpu = time.process_time()
    with _recording(lm) as rec:
        r, secs = _timed(lm.device, marginal, ENGINE_SENTENCE, lm, big_n, seed=0)
    cpu = time.process_time() - cpu
    many_peak = peak_memory_mb(lm.device)
    psteps = sum(len(s) for s in r.samples)
    raw_n = _raw_decode_rate(lm, big_n, 1 + len(r.canonical))
    out["many_particles"] = {"text": ENGINE_SENTENCE, "num_samples": big_n, "seconds": secs,
                             "forwards": r.forwards, "particle_steps_per_s": psteps / secs,
                             "raw_forwards_per_s_at_n": raw_n, "ratio_to_raw": psteps / secs / raw_n,
                             "peak_device_mb": many_peak, "forwards_per_s": r.forwards / secs,
                             **_against_replay(lm, rec, secs, cpu)}
    out["peak_rss_mb"] = _peak_rss_mb()
    if peak_memory_mb(lm.device) is not None:  # the largest of the cases (each reset its own peak)
        out["peak_gpu_mb"] = max(batched_peak, many_peak)
    return out


def _replay_line(x: dict[str, Any]) -> list[str]:
    if "ratio_to_raw_at_engine_shapes" not in x:
        return []
    cpu = "" if "cpu_ratio_to_raw_at_engine_shapes" not in x else (
        f"; in CPU time {x['cpu_ratio_to_raw_at_engine_shapes']:.2f} and {x['cpu_forward_ratio_to_raw_at_engine_shapes']:.2f}")
    return [f"    against the bare model replaying the engine's forwards (same batches, pasts, padding): "
            f"{x['raw_at_engine_shapes_forwards_per_s']:.0f}/s; whole run {x['ratio_to_raw_at_engine_shapes']:.2f}, "
            f"inside the forwards {x['forward_ratio_to_raw_at_engine_shapes']:.2f} "
            f"({x['engine_forward_seconds']:.1f} s against {x['raw_at_engine_shapes_seconds']:.1f} s){cpu}"]


def format_engine(r: dict[str, Any]) -> list[str]:
    b, p, m = r["batched"], r["per_answer"], r["many_particles"]
    return [
        f"Engine on {r['model']} ({r['device']}, {r['threads']} threads): {r['questions']} OpenBookQA questions, "
        f"look-ahead N={r['num_samples']}",
        f"(a) batched ({r['batch_questions']} questions per run): {b['questions_per_min']:.1f} questions/min; "
        f"one marginal call per answer: {p['questions_per_min']:.1f} questions/min; "
        f"speedup {r['speedup_over_per_answer']:.2f}x",
        f"(b) engine {b['forwards_per_s']:.0f} token-forwards/s at mean batch {b['mean_batch']}; raw decoding at that batch {b['raw_forwards_per_s_at_mean_batch']:.0f}"
        f"/s (unpadded pasts of ~{b['mean_context_tokens']}): ratio {b['ratio_to_raw']:.2f}; "
        f"{b['particle_steps_per_s']:.0f} particle-steps/s",
        *_replay_line(b),
        f"(c) {m['text']!r}, N={m['num_samples']}: {m['particle_steps_per_s']:.0f} particle-steps/s "
        f"({m['forwards']} forwards, {m['seconds']:.1f} s); raw at batch {m['num_samples']} "
        f"{m['raw_forwards_per_s_at_n']:.0f}/s: ratio {m['ratio_to_raw']:.2f}",
        *_replay_line(m),
        f"peak RSS {r['peak_rss_mb']:.0f} MB" + (f", peak GPU {r['peak_gpu_mb']:.0f} MB" if "peak_gpu_mb" in r else ""),
    ]


def memory_case(case: str, model: str | None = None, device: str | None = None, *, num_samples: int = 64,
                text_bytes: int = 2048, extensions: int = 1000) -> dict[str, Any]:
    """One memory measurement, meant to run in a fresh process (peak RSS is per process).

    ``"long-text"``: look-ahead IS, N=64, on a 2 kB text (SmolLM2 by default);
    ``"extensions"``: one path of 1,000 single-token extensions (Gemma by default),
    RSS before and after, and after ``clear_cache()``. On CUDA, the peak device
    memory of the case too.
    """
    import resource

    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.importance import marginal

    def rss_now() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20

    if case == "long-text":
        lm = load_lm(model or "smollm2-135m", device=device)
        text = (" " + BB_SENTENCE) * 16
        text = text[:text_bytes]
        before = rss_now()
        reset_peak_memory(lm.device)
        r, secs = _timed(lm.device, marginal, text, lm, num_samples, seed=0)
        return {"case": case, "model": lm.name, **_device_case(lm), "bytes": len(text.encode()),
                "num_samples": num_samples,
                "log_marginal": r.log_marginal, "forwards": r.forwards, "seconds": secs,
                "rss_before_mb": before, "peak_rss_mb": _peak_rss_mb(), "pool_mb": lm.pool.nbytes() / 2**20,
                "peak_device_mb": peak_memory_mb(lm.device)}
    if case == "extensions":
        lm = load_lm(model or "gemma3-270m", device=device)
        reset_peak_memory(lm.device)
        state = lm.initial("Once upon a time")
        before = rss_now()
        g = torch.Generator().manual_seed(0)
        for _ in tqdm(range(extensions), desc="extensions", leave=False):
            tok = int(torch.randint(1000, 20000, (1,), generator=g))
            state = lm.extend([state], [tok])[0]
        after = rss_now()
        del state
        lm.clear_cache()
        return {"case": case, "model": lm.name, **_device_case(lm), "extensions": extensions, "rss_before_mb": before,
                "rss_after_mb": after, "growth_mb": after - before, "rss_after_clear_mb": rss_now(),
                "peak_rss_mb": _peak_rss_mb(), "peak_device_mb": peak_memory_mb(lm.device)}
    raise ValueError(f"unknown memory case {case!r}: expected 'long-text' or 'extensions'")


def bench_memory(device: str | None = None, model: str | None = None, **sizes: int) -> dict[str, Any]:
    """Each memory case in a fresh Python process (``model``: the one model of both; ``sizes``: of :func:`memory_case`)."""
    import json
    import subprocess
    import sys

    out = {}
    for case in ("long-text", "extensions"):
        code = ("import json, sys; from ppl_tok.bench.tokenization import memory_case; "
                f"print(json.dumps(memory_case({case!r}, model={model!r}, device={device!r}, **{sizes!r})))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        if proc.returncode:
            raise RuntimeError(f"memory case {case} failed:\n{proc.stderr[-2000:]}")
        out[case] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def format_memory(r: dict[str, Any]) -> list[str]:
    a, b = r["long-text"], r["extensions"]

    def device(x: dict[str, Any]) -> str:
        return "" if x.get("peak_device_mb") is None else f", peak {x['device']} {x['peak_device_mb']:.0f} MB"

    return [f"{a['model']}, {a['bytes']}-byte text, look-ahead N={a['num_samples']}: peak RSS {a['peak_rss_mb']:.0f} MB "
            f"(KV pool {a['pool_mb']:.0f} MB, {a['forwards']} forwards, {a['seconds']:.0f} s){device(a)}",
            f"{b['model']}, {b['extensions']} extensions: RSS {b['rss_before_mb']:.0f} -> {b['rss_after_mb']:.0f} MB "
            f"(growth {b['growth_mb']:.0f} MB); after clear_cache {b['rss_after_clear_mb']:.0f} MB{device(b)}"]


def bench_estimators(model: str = "smollm2-135m", strings: tuple[str, ...] = MARGINAL_STRINGS,
                     num_samples: int = 64, seed: int = 0, device: str | None = None, dtype: str | None = None,
                     bos_id: int | None = None) -> dict[str, Any]:
    """Error against LM forwards: look-ahead IS, SMC, stratified IS and the certified bracket.

    The truth is the exact marginal (enumeration) where a string has at most
    10,000 tokenizations, else a bracket closed to 1e-6 nats. Every estimator
    starts from an empty cache, so its forwards are its own.
    """
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.exact import exact_marginal
    from ppl_tok.infer.importance import marginal
    from ppl_tok.infer.search import marginal_bounds
    from ppl_tok.infer.smc import smc_marginal

    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    rows = []
    for s in tqdm(strings, desc="estimators", leave=False):
        lm.clear_cache()
        truth = (exact_marginal(s, lm).log_marginal if compile_mdd(s, lm.vocab).count() <= 10_000
                 else marginal_bounds(s, lm, tolerance=1e-6, budget=5000).estimate)
        runs = [(f"look-ahead IS N={num_samples}", lambda s=s: marginal(s, lm, num_samples, seed=seed)),
                (f"SMC N={num_samples}", lambda s=s: smc_marginal(s, lm, num_samples, seed=seed)),
                (f"stratified IS N={num_samples}", lambda s=s: marginal(s, lm, num_samples, guide="stratified",
                                                                          seed=seed)),
                ("certified bracket 1e-3", lambda s=s: marginal_bounds(s, lm, tolerance=1e-3))]
        for name, fn in runs:
            lm.clear_cache()
            lm.stats.reset()
            res, secs = _timed(lm.device, fn)
            est = res.estimate if hasattr(res, "estimate") else res.log_marginal
            rows.append({"text": s, "estimator": name, "estimate": est, "truth": truth, "error": abs(est - truth),
                         "log_se": getattr(res, "log_se", None), "forwards": lm.stats.forwards,
                         "seconds": secs})
    return {"model": model, "num_samples": num_samples, "seed": seed, "rows": rows}


def format_estimators(r: dict[str, Any]) -> list[str]:
    lines = [f"Error against LM forwards on {r['model']} (seed {r['seed']})",
             f"{'string':36} {'estimator':24} {'error':>9} {'SE':>8} {'forwards':>9} {'seconds':>8}"]
    for a in r["rows"]:
        se = "" if a["log_se"] is None else f"{a['log_se']:8.4f}"
        lines.append(f"{a['text']!r:36} {a['estimator']:24} {a['error']:9.4f} {se:>8} {a['forwards']:9d} "
                     f"{a['seconds']:8.2f}")
    return lines
