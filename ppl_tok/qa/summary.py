"""One table over many QA runs: the test-split headline of each run's ``report.json``.

:func:`summary_rows` reads the reports written by ``ppl-tok qa report``. It refuses
a report whose evaluated records have changed since (the report's ``records_sha256``
against the run's ``scores.jsonl``; a report without it: one older than the scores),
so the table never shows stale numbers, while a run still appending the records of
later questions keeps a report of its first questions (``qa report --limit``) valid.
:func:`summary_markdown` lays them out, one row per run, with the paper's
differences beside (Geh et al., 2024, Tables 1-2): those of its model of the same
family (Gemma for a Gemma run), else Llama2's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ppl_tok.qa.report import REPORT_JSON, format_difference
from ppl_tok.qa.store import SCORES_FILE, read_records, records_digest, run_num_samples

#: The paper's models (Tables 1-4), looked for by family name in a run's model name.
PAPER_MODELS = ("Llama2", "Gemma", "Mamba")

#: The classifiers summarised, each with the detail shown beside its accuracy: its tuned parameter
#: (``k``, ``alpha``), the test questions whose answer it changed (``changed``), or those not certified.
SUMMARISED = (("marginal", "k"), ("mixture", "alpha"), ("canonical+rest", "changed"), ("exact", "not_certified"))


def read_report(folder: str | Path) -> dict[str, Any]:
    """``folder/report.json``; an error naming the file if it is missing, unreadable or stale."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such run folder")
    path = folder / REPORT_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no report; run `ppl-tok qa report {folder}` first")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a JSON report ({e})") from e
    if not isinstance(report, dict):
        raise ValueError(f"{path}: not a QA report (a JSON {type(report).__name__}, not an object)")
    scores = folder / SCORES_FILE
    again = f"run `ppl-tok qa report {folder}{' --limit ' + str(report['limit']) if report.get('limit') else ''}` again"
    if "records_sha256" in report:
        if records_digest(read_records(scores), report.get("evaluated", {})) != report["records_sha256"]:
            raise ValueError(f"{path}: the scores it evaluated have changed in {scores}; {again}")
    elif scores.is_file() and scores.stat().st_mtime > path.stat().st_mtime:
        raise ValueError(f"{path} is older than {scores}; {again}")
    return report


def summary_row(report: dict[str, Any], folder: str = "") -> dict[str, Any]:
    """The test-split headline of one report: canonical accuracy and each summarised classifier's difference."""
    try:
        st, acc, diff = report["settings"], report["accuracy"], report["differences_vs_canonical"]["acc"]
        row: dict[str, Any] = {"run": folder, "dataset": st["dataset"], "model": st["model"],
                               "samples": run_num_samples(st),
                               "questions": report["evaluated"], "canonical": acc["canonical"]["test"]}
        for name, detail in SUMMARISED:
            if name in acc:
                row[name] = {"accuracy": acc[name]["test"], **diff[name]}
                if detail == "changed":
                    row[name][detail] = report["changed_vs_canonical"]["acc"][name]
                elif detail == "not_certified":
                    row[name][detail] = report[name]["test"][detail]
                else:
                    row[name][detail] = report["tuned"][detail]
    except KeyError as e:
        raise ValueError(f"{folder or 'report'}: not a QA report (missing {e})") from None
    model = paper_model(st["model"])
    paper_mar = (report.get("paper", {}).get("tuned_marginal") or {}).get(model)
    paper_mix = (report.get("paper", {}).get("tuned_mixture") or {}).get(model)
    row["paper"] = {"model": model, "marginal": paper_mar[2] if paper_mar else None,
                    "mixture": round(paper_mix[0] - paper_mix[1], 2) if paper_mix else None}
    return row


def paper_model(model: str) -> str:
    """The paper's model to set beside a run of ``model``: the same family where the paper has one, else Llama2."""
    name = model.lower()
    return next((m for m in PAPER_MODELS if m.lower() in name), "Llama2")


def summary_rows(folders: Sequence[str | Path]) -> list[dict[str, Any]]:
    """:func:`summary_row` of each run folder's ``report.json``, in the order given."""
    if not folders:
        raise ValueError("no run folders given")
    return [summary_row(read_report(f), str(f)) for f in folders]


def _diff(d: dict[str, Any]) -> str:
    return format_difference(d) + ("" if d["within_noise"] else " *")


def summary_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table, one row per run (test split; ``*``: the interval excludes zero)."""
    lines = ["| data set | model | N | test questions | canonical | marginal (k) | diff | mixture (alpha) | diff | "
             "canonical+rest (changed) | diff | exact (not certified) | diff | paper diffs (marginal / mixture) |",
             "|---" * 14 + "|"]
    for r in rows:
        cells = [r["dataset"], r["model"], str(r["samples"]), str(r["questions"].get("test", "")),
                 f"{100 * r['canonical']:.1f}"]
        for name, detail in SUMMARISED:
            c = r.get(name)
            if c is None:
                cells += ["—", "—"]
                continue
            shown = f"{c[detail]:.2f}" if detail == "alpha" else c[detail]
            cells += [f"{100 * c['accuracy']:.1f} ({shown})", _diff(c)]
        p = r["paper"]
        cells.append("—" if p["marginal"] is None else f"{p['model']}: {p['marginal']:+.2f} / {p['mixture']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Test split; accuracy in percent; differences against canonical with 95% paired bootstrap "
              "intervals (`*`: the interval excludes zero). k and alpha were tuned on the tune split. "
              "canonical+rest: the canonical probability plus the unbiased estimate of the non-canonical mass "
              "(changed: test questions whose answer differs from canonical's)."]
    return "\n".join(lines) + "\n"
