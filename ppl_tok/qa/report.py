"""The report of a QA run: every classifier on every split, tuning, intervals, tables and plots.

:func:`evaluate` computes ``report.json``'s object from the stored scores;
:func:`write_report` writes ``report.json``, ``report.md`` (tables in the
layout of the paper's Tables 1 and 2, with the paper's numbers beside them)
and the PNG plots of Figs. 5 (accuracy against k) and 6 (accuracy against alpha).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ppl_tok.scorings import classify as C
from ppl_tok.proposals.registry import DEFAULT_PROPOSAL
from ppl_tok.qa.paper import TUNED_MARGINAL, TUNED_MIXTURE
from ppl_tok.qa.run import check_settings, optional_scores
from ppl_tok.scorings import Scoring, classifier_scoring, classifiers
from ppl_tok.scorings.records import CORE
from ppl_tok.scorings.registry import baseline_classifier, record_arrays
from ppl_tok.qa.store import (
    SCORES_FILE,
    SETTINGS_FILE,
    StoreError,
    encode_logs,
    read_records,
    read_settings,
    read_timing,
    records_digest,
    run_num_samples,
)

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
FIG5 = "fig5-choose-k.png"
FIG6 = "fig6-mixture.png"


def split_scores(records: Iterable[dict[str, Any]], split: str, size: int) -> C.SplitScores:
    """The stored scores of ``split``'s first ``size`` questions as arrays (:func:`ppl_tok.scorings.classify.split_scores`),
    every registered scoring's record kind read as it reads it (:func:`~ppl_tok.scorings.registry.record_arrays`)."""
    return C.split_scores(records, split, size, record_arrays())


def _classifier_scores(tuned: dict[str, Any]) -> dict[str, Callable[[C.SplitScores, bool], np.ndarray]]:
    """Each classifier (:func:`ppl_tok.scorings.classifiers`, in report order) as ``(split scores, norm) -> [Q, C]
    scores``: its scoring's :meth:`~ppl_tok.scorings.Scoring.classify`, k and alpha from ``tuned``."""
    return {c: functools.partial(_scores_of, classifier_scoring(c), c, tuned=tuned) for c in classifiers()}


def _scores_of(scoring: Scoring, classifier: str, t: C.SplitScores, norm: bool, *, tuned: dict[str, Any]) -> np.ndarray:
    return scoring.classify(classifier, t, norm, tuned)


def _available(name: str, t: C.SplitScores) -> bool:
    """Whether the split holds the scores the classifier needs: the core record's, or its scoring's own kind."""
    kind = classifier_scoring(name).stored_kind
    return kind not in optional_scores() or kind in t.optional


def _check_labels(records: list[dict[str, Any]], path: Path) -> None:
    """Every record of a question gives it the same id, label and number of answers (else one was edited)."""
    first: dict[tuple[str, int], tuple[str, int, int, str]] = {}
    for r in records:
        seen = first.setdefault((r["split"], r["index"]), (r["id"], r["label"], len(r["choices"]), r["kind"]))
        if seen[:3] != (r["id"], r["label"], len(r["choices"])):
            raise StoreError(f"{path}: the {r['kind']!r} and {seen[3]!r} records of {r['split']} question "
                             f"{r['index']} disagree (id, label, answers: {(r['id'], r['label'], len(r['choices']))} "
                             f"against {seen[:3]}); the file was edited or damaged")


def scored_prefix(records: list[dict[str, Any]], splits: dict[str, int]) -> int:
    """The largest ``L`` such that the first ``min(L, size)`` questions of every split have their ``"is"`` scores.

    A run scores its splits' questions in step (tune 0, test 0, tune 1, ...), so a run in progress
    has such a prefix; it is ``max(splits.values())`` once the run is finished.
    """
    scored: dict[str, set[int]] = {s: set() for s in splits}
    for r in records:
        if r["kind"] == CORE and r["split"] in scored:
            scored[r["split"]].add(r["index"])
    prefix = max(splits.values(), default=0)
    for split, size in splits.items():
        first_missing = next((i for i in range(size) if i not in scored[split]), None)
        if first_missing is not None:
            prefix = min(prefix, first_missing)
    return prefix


