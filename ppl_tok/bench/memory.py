"""Peak memory: its spread over repeated runs (``ppl-tok bench memory --repeat N [--command 'ARGS']``); the
growth of one long document's marginal is a benchmark beside the package (``benchmarks/memory_document.py``).

Peak RSS is a property of a process, and the same command on the same input
need not reach the same peak twice (threads, the C heap's arenas: docs/limits.md,
"Memory that holds"). So a memory figure is the distribution over ``N`` runs,
each in a fresh process: min, median, max and the spread ``max - min``.
A ``--command`` is a ``ppl-tok`` command line, run as ``python -m ppl_tok.cli
ARGS``; its peak is the child's ``VmHWM`` at exit (:func:`child_peak`), the
largest resident set the kernel saw, sampled by no one.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any



#: Runs ``-m MODULE ARGS`` or ``-c CODE`` and, at exit, writes the process's ``VmHWM`` (kB) to the file argv[1].
_WRAPPER = """
import atexit, runpy, sys
out, how, what, *rest = sys.argv[1:]

def hwm():
    with open("/proc/self/status") as f:
        kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(out, "w") as f:
        f.write(kb)

atexit.register(hwm)
sys.argv = [what, *rest]
if how == "-m":
    runpy.run_module(what, run_name="__main__", alter_sys=True)
else:
    exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
"""


def child_peak(args: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``python ARGS`` (``-m MODULE ...`` or ``-c CODE``) in a fresh process: its peak RSS (MiB), seconds.

    The peak is the child's own ``VmHWM`` (``/proc/self/status``) at exit, the largest resident set of its
    address space. Not ``ru_maxrss``: Linux carries the parent's resident set at ``fork`` into the child's
    ``ru_maxrss`` across ``exec``, so a child of a large process would report at least the parent's size.

    :raises RuntimeError: the command failed (with the end of its standard error).
    """
    if len(args) < 2 or args[0] not in ("-m", "-c"):
        raise ValueError(f"expected -m MODULE ... or -c CODE, got {list(args)!r}")
    with tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "vmhwm")
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _WRAPPER, out, *args], stdout=subprocess.DEVNULL, stderr=err,
                              env=None if env is None else {**os.environ, **env}, check=False)
        seconds = time.perf_counter() - t0
        if proc.returncode:
            err.seek(0)
            tail = err.read().decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"python {shlex.join(args)} exited with status {proc.returncode}:\n{tail}")
        with open(out) as f:
            kb = int(f.read())
    return {"peak_rss_mb": kb / 1024, "seconds": seconds}


def spread(values: Sequence[float]) -> dict[str, float]:
    """``min``, ``median``, ``max`` of ``values``, the ``spread`` (max - min) and the spread over the median."""
    if not values:
        raise ValueError("no runs to summarise")
    median = statistics.median(values)
    return {"runs": len(values), "min": min(values), "median": median, "max": max(values),
            "spread": max(values) - min(values), "relative_spread": (max(values) - min(values)) / median}


def repeat_command(command: str, runs: int, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``ppl-tok COMMAND`` run ``runs`` times, each in a fresh process: each run's peak RSS and the spread."""
    if runs < 1:
        raise ValueError(f"--repeat must be >= 1, got {runs}")
    args = shlex.split(command)
    if not args:
        raise ValueError("--command is empty: give a ppl-tok command line, e.g. 'marginal --file doc.txt'")
    rows = [child_peak(["-m", "ppl_tok.cli", *args], env) for _ in range(runs)]
    return {"command": f"ppl-tok {shlex.join(args)}", "env": dict(env or {}), "per_run": rows,
            "peak_rss_mb": spread([r["peak_rss_mb"] for r in rows])}


def format_spread(name: str, s: dict[str, float]) -> str:
    """One line: ``name: peak RSS min / median / max MB over N runs, spread ...``."""
    return (f"{name}: peak RSS {s['min']:.0f} / {s['median']:.0f} / {s['max']:.0f} MB (min / median / max over "
            f"{s['runs']} runs), spread {s['spread']:.0f} MB ({100 * s['relative_spread']:.1f}% of the median)")


def format_repeat(r: dict[str, Any]) -> list[str]:
    runs = ", ".join(f"{x['peak_rss_mb']:.0f} MB ({x['seconds']:.0f} s)" for x in r["per_run"])
    return [format_spread(r["command"], r["peak_rss_mb"]), f"  runs: {runs}"]
