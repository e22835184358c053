"""The reading-time study: predictors from one walk per text, aligned to a corpus's regions, the regressions, a
table and a plot.

Predictors, per whitespace convention ``C`` and focal area ``A`` (:mod:`ppl_tok.reading.focal`), in three
families (:data:`FAMILIES`): ``string`` (``Surprisal{C}{A}``: over strings, the paper's definition), ``corrected``
(``Surprisal{C}{A}Corrected``: with the word-end correction) and ``canonical`` (``Canonical{C}{A}``: the canonical
tokens, the minicons way; ``CanonicalLeadingWhole`` is minicons' word surprisal). Each target set is the predictor
with the spill-over of its family and convention: the ``Whole`` figure of the two words before (``...Prev``,
``...PrevPrev``; 0 before the text's start), as the paper; the baseline is the word's length and frequency and those
of the two words before (0 where the corpus has no row for them, as the paper).

:func:`run_study` computes (or resumes) the walks into the run folder (:class:`~ppl_tok.reading.store.EventStore`),
aligns the measurements (:func:`~ppl_tok.reading.corpus.align`, the corrections listed), fits the regressions
(:func:`~ppl_tok.reading.regression.cross_validate`) and writes beside the store: ``predictors.csv`` (one row per
word of every text, every predictor), ``corrections.csv``, ``folds.csv``, ``summary.csv``, ``report.md`` and
``gains.png``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ppl_tok.lm.base import LanguageModel
from ppl_tok.reading import PROVO_MEASURES
from ppl_tok.reading.corpus import Correction, align, corrections_frame, read_measurements, read_stimuli
from ppl_tok.reading.focal import AREAS, CONVENTIONS
from ppl_tok.reading.focal_surprisal import focal_table
from ppl_tok.reading.regression import cross_validate, paired, summarise
from ppl_tok.reading.store import EventStore, compute_events, settings_of
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.units import WordRules

#: family -> (column prefix, column suffix)
FAMILIES = {"string": ("Surprisal", ""), "corrected": ("Surprisal", "Corrected"), "canonical": ("Canonical", "")}
#: the baseline's columns of the word (their spill-over is added): length and frequency, Provo's names
LENGTH, FREQUENCY = "RegionLength", "WordFreqZipf"


def column(family: str, convention: str, area: str) -> str:
    """The predictor's column: ``Surprisal{C}{A}``, ``Surprisal{C}{A}Corrected`` or ``Canonical{C}{A}``."""
    prefix, suffix = FAMILIES[family]
    return f"{prefix}{convention}{area}{suffix}"


def add_spillover(focal: pd.DataFrame, conventions: Sequence[str] = CONVENTIONS) -> pd.DataFrame:
    """``focal`` with each family's ``Whole`` figure of the word before (``Prev``) and the one before that
    (``PrevPrev``) per convention; 0 before the text's start."""
    out = focal.sort_values(["text_id", "region"]).copy()
    for family in FAMILIES:
        for conv in conventions:
            whole = column(family, conv, "Whole")
            by_text = out.groupby("text_id", sort=False)[whole]
            out[whole + "Prev"] = by_text.shift(1).fillna(0.0)
            out[whole + "PrevPrev"] = by_text.shift(2).fillna(0.0)
    return out


def targets(families: Sequence[str] = tuple(FAMILIES), conventions: Sequence[str] = CONVENTIONS,
            areas: Sequence[str] = AREAS) -> dict[str, list[str]]:
    """Each target set: the predictor and its family's spill-over (module docstring)."""
    out = {}
    for family in families:
        for conv in conventions:
            whole = column(family, conv, "Whole")
            for area in areas:
                out[column(family, conv, area)] = [column(family, conv, area), whole + "Prev", whole + "PrevPrev"]
    return out


def baseline_columns(length: str = LENGTH, frequency: str = FREQUENCY) -> list[str]:
    return [length, length + "Prev", length + "PrevPrev", frequency, frequency + "Prev", frequency + "PrevPrev"]


def regression_data(aligned: pd.DataFrame, focal: pd.DataFrame, measures: Sequence[str], *, length: str = LENGTH,
                    frequency: str = FREQUENCY) -> tuple[pd.DataFrame, int]:
    """The measurements joined to their words' predictors, with the baseline's spill-over; the rows with a missing
    value in a column used are dropped and counted (the count is reported, never hidden)."""
    for c in (length, frequency, *measures):
        if c not in aligned.columns:
            raise ValueError(f"the measurements have no column {c!r} (a measure or a baseline column)")
    data = aligned.merge(add_spillover(focal), left_on=["text_id", "word_index"], right_on=["text_id", "region"],
                         how="left", validate="one_to_one")
    by_word = {(t, w): (ln, fr) for t, w, ln, fr in zip(aligned.text_id, aligned.word_index, aligned[length],
                                                          aligned[frequency])}
    for lag, name in ((1, "Prev"), (2, "PrevPrev")):
        prev = [by_word.get((t, w - lag), (0.0, 0.0)) for t, w in zip(data.text_id, data.word_index)]
        data[length + name] = [p[0] for p in prev]
        data[frequency + name] = [p[1] for p in prev]
    used = [*measures, *baseline_columns(length, frequency), *{c for cols in targets().values() for c in cols}]
    keep = ~data[used].isna().any(axis=1)
    return data[keep].reset_index(drop=True), int((~keep).sum())