def evaluate(folder: str | Path, *, runs: int = 256, seed: int = 0, resamples: int = 10_000,
             alphas: np.ndarray = C.DEFAULT_ALPHAS, limit: int | None = None,
             complete: bool = False) -> dict[str, Any]:
    """Every classifier of :mod:`ppl_tok.scorings.classify` on every split of the run in ``folder``.

    :param limit: evaluate the first ``limit`` questions of each split only (a run still in
        progress scores the splits' questions in step, so its first questions are complete).
    :param complete: evaluate the largest such prefix that is all scored (:func:`scored_prefix`):
        ``limit`` is set to it (``None`` once the run is finished).
    :param runs: random k-subsets per k for the choose-k curves (the paper: 256).
    :param seed: seeds the choose-k subsets and the bootstrap.
    :param resamples: paired bootstrap resamples.
    """
    folder = Path(folder)
    settings = check_settings(read_settings(folder), str(folder / SETTINGS_FILE))
    records = list(read_records(folder / SCORES_FILE, samples=run_num_samples(settings)))
    _check_labels(records, folder / SCORES_FILE)
    limit = _evaluated_limit(folder, records, settings["splits"], limit, complete)
    sizes = {split: size if limit is None else min(size, limit) for split, size in settings["splits"].items()}
    tables = {split: split_scores(records, split, size) for split, size in sizes.items() if size}
    if "test" not in tables:
        raise ValueError(f"{folder / SETTINGS_FILE}: the run has no test questions")
    ks = np.arange(1, tables["test"].num_samples + 1)
    curves, mix, tuned = _tune(tables, ks, runs, seed, alphas)
    scorers = _classifier_scores(tuned)
    names = [c for c in classifiers() if all(_available(c, t) for t in tables.values())]  # those with scores
    accuracy, acc_norm, hits, picks = _accuracies(names, tables, scorers)
    metrics = (("acc", False), ("acc_norm", True))
    base = baseline_classifier()
    differences = {
        metric: {c: C.paired_bootstrap(hits[c, norm], hits[base, norm], resamples=resamples, seed=seed)
                 for c in names if c != base}
        for metric, norm in metrics}
    changed = {metric: {c: int((picks[c, norm] != picks[base, norm]).sum()) for c in names if c != base}
               for metric, norm in metrics}
    k_index = tuned["k"] - 1
    report: dict[str, Any] = {
        "settings": settings, "evaluated": sizes, "limit": limit, "records_sha256": records_digest(records, sizes),
        "tuned": tuned, "accuracy": accuracy, "acc_norm": acc_norm,
        "differences_vs_canonical": differences, "changed_vs_canonical": changed,
        "marginal_at_k": {s: {"k": tuned["k"], "mean": float(curves[s]["mean"][k_index]),
                              "std": float(curves[s]["std"][k_index]), "runs": runs} for s in tables},
        "choose_k": {s: {"k": ks.tolist(), **{key: v.tolist() for key, v in curves[s].items()}, "runs": runs}
                     for s in tables},
        "mixture_curve": {s: {"alpha": np.asarray(alphas).tolist(), "acc": m["acc"].tolist(),
                              "acc_norm": m["norm"].tolist()} for s, m in mix.items()},
        "questions": {s: _questions(t) for s, t in tables.items()},
        "speed": _speed(folder),
        "paper": {"tuned_marginal": TUNED_MARGINAL.get(settings["dataset"]),
                  "tuned_mixture": TUNED_MIXTURE.get(settings["dataset"])},
    }
    for c in names:  # a scoring's own section (the exact brackets' certification), under its name
        found = classifier_scoring(c)
        if c == found.classifiers[0] and (section := found.report_section(tables, scorers[c])) is not None:
            report[found.name] = section
    return report


def _evaluated_limit(folder: Path, records: list[dict[str, Any]], planned: dict[str, int], limit: int | None,
                     complete: bool) -> int | None:
    """The questions per split to evaluate (``None``: all), after checking that they are all scored."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if complete and limit is not None:
        raise ValueError("give a limit or ask for the complete prefix, not both")
    done = scored_prefix(records, planned)
    if complete:
        if done == 0:
            raise ValueError(f"{folder / SCORES_FILE}: no question is scored on every split yet")
        return None if done >= max(planned.values()) else done
    if done < min(max(planned.values()), limit or math.inf):
        raise ValueError(f"{folder}: the run is unfinished; the first {done} questions of every split are scored "
                         f"(`ppl-tok qa report {folder} --complete` reports those, or finish the run with "
                         "`ppl-tok qa run`)" if done else
                         f"{folder}: the run is unfinished and no question is scored on every split yet; "
                         "finish it with `ppl-tok qa run`")
    return limit


def _tune(tables: dict[str, C.SplitScores], ks: np.ndarray, runs: int, seed: int, alphas: np.ndarray
          ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The choose-k and mixture curves of every split, and k and alpha tuned on the tuning split (else test)."""
    tuning = "tune" if "tune" in tables else "test"
    curves = {s: C.choose_k(t, ks, runs, seed) for s, t in tables.items()}
    mix = {s: {"acc": C.mixture_curve(t, alphas), "norm": C.mixture_curve(t, alphas, norm=True)}
           for s, t in tables.items()}
    tuned = {"split": tuning, "k": C.best_k(ks, curves[tuning]["mean"]),
             "k_norm": C.best_k(ks, curves[tuning]["mean_norm"]),
             "alpha": C.best_alpha(alphas, mix[tuning]["acc"]), "alpha_norm": C.best_alpha(alphas, mix[tuning]["norm"])}
    return curves, mix, tuned


