"""``python -m benchmarks most-likely``: branch and bound's incumbent and bound against time on a long sentence."""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from ppl_tok.bench.engine import BB_SENTENCE
from ppl_tok.mdd import compile_mdd




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
