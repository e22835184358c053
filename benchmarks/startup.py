"""Start-up: the CPU time of ``ppl-tok --help`` and of ``import ppl_tok``, whole processes, against the bare
interpreter and against the imports a command pays for when it runs an LM (torch, pyro, networkx), measured
in the same run (issue 57: ``ppl-tok --help`` under 0.3 s of CPU).

Each figure is the median over ``runs`` fresh processes of the children's user plus system CPU time
(``os.wait4``), so other work on the machine changes it less than wall time would; the report names
the heavy modules each command left imported (none is the point).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from typing import Any

#: the modules a light command must not import
HEAVY = ("torch", "pyro", "networkx", "transformers")

#: what is measured: name -> the Python code of one process (the last line prints the heavy modules imported)
COMMANDS: dict[str, str] = {
    "python -c pass (the interpreter alone)": "pass",
    "import ppl_tok": "import ppl_tok",
    "ppl-tok --help": "from ppl_tok.cli.main import main; main(['--help'])",
    "ppl-tok models list": "from ppl_tok.cli.main import main; main(['models', 'list'])",
    "import torch, pyro, networkx (what a command that runs an LM imports)": "import torch, pyro, networkx",
}

#: the target of ``ppl-tok --help`` (CPU seconds, median)
TARGET_SECONDS = 0.3


def cpu_seconds(code: str) -> tuple[float, list[str]]:
    """The user plus system CPU seconds of one fresh ``python -c code`` and the heavy modules it imported."""
    probe = f"{code}\nimport sys\nprint('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    proc = subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    err = proc.stderr.read() if proc.stderr is not None else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"python -c {code!r} failed (status {proc.returncode}): {err[-500:]}")
    heavy = next((line[6:] for line in err.splitlines() if line.startswith("HEAVY=")), "")
    return usage.ru_utime + usage.ru_stime, [m for m in heavy.split(",") if m]


def bench_startup(runs: int = 5) -> dict[str, Any]:
    """The median CPU seconds of each of :data:`COMMANDS` over ``runs`` processes (interleaved, so that a busy
    spell of the machine falls on every command alike), its ratio to the bare interpreter, and the heavy
    modules it imported."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    heavy: dict[str, list[str]] = {}
    for _ in range(runs):
        for name, code in COMMANDS.items():
            seconds, imported = cpu_seconds(code)
            times[name].append(seconds)
            heavy[name] = imported
    base = statistics.median(times[next(iter(COMMANDS))])
    rows = [{"command": name, "median_cpu_seconds": statistics.median(t), "runs": t,
             "ratio_to_interpreter": statistics.median(t) / base if base > 0 else None, "heavy_imported": heavy[name]}
            for name, t in times.items()]
    help_row = next(r for r in rows if r["command"] == "ppl-tok --help")
    return {"runs": runs, "python": sys.executable, "target_seconds": TARGET_SECONDS, "rows": rows,
            "help_meets_target": help_row["median_cpu_seconds"] < TARGET_SECONDS and not help_row["heavy_imported"]}


def format_startup(result: dict[str, Any]) -> list[str]:
    lines = [f"CPU seconds (user + system), median of {result['runs']} fresh processes each:"]
    for r in result["rows"]:
        heavy = ", ".join(r["heavy_imported"]) or "none"
        lines.append(f"  {r['median_cpu_seconds']:6.3f} s  {r['ratio_to_interpreter']:5.1f}x the interpreter   "
                     f"{r['command']}  (heavy modules imported: {heavy})")
    verdict = "meets" if result["help_meets_target"] else "MISSES"
    lines.append(f"ppl-tok --help {verdict} the target: under {result['target_seconds']} s with no heavy module")
    return lines
