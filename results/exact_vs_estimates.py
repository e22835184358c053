"""Where does a marginal classifier's accuracy come from: the marginal itself, or the estimator's noise?

For a run scored with ``--scores exact``, compare on the test split the exact-marginal classifier (certified
brackets) with the canonical one and with the importance-sampling marginal at the tuned k and at all N:
accuracy differences with paired bootstrap intervals, and how often the two pick the same answer; and per
answer, how far the exact log marginal lies above the canonical log probability and the N-sample importance
estimate from the exact log marginal (percentiles, nats); and how often the proposal's samples are canonical,
or start with the canonical tokenization's first token. A run without exact scores gets the proposal's
statistics only (how often samples are canonical, and the N-sample estimate against the canonical probability).
Usage: python results/exact_vs_estimates.py RUN_DIR [--limit L]
"""

import argparse
import json

import numpy as np

from ppl_tok.scorings import classify as C
from ppl_tok.scorings.registry import record_arrays
from ppl_tok.qa.store import SCORES_FILE, read_records, read_settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--limit", type=int, help="the first L questions of each split only")
    ap.add_argument("--k", type=int, help="the marginal's k (default: the tuned k in report.json)")
    args = ap.parse_args()
    settings = read_settings(args.run)
    size = settings["splits"]["test"] if args.limit is None else min(args.limit, settings["splits"]["test"])
    records = list(read_records(f"{args.run}/{SCORES_FILE}"))
    t = C.split_scores(records, "test", size, record_arrays())
    out = {"questions": size, **proposal_statistics(t, records, size)}
    if "exact" in t.optional:
        k = args.k or json.load(open(f"{args.run}/report.json"))["tuned"]["k"]
        out.update(exact_comparison(t, k))
    print(json.dumps(out, indent=1))


def proposal_statistics(t: C.SplitScores, records: list[dict], size: int) -> dict:
    """How the look-ahead proposal's samples relate to the canonical tokenization (no exact scores needed)."""
    all_n = C.marginal_scores(t)
    out = {"is_estimate_below_canonical": float((all_n[t.valid] < t.canonical[t.valid]).mean()),
           "answers_with_a_canonical_sample": float(t.is_canonical.any(-1)[t.valid].mean()),
           "canonical_share_of_samples": float(t.is_canonical[t.valid].mean())}
    # the look-ahead proposal's first step: does a sample begin with the canonical tokenization's first token?
    first = [x[0] == c["canonical"][0] for r in records if r["kind"] == "is" and r["split"] == "test"
             and r["index"] < size for c in r["choices"] for x in c["samples"]]
    out["samples_starting_with_the_canonical_first_token"] = float(np.mean(first))
    return out


def exact_comparison(t: C.SplitScores, k: int) -> dict:
    """The exact-marginal classifier against canonical and the IS marginal, and the IS estimate's error."""
    exact, certified = C.exact_scores(t)
    picks = {"canonical": C.canonical_scores(t), f"marginal k={k}": C.marginal_scores(t, k),
             f"marginal k={t.num_samples}": C.marginal_scores(t),
             # unbiased too, with the canonical term exact: p(v*) + (1/N) sum_i w_i 1[v_i != v*]
             "canonical+rest": C.canonical_plus_rest_scores(t), "exact": exact}
    hits = {name: C.correct(s, t) for name, s in picks.items()}
    argmax = {name: C.predictions(s, t) for name, s in picks.items()}
    out = {"certified": int(certified.sum()),
           "accuracy": {name: float(h.mean()) for name, h in hits.items()}, "exact_minus": {}, "same_answer_as_exact": {}}
    for name in picks:
        if name != "exact":
            out["exact_minus"][name] = C.paired_bootstrap(hits["exact"], hits[name])
            out["same_answer_as_exact"][name] = float((argmax[name] == argmax["exact"]).mean())
    # per answer: how far the exact marginal is above the canonical probability, and the IS estimate from it
    valid = t.valid & np.isfinite(exact)
    gain = (exact - t.canonical)[valid]
    all_n = picks[f"marginal k={t.num_samples}"]
    err = (all_n - exact)[valid]
    pct = [10, 50, 90, 99]
    out["log_marginal_minus_log_canonical"] = dict(zip(map(str, pct), np.percentile(gain, pct).tolist()))
    out["is_estimate_minus_log_marginal"] = dict(zip(map(str, pct), np.percentile(err, pct).tolist()))
    nbytes = t.nbytes[valid]
    out["is_error_by_answer_bytes"] = {
        f"{lo + 1}-{hi}": {"answers": int(m.sum()), "median_nats": float(np.median(err[m])),
                          "median_nats_per_byte": float(np.median(err[m] / nbytes[m]))}
        for lo, hi in ((0, 10), (10, 20), (20, 40), (40, 10_000)) if (m := (nbytes > lo) & (nbytes <= hi)).any()}
    out["is_error_length_correlation"] = float(np.corrcoef(nbytes, err)[0, 1])
    return out


if __name__ == "__main__":
    main()