def run_study(lm: LanguageModel, stimuli: str | Path, measurements: str | Path, out: str | Path, *,
              measures: Sequence[str] = PROVO_MEASURES, config: StringSearchConfig | None = None,
              rules: WordRules | None = None, folds: int = 10, repeats: int = 10, seed: int = 0, batch: int = 4,
              published: str | Path | None = None, progress: Callable[[int, int], None] | None = None,
              limit: int | None = None) -> dict[str, Any]:
    """The whole study into the run folder ``out`` (created, or resumed; module docstring). Every input error
    (stimuli, measurements, alignment) is raised before the LM is run. ``limit``: walk the first ``limit`` texts
    only and fit the regressions on their rows (a run in progress; the report says how many texts)."""
    config = config or StringSearchConfig()
    rules = rules or WordRules()
    texts = read_stimuli(stimuli)
    table, columns = read_measurements(measurements)
    aligned, corrections = align(texts, table, columns, where=str(measurements))
    out = Path(out)
    ids = list(range(1, len(texts) + 1))[:limit]
    with EventStore.open(out, settings_of(lm, texts, Path(stimuli).name, config, rules)) as store:
        events = compute_events(lm, texts, ids, store, config=config, rules=rules, batch=batch, progress=progress)
    aligned = aligned[aligned.text_id.isin(ids)].reset_index(drop=True)
    corrections = [c for c in corrections if c.text_id in ids]
    report = analyse(out, events_table(events, ids), aligned, corrections, measures=measures, folds=folds,
                     repeats=repeats, seed=seed, published=published, texts=(len(ids), len(texts)))
    return report


def events_table(events: Sequence[Any], ids: Sequence[int]) -> pd.DataFrame:
    """Every predictor of every word (:func:`~ppl_tok.reading.focal_surprisal.focal_table`)."""
    return focal_table(events, ids)


def analyse(out: Path, focal: pd.DataFrame, aligned: pd.DataFrame, corrections: list[Correction], *,
            measures: Sequence[str], folds: int, repeats: int, seed: int,
            published: str | Path | None = None, texts: tuple[int, int] | None = None) -> dict[str, Any]:
    """The regressions on the stored predictors and the files of the report (module docstring)."""
    focal.to_csv(out / "predictors.csv", index=False)
    corrections_frame(corrections).to_csv(out / "corrections.csv", index=False)
    data, dropped = regression_data(aligned, focal, measures)
    base, sets = baseline_columns(), targets()
    all_folds = pd.concat([cross_validate(data, m, base, sets, folds=folds, repeats=repeats, seed=seed)
                           for m in measures], ignore_index=True)
    all_folds.to_csv(out / "folds.csv", index=False)
    summary = summarise(all_folds)
    summary["family"] = [family_of(p) for p in summary.predictor]
    summary.to_csv(out / "summary.csv", index=False)
    findings = findings_of(all_folds, summary, measures)
    pub = None if published is None else pd.read_csv(published)
    report = {"texts": None if texts is None else texts[0], "of_texts": None if texts is None else texts[1],
              "rows": len(data), "dropped_rows": dropped, "corrections": len(corrections),
              "index_corrections": sum(c.kind == "index" for c in corrections), "folds": folds, "repeats": repeats,
              "seed": seed, "measures": list(measures), "findings": findings,
              "published": None if pub is None else published_pattern(pub, summary, measures)}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text("\n".join(format_report(report)) + "\n")
    plot_gains(summary, measures, out / "gains.png")
    return report


def _split(name: str) -> tuple[str, str]:
    body = name.removeprefix("Surprisal").removeprefix("Canonical").removesuffix("Corrected")
    for conv in sorted(CONVENTIONS, key=len, reverse=True):
        if body.startswith(conv):
            return conv, body[len(conv):]
    raise ValueError(f"not a predictor's name: {name!r}")


def family_of(name: str) -> str:
    """The family of a predictor's column (:data:`FAMILIES`)."""
    conv, area = _split(name)
    return next(f for f in FAMILIES if column(f, conv, area) == name)