def _accuracies(names: list[str], tables: dict[str, C.SplitScores],
                scorers: dict[str, Callable[[C.SplitScores, bool], np.ndarray]]) -> tuple[Any, Any, Any, Any]:
    """``acc`` and ``acc_norm`` of each classifier on each split; the test split's hits and picks per (name, norm)."""
    accuracy: dict[str, dict[str, float]] = {c: {} for c in names}
    acc_norm: dict[str, dict[str, float]] = {c: {} for c in names}
    hits: dict[tuple[str, bool], np.ndarray] = {}
    picks: dict[tuple[str, bool], np.ndarray] = {}
    for c in names:
        for s, t in tables.items():
            for norm, out in ((False, accuracy), (True, acc_norm)):
                pred = C.predictions(scorers[c](t, norm), t)
                ok = pred == t.labels
                out[c][s] = float(ok.mean())
                if s == "test":
                    hits[c, norm], picks[c, norm] = ok, pred
    return accuracy, acc_norm, hits, picks


def _questions(t: C.SplitScores) -> list[dict[str, Any]]:
    """Per question: its id, label and the columns the question-level scorings show of this split
    (:meth:`~ppl_tok.scorings.Scoring.question_columns`, in report order)."""
    columns: dict[str, np.ndarray] = {}
    for c in classifiers():
        found = classifier_scoring(c)
        if c == found.classifiers[0]:
            columns.update(found.question_columns(t))
    rows = []
    for i, qid in enumerate(t.ids):
        width = int(t.valid[i].sum())
        rows.append({"id": qid, "label": int(t.labels[i]),
                     **{name: encode_logs(values[i, :width]) for name, values in columns.items()}})
    return rows


def _speed(folder: Path) -> dict[str, Any]:
    """Questions/min from ``timing.jsonl``: the batches with importance samples, and each set of kinds apart.

    ``questions_per_minute`` is total questions over total batch seconds; the median over batches
    (``median_batch_questions_per_minute``) is the figure for an otherwise idle machine, since a
    batch slowed by other work on the machine moves the median little.

    A Ray run's lines also carry ``worker_seconds`` (the batch's time inside its worker); its
    ``seconds`` are the driver's time between appends, which is no batch's time. There a batch's
    rate is ``workers * 60 / (worker_seconds / questions)`` (all workers at that batch's pace), and
    the median is over those rates (and the rates of batches run without Ray, if any).
    """
    timing = read_timing(folder)
    groups: dict[str, list[dict[str, Any]]] = {}
    for t in timing:
        groups.setdefault("+".join(t.get("kinds", [])), []).append(t)
    out = _batch_speed([t for t in timing if "is" in t.get("kinds", [])])
    out["by_kinds"] = {name: _batch_speed(ts) for name, ts in sorted(groups.items())}
    return out


def _batch_speed(timing: list[dict[str, Any]]) -> dict[str, Any]:
    questions = sum(t["questions"] for t in timing)
    seconds = sum(t["seconds"] for t in timing)
    out: dict[str, Any] = {"questions": questions, "seconds": seconds, "batches": len(timing),
                           "questions_per_minute": 60 * questions / seconds if seconds > 0 else None}
    ray = [t for t in timing if "worker_seconds" in t and t["worker_seconds"] > 0 and t["questions"] > 0]
    rates = [60 * t["questions"] / t["seconds"] for t in timing if "worker_seconds" not in t and t["seconds"] > 0]
    if ray:
        workers = len({t.get("worker") for t in ray})
        per_question = [t["worker_seconds"] / t["questions"] for t in ray]
        rates += [60 * workers / x for x in per_question]
        out.update(workers=workers, worker_seconds=sum(t["worker_seconds"] for t in ray),
                   median_worker_seconds_per_question=float(np.median(per_question)))
    out["median_batch_questions_per_minute"] = float(np.median(rates)) if rates else None
    return out


