"""``ppl-tok bench engine`` and ``bench memory``: the batched engine's questions per minute against the raw batched
forward (and the bare model replaying the engine's own forwards), and the peak memory of its cases."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ppl_tok.bench.timing import device_case, peak_rss_mb, raw_decode_rate, timed

from ppl_tok.datasets import continuation, data_file, load_questions
from ppl_tok.lm.device import peak_memory_mb, reset_peak_memory

#: branch and bound's long sentence (the paper's Fig. 4 setting), also the engine's long memory case
BB_SENTENCE = ("Language models typically tokenize text into subwords, utilizing a learned deterministic set of "
               "merge rules to aggregate tokens.")


# ------------------------------------------------------------------ engine
ENGINE_SENTENCE = " The capital of France is Paris."


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

    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    qs = load_questions(data_file("openbookqa", "dev") if data is None else data)[:questions]
    out: dict[str, Any] = {"model": model, **device_case(lm), "questions": len(qs),
                           "num_samples": num_samples, "batch_questions": batch_questions,
                           "threads": torch.get_num_threads()}
    out["batched"] = _engine_batched(lm, qs, num_samples, batch_questions)
    out["per_answer"] = _engine_per_answer(lm, qs, num_samples)
    out["speedup_over_per_answer"] = out["batched"]["questions_per_min"] / out["per_answer"]["questions_per_min"]
    out["many_particles"] = _engine_many_particles(lm, big_n)
    out["peak_rss_mb"] = peak_rss_mb()
    if peak_memory_mb(lm.device) is not None:  # the largest of the cases (each reset its own peak)
        out["peak_gpu_mb"] = max(out["batched"]["peak_device_mb"], out["many_particles"]["peak_device_mb"])
    return out


def _engine_batched(lm: Any, qs: list, num_samples: int, batch_questions: int) -> dict[str, Any]:
    """(a) questions/min of the batched engine, and its forwards against the raw decoding loop and their replay."""
    from ppl_tok.infer.importance import marginals

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
        _, secs = timed(lm.device, batched)
    cpu = time.process_time() - cpu
    batched_peak = peak_memory_mb(lm.device)
    fwd, calls = lm.stats.forwards, max(1, lm.stats.calls)
    mean_batch = max(1, round(fwd / calls))
    past = round(sum(len(lm.prefix_ids(q.context)) for q in qs) / max(1, len(qs))) + 3
    raw = raw_decode_rate(lm, mean_batch, past)
    return {"seconds": secs, "questions_per_min": 60 * len(qs) / secs, "forwards": fwd, "calls": calls,
            "mean_batch": mean_batch, "forwards_per_s": fwd / secs, "particle_steps_per_s": steps / secs,
            "raw_forwards_per_s_at_mean_batch": raw, "ratio_to_raw": fwd / secs / raw,
            "mean_context_tokens": past, "peak_device_mb": batched_peak, **_against_replay(lm, rec, secs, cpu)}


def _engine_per_answer(lm: Any, qs: list, num_samples: int) -> dict[str, Any]:
    """(a') one ``marginal`` call per answer, same model (0.1.0's way of running the study)."""
    from ppl_tok.infer.importance import marginal

    lm.clear_cache()

    def per_answer() -> None:
        for q in tqdm(qs, desc="(a') one call per answer", leave=False):
            for c in q.choices:
                marginal(continuation(c), lm, num_samples, context=q.context, seed=0)

    _, secs = timed(lm.device, per_answer)
    return {"seconds": secs, "questions_per_min": 60 * len(qs) / secs}


def _engine_many_particles(lm: Any, big_n: int) -> dict[str, Any]:
    """(c) one sentence, ``big_n`` particles: particle-steps/s against the raw forward at batch ``big_n``."""
    from ppl_tok.infer.importance import marginal

    lm.clear_cache()
    lm.stats.reset()
    reset_peak_memory(lm.device)
    cpu = time.process_time()
    with _recording(lm) as rec:
        r, secs = timed(lm.device, marginal, ENGINE_SENTENCE, lm, big_n, seed=0)
    cpu = time.process_time() - cpu
    many_peak = peak_memory_mb(lm.device)
    psteps = sum(len(s) for s in r.samples)
    raw_n = raw_decode_rate(lm, big_n, 1 + len(r.canonical))
    return {"text": ENGINE_SENTENCE, "num_samples": big_n, "seconds": secs,
            "forwards": r.forwards, "particle_steps_per_s": psteps / secs,
            "raw_forwards_per_s_at_n": raw_n, "ratio_to_raw": psteps / secs / raw_n,
            "peak_device_mb": many_peak, "forwards_per_s": r.forwards / secs,
            **_against_replay(lm, rec, secs, cpu)}


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
        r, secs = timed(lm.device, marginal, text, lm, num_samples, seed=0)
        return {"case": case, "model": lm.name, **device_case(lm), "bytes": len(text.encode()),
                "num_samples": num_samples,
                "log_marginal": r.log_marginal, "forwards": r.forwards, "seconds": secs,
                "rss_before_mb": before, "peak_rss_mb": peak_rss_mb(), "pool_mb": lm.pool.nbytes() / 2**20,
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
        return {"case": case, "model": lm.name, **device_case(lm), "extensions": extensions, "rss_before_mb": before,
                "rss_after_mb": after, "growth_mb": after - before, "rss_after_clear_mb": rss_now(),
                "peak_rss_mb": peak_rss_mb(), "peak_device_mb": peak_memory_mb(lm.device)}
    raise ValueError(f"unknown memory case {case!r}: expected 'long-text' or 'extensions'")


def bench_memory(device: str | None = None, model: str | None = None, repeat: int = 1, **sizes: int) -> dict[str, Any]:
    """Each memory case in a fresh Python process, ``repeat`` times (``model``: the one model of both; ``sizes``:
    of :func:`memory_case`): the first run's figures, each run's peak RSS and their spread
    (:func:`ppl_tok.bench.memory.spread`)."""
    import json
    import subprocess
    import sys

    from ppl_tok.bench.memory import spread

    out = {}
    for case in ("long-text", "extensions"):
        code = ("import json, sys; from ppl_tok.bench.engine import memory_case; "
                f"print(json.dumps(memory_case({case!r}, model={model!r}, device={device!r}, **{sizes!r})))")
        runs = []
        for _ in range(repeat):
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
            if proc.returncode:
                raise RuntimeError(f"memory case {case} failed:\n{proc.stderr[-2000:]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        out[case] = {**runs[0], "runs": [r["peak_rss_mb"] for r in runs],
                     "spread": spread([r["peak_rss_mb"] for r in runs])}
    return out


def format_memory(r: dict[str, Any]) -> list[str]:
    from ppl_tok.bench.memory import format_spread

    a, b = r["long-text"], r["extensions"]

    def device(x: dict[str, Any]) -> str:
        return "" if x.get("peak_device_mb") is None else f", peak {x['device']} {x['peak_device_mb']:.0f} MB"

    return [f"{a['model']}, {a['bytes']}-byte text, look-ahead N={a['num_samples']}: peak RSS {a['peak_rss_mb']:.0f} MB "
            f"(KV pool {a['pool_mb']:.0f} MB, {a['forwards']} forwards, {a['seconds']:.0f} s){device(a)}",
            f"{b['model']}, {b['extensions']} extensions: RSS {b['rss_before_mb']:.0f} -> {b['rss_after_mb']:.0f} MB "
            f"(growth {b['growth_mb']:.0f} MB); after clear_cache {b['rss_after_clear_mb']:.0f} MB{device(b)}",
            *(format_spread(case, r[case]["spread"]) for case in ("long-text", "extensions")
              if r[case]["spread"]["runs"] > 1)]