def findings_of(folds: pd.DataFrame, summary: pd.DataFrame, measures: Sequence[str]) -> dict[str, Any]:
    """Per measure: the best predictor of each family and overall, and string against canonical (paired, on the
    same folds): for the minicons word (Leading Whole) and for each family's best."""
    out: dict[str, Any] = {}
    for m in measures:
        s = summary[summary.measure == m]
        best = {f: s[s.family == f].sort_values("delta_loglik").iloc[-1] for f in FAMILIES}
        top = s.sort_values("delta_loglik").iloc[-1]
        word = paired(folds, m, "SurprisalLeadingWhole", "CanonicalLeadingWhole")
        bests = paired(folds, m, best["string"].predictor, best["canonical"].predictor)
        corr = paired(folds, m, best["corrected"].predictor, best["string"].predictor)
        out[m] = {"best": {"predictor": top.predictor, "delta_loglik": top.delta_loglik, "low": top.low,
                           "high": top.high},
                  **{f"best_{f}": {"predictor": b.predictor, "delta_loglik": b.delta_loglik, "low": b.low,
                                   "high": b.high} for f, b in best.items()},
                  "string_minus_canonical_word": dict(zip(("mean", "low", "high"), word)),
                  "best_string_minus_best_canonical": dict(zip(("mean", "low", "high"), bests)),
                  "best_corrected_minus_best_string": dict(zip(("mean", "low", "high"), corr))}
    return out


def published_pattern(pub: pd.DataFrame, summary: pd.DataFrame, measures: Sequence[str]) -> dict[str, Any]:
    """Beside the paper's GPT-2 gains (``predicted, predictor, delta_loglik_test``): its best predictor per measure
    and the rank correlation (Spearman) of its 40 gains with this run's string-level gains."""
    from scipy.stats import spearmanr

    out = {}
    for m in measures:
        p = pub[pub.predicted == m].set_index("predictor").delta_loglik_test
        if p.empty:
            continue
        ours = summary[(summary.measure == m) & (summary.family == "string")].set_index("predictor").delta_loglik
        both = p.index.intersection(ours.index)
        rho = float(spearmanr(p[both], ours[both]).statistic) if len(both) > 2 else None
        out[m] = {"paper_best": p.idxmax(), "paper_best_gain": float(p.max()), "spearman": rho,
                  "paper_leading_whole": float(p.get("SurprisalLeadingWhole", float("nan"))),
                  "paper_trailing_whole": float(p.get("SurprisalTrailingWhole", float("nan")))}
    return out


def _ci(d: dict[str, Any]) -> str:
    mean = d.get("delta_loglik", d.get("mean"))
    return f"{mean:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"


def format_report(report: dict[str, Any]) -> list[str]:
    """The report's lines (markdown)."""
    lines = [f"{report['texts']} of {report['of_texts']} texts, {report['rows']} rows ({report['dropped_rows']} "
             "dropped for a missing value); "
             f"{report['corrections']} alignment corrections ({report['index_corrections']} of an index); "
             f"{report['repeats']}x{report['folds']}-fold cross-validation; gains in nats per item, 95% corrected "
             "intervals over folds", "",
             "| measure | best overall | best string | best corrected | best canonical | string - canonical (word) "
             "| best string - best canonical | best corrected - best string |", "|---|---|---|---|---|---|---|---|"]
    for m, f in report["findings"].items():
        cells = [f"{f[k]['predictor']} {_ci(f[k])}" for k in ("best", "best_string", "best_corrected",
                                                                "best_canonical")]
        cells += [_ci(f[k]) for k in ("string_minus_canonical_word", "best_string_minus_best_canonical",
                                      "best_corrected_minus_best_string")]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    if report.get("published"):
        lines += ["", "| measure | paper's best (GPT-2) | its gain | Spearman with our string gains |",
                  "|---|---|---|---|"]
        for m, p in report["published"].items():
            rho = "n/a" if p["spearman"] is None else f"{p['spearman']:+.2f}"
            lines.append(f"| {m} | {p['paper_best']} | {p['paper_best_gain']:.4f} | {rho} |")
    return lines


def plot_gains(summary: pd.DataFrame, measures: Sequence[str], path: Path) -> None:
    """One panel per measure: each focal area's gain with its interval, the three families side by side."""
    from ppl_tok.common.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(len(measures), 1, figsize=(14, 3.2 * len(measures)), squeeze=False)
    names = [f"{c}{a}" for c in CONVENTIONS for a in AREAS]
    summary = summary.assign(family=[family_of(p) for p in summary.predictor])
    for ax, m in zip(axes[:, 0], measures):
        s = summary[summary.measure == m]
        for k, (family, colour) in enumerate(zip(FAMILIES, ("tab:blue", "tab:green", "tab:orange"))):
            rows = s[s.family == family].set_index("predictor")
            ys = [rows.loc[column(family, *_split("Surprisal" + n))] for n in names]
            xs = [i + (k - 1) * 0.25 for i in range(len(names))]
            ax.errorbar(xs, [r.delta_loglik for r in ys], yerr=[[r.delta_loglik - r.low for r in ys],
                                                                [r.high - r.delta_loglik for r in ys]],
                        fmt="o", ms=3, color=colour, label=family, elinewidth=0.8)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_ylabel(f"{m}\nΔ loglik (nats)")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=90, fontsize=6)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