# ------------------------------------------------------------------ Markdown
def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _ci(d: dict[str, Any]) -> str:
    if d["low"] == d["high"] == 0:  # every question right for both or wrong for both (answers may differ)
        verdict = "the same questions right"
    else:
        verdict = "within noise" if d["within_noise"] else "significant"
    return f"{format_difference(d)} ({verdict})"


def format_difference(d: dict[str, Any]) -> str:
    """A paired-bootstrap difference in points: ``+2.0 [-1.4, +5.4]``."""
    return f"{100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _table(title: str, header: list[str], ours: list[str], paper: list[list[str]]) -> list[str]:
    """A Markdown table: our row, then the paper's rows."""
    return ["", f"## {title}", "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"] + \
        ["| " + " | ".join(row) + " |" for row in [ours, *paper]]


def _proposal_words(st: dict[str, Any]) -> str:
    """How ``report.md`` names the run's proposal (a learned one with its file's checksum)."""
    if st.get("proposal", DEFAULT_PROPOSAL) == DEFAULT_PROPOSAL:
        return "look-ahead proposal"
    return f"{st['proposal']} proposal (file sha256 {str(st.get('proposal_sha256'))[:12]})"


def markdown(report: dict[str, Any]) -> str:
    """``report.md``: the run's settings, Tables 1 and 2 with intervals, all classifiers, the paper beside."""
    st, tuned, acc = report["settings"], report["tuned"], report["accuracy"]
    diff = report["differences_vs_canonical"]
    model = st["model"]
    evaluated = ", ".join(f"{s} {n}" for s, n in report.get("evaluated", st["splits"]).items())
    if report.get("limit"):
        planned = ", ".join(f"{s} {n}" for s, n in st["splits"].items())
        evaluated += f" (the first questions of a run planned for {planned})"
    lines = [f"# QA study: {st['dataset']}, {model}, N = {run_num_samples(st)}", "",
             f"Questions: {evaluated}; seed {st['seed']}; "
             f"{_proposal_words(st)}; ppl-tok {st['ppl_tok_version']}. k and alpha tuned on the "
             f"**{tuned['split']}** split and applied once to the test split. Accuracies in percent; differences "
             "against canonical with 95% paired bootstrap intervals."]
    if tuned["split"] == "test":
        lines += ["", "**Warning:** no tuning split: k and alpha were tuned on the test split itself (optimistic)."]
    mk = report["marginal_at_k"]["test"]
    paper_mar = report["paper"]["tuned_marginal"] or {}
    lines += _table("Table 1: marginal with the tuned number of samples",
                    ["model", "Can", "Mar", "Diff [95% CI]", "k", "Mar, mean ± std over random k-subsets"],
                    [model, _pct(acc["canonical"]["test"]), _pct(acc["marginal"]["test"]), _ci(diff["acc"]["marginal"]),
                     str(tuned["k"]), f"{_pct(mk['mean'])} ± {_pct(mk['std'])} ({mk['runs']} runs)"],
                    [[f"paper {m}", f"{v[0]:.1f}", f"{v[1]:.1f}", f"{v[2]:+.2f}", str(v[3]), ""]
                     for m, v in paper_mar.items()])
    paper_mix = report["paper"]["tuned_mixture"] or {}
    lines += _table("Table 2: mixture with the tuned alpha", ["model", "Mixture", "Canonical", "Diff [95% CI]", "alpha"],
                    [model, _pct(acc["mixture"]["test"]), _pct(acc["canonical"]["test"]), _ci(diff["acc"]["mixture"]),
                     f"{tuned['alpha']:.2f}"],
                    [[f"paper {m}", f"{v[0]:.1f}", f"{v[1]:.1f}", f"{v[0] - v[1]:+.1f}", f"{v[2]:.4f}"]
                     for m, v in paper_mix.items()])
    splits = list(st["splits"])
    lines += ["", "## Every classifier", "",
              "| classifier | " + " | ".join(f"acc {s}" for s in splits) + " | " +
              " | ".join(f"acc_norm {s}" for s in splits) + " | acc test − canonical | acc_norm test − canonical | "
              "test answers changed (acc / acc_norm) |",
              "|---" * (1 + 2 * len(splits) + 3) + "|"]
    changed = report.get("changed_vs_canonical", {})
    for c in acc:
        cells = [_pct(acc[c].get(s)) for s in splits] + [_pct(report["acc_norm"][c].get(s)) for s in splits]
        moved = " / ".join(str(changed.get(m, {}).get(c, "?")) for m in ("acc", "acc_norm"))
        extra = ["—", "—", "—"] if c not in diff["acc"] else [_ci(diff["acc"][c]), _ci(diff["acc_norm"][c]), moved]
        lines.append(f"| {c} | " + " | ".join(cells + extra) + " |")
    lines += ["", f"marginal: first k = {tuned['k']} samples (acc_norm: k = {tuned['k_norm']}); marginal-all: all N; "
              f"mixture: alpha = {tuned['alpha']:.2f} (acc_norm: {tuned['alpha_norm']:.2f}); canonical+rest: "
              "p(canonical) exact plus the unbiased estimate of the non-canonical mass (all N). Changed: test "
              "questions whose predicted answer differs from canonical's."]
    for found in dict.fromkeys(classifier_scoring(c) for c in acc):  # the scorings' own sections, under their names
        if isinstance(report.get(found.name), dict):
            lines += found.report_markdown(report[found.name])
    speeds = [(kinds, sp) for kinds, sp in report["speed"].get("by_kinds", {}).items() if sp["questions_per_minute"]]
    if speeds:
        ray_note = "; Ray runs: a batch's rate is workers x 60 / its worker-seconds per question" \
            if any("workers" in sp for _, sp in speeds) else ""
        lines += ["", f"Speed (`timing.jsonl`; the median batch is the figure for an otherwise idle machine{ray_note}):", "",
                  "| scores computed | questions | seconds | questions/min | median batch, questions/min |",
                  "|---|---|---|---|---|"]
        lines += [f"| {kinds.replace('+', ', ')} | {sp['questions']} | {sp['seconds']:.0f} | "
                  f"{sp['questions_per_minute']:.1f} | {sp['median_batch_questions_per_minute']:.1f} |"
                  for kinds, sp in speeds]
    lines += ["", f"![Fig. 5: accuracy against k]({FIG5})", "", f"![Fig. 6: accuracy against alpha]({FIG6})", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ plots
def _plot_splits(report: dict[str, Any], path: str | Path, key: str, xlabel: str,
                 draw: Callable[[Any, dict[str, Any]], None]) -> None:
    """One panel per split of ``report[key]``: ``draw(axes, curve)`` and the canonical accuracy (dashed)."""
    from ppl_tok.common.plotting import pyplot

    plt = pyplot()

    splits = list(report[key])
    fig, axes = plt.subplots(1, len(splits), figsize=(4.5 * len(splits), 3.4), squeeze=False)
    for ax, s in zip(axes[0], splits):
        draw(ax, report[key][s])
        ax.axhline(100 * report["accuracy"]["canonical"][s], color="tab:blue", ls="--", lw=2, label="canonical")
        ax.set(title=f"{report['settings']['dataset']} ({s})", xlabel=xlabel, ylabel="Accuracy (%)")
        ax.grid(ls="--", alpha=0.5)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_choose_k(report: dict[str, Any], path: str | Path) -> None:
    """Fig. 5: mean accuracy of the k-sample marginal (band: ± std) and the canonical accuracy (dashed)."""
    def draw(ax: Any, ck: dict[str, Any]) -> None:
        k, mean, std = np.array(ck["k"]), 100 * np.array(ck["mean"]), 100 * np.array(ck["std"])
        ax.plot(k, mean, color="tab:blue", lw=2, label="marginal (mean)")
        ax.fill_between(k, mean - std, mean + std, color="tab:blue", alpha=0.3, label="± std")

    _plot_splits(report, path, "choose_k", "Number of samples", draw)


def plot_mixture(report: dict[str, Any], path: str | Path) -> None:
    """Fig. 6: accuracy of the mixture against alpha and the canonical accuracy (dashed)."""
    def draw(ax: Any, mc: dict[str, Any]) -> None:
        ax.plot(mc["alpha"], 100 * np.array(mc["acc"]), color="tab:blue", lw=2, label="mixture")

    _plot_splits(report, path, "mixture_curve", r"$\alpha$", draw)


def write_report(folder: str | Path, **kw: Any) -> dict[str, Any]:
    """Evaluate the run in ``folder`` and write ``report.json``, ``report.md`` and the two PNGs there."""
    folder = Path(folder)
    report = evaluate(folder, **kw)
    (folder / REPORT_JSON).write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    (folder / REPORT_MD).write_text(markdown(report), encoding="utf-8")
    plot_choose_k(report, folder / FIG5)
    plot_mixture(report, folder / FIG6)
    return report
