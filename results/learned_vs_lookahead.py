"""The QA study's marginal classifier with a learned proposal beside the look-ahead's and the exact marginal's.

Two run folders of ``ppl-tok qa run`` on the same questions (same dataset, limit, seed, N): one with
``--proposal learned --proposal-file F --scores exact``, one with the look-ahead (the default). On the test
questions both have scored (the first Q of the split, a run in progress included), per classifier: accuracy with
a 95% percentile bootstrap interval over questions, and paired bootstrap differences, and how often each picks the exact marginal's answer. The marginal's k is tuned
on the tune questions both have scored (as ``qa report`` does: the k of best mean accuracy over random k-subsets),
and also given at all N. Also the IS estimates' error against the exact log marginal (certified brackets, answers
whose bracket closed), per proposal.
Usage: python results/learned_vs_lookahead.py LEARNED_RUN LOOKAHEAD_RUN [--out summary.json]
"""

import argparse
import json

import numpy as np

from ppl_tok.common.bootstrap import bootstrap_mean
from ppl_tok.scorings import classify as C
from ppl_tok.scorings.registry import record_arrays
from ppl_tok.qa.report import scored_prefix
from ppl_tok.qa.store import SCORES_FILE, read_records, read_settings

def tuned_k(t: C.SplitScores) -> int:
    """The k of best mean accuracy over 256 random k-subsets, k = 1..N (``qa report``'s tuning)."""
    ks = np.arange(1, t.num_samples + 1)
    return C.best_k(ks, C.choose_k(t, ks, runs=256, seed=0)["mean"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("learned")
    ap.add_argument("lookahead")
    ap.add_argument("--out")
    args = ap.parse_args()
    runs = {"learned": args.learned, "lookahead": args.lookahead}
    records = {name: list(read_records(f"{d}/{SCORES_FILE}")) for name, d in runs.items()}
    settings = {name: read_settings(d) for name, d in runs.items()}
    size = min(scored_prefix(r, settings[n]["splits"]) for n, r in records.items())
    tables = {name: {s: C.split_scores(r, s, size, record_arrays()) for s in ("tune", "test")} for name, r in records.items()}
    for s in ("tune", "test"):
        assert tables["learned"][s].ids == tables["lookahead"][s].ids, "the two runs scored other questions"
    learned, lookahead = tables["learned"]["test"], tables["lookahead"]["test"]
    ks = {name: tuned_k(tables[name]["tune"]) for name in runs}
    exact, certified = C.exact_scores(learned)
    picks = {"canonical": C.canonical_scores(learned),
             f"learned marginal, tuned k={ks['learned']}": C.marginal_scores(learned, ks["learned"]),
             f"learned marginal, all N={learned.num_samples}": C.marginal_scores(learned),
             f"look-ahead marginal, tuned k={ks['lookahead']}": C.marginal_scores(lookahead, ks["lookahead"]),
             f"look-ahead marginal, all N={lookahead.num_samples}": C.marginal_scores(lookahead),
             "exact marginal (certified brackets)": exact}
    hits = {name: C.correct(s, learned) for name, s in picks.items()}
    out = {"dataset": settings["learned"]["dataset"], "model": settings["learned"]["model"],
           "num_samples": learned.num_samples, "questions_per_split": size,
           "proposal_sha256": settings["learned"].get("proposal_sha256"),
           "proposal_weights": settings["learned"].get("proposal_weights"),
           "test_certified": int(certified.sum()), "tuned_k": ks,
           "accuracy": {n: bootstrap_mean(h.astype(float), seed=0)._asdict() for n, h in hits.items()}}
    argmax = {n: C.predictions(s, learned) for n, s in picks.items()}
    out["same_answer_as_exact"] = {n: float((a == argmax["exact marginal (certified brackets)"]).mean())
                                   for n, a in argmax.items()}
    names = list(picks)
    out["paired_differences"] = {
        f"{a} - {b}": C.paired_bootstrap(hits[a], hits[b])
        for a, b in [(names[2], names[4]), (names[1], names[3]), (names[5], names[2]), (names[5], names[4]),
                     (names[2], names[0]), (names[4], names[0])]}
    valid = learned.valid & np.isfinite(exact)
    out["is_error_vs_exact_nats"] = {}
    for name, t in (("learned", learned), ("lookahead", lookahead)):
        err = np.abs(C.marginal_scores(t) - exact)[valid]
        out["is_error_vs_exact_nats"][name] = {"answers": int(valid.sum()), "median": float(np.median(err)),
                                               "p90": float(np.percentile(err, 90)), "mean": float(err.mean())}
    # no tuning in the all-N marginal: its agreement with the exact classifier on the tune questions too
    both = {}
    for s in ("tune", "test"):
        ex = C.predictions(C.exact_scores(tables["learned"][s])[0], tables["learned"][s])
        for name in runs:
            t = tables[name][s]
            both.setdefault(name, []).extend((C.predictions(C.marginal_scores(t), t) == ex).tolist())
    out["all_n_same_answer_as_exact_tune_and_test"] = {n: {"questions": len(v), "share": float(np.mean(v))}
                                                       for n, v in both.items()}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
