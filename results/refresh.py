"""Refresh the generated parts of docs/results.md from the runs' current reports.

Usage: python results/refresh.py   (after `ppl-tok qa report` of each run; a run in progress with --complete)

It replaces, and touches nothing else:
* the summary table (between the `ppl-tok qa summary ...` line and the table's note), from `ppl-tok qa summary`;
* each run's section at the end of the page (from its `## ` heading to the next one), from results/section.sh,
  its heading saying how many questions were evaluated (a run in progress: "the first T tune / T test").
The prose around them (what reproduces, the numbers quoted in it) is written by hand: read it again after.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results.md"
#: (run folder under results/runs, figure slug, the section heading's name)
RUNS = (("openbookqa-smollm2-135m-n64", "openbookqa-smollm2", "OpenBookQA, SmolLM2-135M"),
        ("openbookqa-gemma3-270m-n64", "openbookqa-gemma3", "OpenBookQA, Gemma-3-270M"),
        ("socialiqa-smollm2-135m-n64", "socialiqa-smollm2", "SocialIQA, SmolLM2-135M"),
        ("hellaswag-smollm2-135m-n64", "hellaswag-smollm2", "HellaSwag, SmolLM2-135M"))


def heading(run: Path, name: str) -> str:
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    st, done = report["settings"], report["evaluated"]
    planned = " / ".join(str(n) for n in st["splits"].values())
    if report.get("limit"):
        shown = f"in progress: the first {' / '.join(f'{n} {s}' for s, n in done.items())} of {planned}"
    else:
        shown = " / ".join(f"{n} {s}" for s, n in done.items())
    return f"## {name}, N = {st['samples']} ({shown})"


def replace_section(text: str, name: str, new: str) -> str:
    match = re.search(rf"^## {re.escape(name)}, N = .*$", text, flags=re.M)
    if match is None:
        raise SystemExit(f"{DOC}: no section '## {name}, N = ...'")
    end = text.find("\n## ", match.end())
    return text[:match.start()] + new.rstrip("\n") + ("\n" + text[end:] if end >= 0 else "\n")


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    runs = [ROOT / "results" / "runs" / r for r, _, _ in RUNS]
    table = subprocess.run([sys.executable, "-m", "ppl_tok.cli.main", "qa", "summary", *map(str, runs)], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout
    start = text.index("`ppl-tok qa summary ")
    start = text.index("\n\n", start) + 2
    end = text.index("\n\n", text.index("\nTest split; accuracy in percent", start) + 1)
    text = text[:start] + table.rstrip("\n") + text[end:]
    for (folder, slug, name), run in zip(RUNS, runs):
        body = subprocess.run(["bash", "results/section.sh", str(run), slug], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        text = replace_section(text, name, heading(run, name) + "\n" + body)
    DOC.write_text(text, encoding="utf-8")
    print(f"refreshed the summary table and {len(RUNS)} sections of {DOC}")


if __name__ == "__main__":
    main()
