"""``python -m benchmarks marginal`` and ``bench estimators``: the vectorised importance sampler against sequential Pyro
(the same estimator, the same LM), and the marginal's estimators against the exact answer at equal cost."""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from ppl_tok.bench.timing import device_case, marginal_throughput, peak_rss_mb, timed, uncached
from ppl_tok.mdd import compile_mdd


MARGINAL_STRINGS = (" Tokens", " tongueless", " Hypnopaturist", " The capital of France is Paris.")


QUICK_MARGINAL: dict[str, Any] = {"sizes": (8,), "baseline_samples": 4, "strings": (" Tokens",)}


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
    out: dict[str, Any] = {"model": model, **device_case(lm)}
    # (a) throughput
    rows = marginal_throughput(lm, sentence, sizes)
    out["throughput"] = rows
    # (b) stock sequential Pyro with an uncached LM call per step
    text = " tongueless"
    naive = uncached(lm)
    mdd = compile_mdd(text, lm.vocab)
    pyro.set_rng_seed(0)
    seq, seq_s = timed(lm.device, Importance(tokenization_model, lookahead_guide, num_samples=baseline_samples).run,
                        naive, mdd)
    lm.clear_cache()
    fast, fast_s = timed(lm.device, marginal, text, lm, baseline_samples, seed=0)
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
                                  "paper_scheme": paper / 64, "peak_rss_mb": peak_rss_mb()}
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
            res, secs = timed(lm.device, fn)
            est = res.estimate if hasattr(res, "estimate") else res.log_marginal
            acc.append({"text": s, "estimator": name, "estimate": est, "truth": truth, "error": abs(est - truth),
                        "seconds": secs, "chars_per_s": len(s) / secs})
    out["accuracy"] = acc
    # genlm-bytes is compared on next-byte log-probs, in its own environment: `python -m benchmarks strings genlm PY`
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
    lines.append("genlm-bytes: see `python -m benchmarks strings genlm PY` (docs/benchmarks.md)")
    return lines


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
            res, secs = timed(lm.device, fn)
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
