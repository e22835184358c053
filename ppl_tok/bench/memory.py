"""Peak memory: its spread over repeated runs (``ppl-tok bench memory --repeat N [--command 'ARGS']``), and
the growth of one long document's marginal (``ppl-tok bench perplexity --memory-bytes N``,
:func:`bench_memory_document`).

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
from pathlib import Path
from typing import Any

from ppl_tok.bench.perplexity import bench_documents, lazy_label
from ppl_tok.datasets import DATA_ROOT
from ppl_tok.strings.beam import StringSearchConfig


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


def _rss_mb() -> tuple[float, float]:
    """This process's resident memory now (MB, from ``/proc``) and at its peak
    (:func:`~ppl_tok.bench.timing.peak_rss_mb`)."""
    from ppl_tok.bench.timing import peak_rss_mb

    now = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
    return now, peak_rss_mb()


def bench_memory_document(model: str, *, data_dir: str | Path = DATA_ROOT, n_bytes: int = 20_000,
                          search: StringSearchConfig = StringSearchConfig(), every: int = 500,
                          device: str | None = None,
                          dtype: str | None = None, bos_id: int | None = None) -> dict[str, Any]:
    """The peak RSS of the marginal of one ``n_bytes``-byte document (running text, :func:`bench_documents`).

    The LM runs as ``ppl-tok perplexity --scoring marginal`` runs it (prefix cache capped,
    :func:`~ppl_tok.scorings.documents.cap_prefix_cache`). Every ``every`` bytes a line
    ``{"offset", "seconds", "rss_mb", "peak_rss_mb"}`` goes to standard error as it
    happens, so a run stopped early still says how the memory grew.
    """
    import json

    from ppl_tok.lm.cards import load_lm
    from ppl_tok.strings import string_marginal
    from ppl_tok.scorings.documents import cap_prefix_cache

    (text,) = bench_documents(data_dir, 1, n_bytes, n_bytes)
    before = _rss_mb()[0]
    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    cap_prefix_cache(lm)
    loaded = _rss_mb()[0]
    start = time.perf_counter()
    trace: list[dict[str, float]] = []
    mark = [every]

    def on_offset(offset: int) -> None:
        if offset >= mark[0]:
            mark[0] += every
            now, peak = _rss_mb()
            trace.append({"offset": offset, "seconds": round(time.perf_counter() - start, 1), "rss_mb": round(now),
                          "peak_rss_mb": round(peak)})
            print(json.dumps(trace[-1]), file=sys.stderr, flush=True)

    r = string_marginal(lm, text, "", search, on_offset=on_offset)
    now, peak = _rss_mb()
    return {"model": model, "bytes": len(text.encode()), "beam": search.beam, "prune": search.prune,
            **search.lazy_settings(), "tokens": len(lm.canonical(text)),
            "rss_before_load_mb": before, "rss_after_load_mb": loaded, "peak_rss_mb": peak, "rss_end_mb": now,
            "seconds": r.seconds, "forwards_per_byte": r.forwards_per_byte,
            "gain_nats": r.estimate - r.canonical, "trace": trace}


def format_memory_document(result: dict[str, Any]) -> list[str]:
    lazy = lazy_label(result)
    return [f"memory: the marginal (beam {result['beam']}, prune {result['prune']}{lazy}) of a {result['bytes']}-byte "
            f"document ({result['tokens']} tokens), {result['model']}",
            f"peak RSS {result['peak_rss_mb']:.0f} MB (after loading the model {result['rss_after_load_mb']:.0f} MB); "
            f"{result['seconds']:.0f} s, {result['forwards_per_byte']:.2f} forwards per byte"]
