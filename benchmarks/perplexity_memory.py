"""Peak resident memory of `ppl-tok perplexity` on one long document (issue 50: a 1 MB document within 3 GB).

Builds a document of `--bytes` bytes (HellaSwag contexts from /work/shared/data joined by spaces, one line, cut
at a character boundary), runs `ppl-tok perplexity DOC --model MODEL --scoring S --json` in a child process under
`--timeout` seconds, and samples the child's resident set (`VmRSS`, every `--every` seconds) and its own
high-water mark (`VmHWM`, the kernel's peak, read just before it exits or is stopped). The target: the peak stays
under 3 GB, and it does not grow with the document's length (a 100 kB, 250 kB and 1 MB document at the same
window peak alike). A run stopped by the timeout reports `finished: false` and the peak up to then.

Usage: python benchmarks/perplexity_memory.py OUT.json --bytes 100000 250000 1000000 [--scoring canonical beam]
       [--timeout 600] [--model smollm2-135m] [--extra 'MORE perplexity FLAGS']
Each (bytes, scoring) is one row of OUT.json, written as it finishes; a rerun replaces the rows it runs again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path("/work/shared/data/hellaswag/hellaswag_val.jsonl.gz")


def document(n_bytes: int) -> str:
    """``n_bytes`` bytes of HellaSwag contexts on one line (cut at a UTF-8 character boundary)."""
    parts, size = [], 0
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        while size < n_bytes:
            for line in f:
                ctx = " ".join(json.loads(line)["ctx"].split())
                parts.append(ctx)
                size += len(ctx.encode("utf-8")) + 1
                if size >= n_bytes:
                    break
            f.seek(0)
    raw = " ".join(parts).encode("utf-8")[:n_bytes]
    return raw.decode("utf-8", "ignore")


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":")
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def measure(doc: Path, scoring: str, model: str, timeout: float, every: float, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "ppl_tok.cli", "perplexity", str(doc), "--model", model, "--scoring", scoring,
           "--json", *extra]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples, peak, hwm = [], 0, 0
    while child.poll() is None and time.perf_counter() - start < timeout:
        st = _status(child.pid)
        if st:
            peak = max(peak, st.get("VmRSS", 0))
            hwm = max(hwm, st.get("VmHWM", 0))
            samples.append([round(time.perf_counter() - start, 1), st.get("VmRSS", 0) >> 20])
        time.sleep(every)
    finished = child.poll() is not None
    if not finished:
        hwm = max(hwm, _status(child.pid).get("VmHWM", 0))
        child.send_signal(signal.SIGTERM)
    out, err = child.communicate()
    row = {"bytes": len(doc.read_bytes()), "scoring": scoring, "model": model, "extra": extra,
           "finished": finished, "returncode": child.returncode if finished else None,
           "seconds": round(time.perf_counter() - start, 1), "peak_rss_mb": max(peak, hwm) >> 20,
           "samples_mb": samples[:: max(1, len(samples) // 60)]}
    if finished and child.returncode == 0:
        summary = json.loads(out)
        row.update(bits_per_byte=summary.get("bits_per_byte"), tokens=summary.get("tokens"))
    elif finished:
        row["stderr"] = err.strip().splitlines()[-1:] if err.strip() else []
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--bytes", type=int, nargs="+", default=[100_000, 250_000, 1_000_000])
    ap.add_argument("--scoring", nargs="+", default=["canonical"])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--extra", default="", help="more ppl-tok perplexity flags, one string (e.g. '--window 1024')")
    args = ap.parse_args()
    args.extra = shlex.split(args.extra)
    rows = json.loads(args.out.read_text())["rows"] if args.out.exists() else []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.bytes:
            doc = Path(tmp) / f"doc{n}.txt"
            doc.write_text(document(n), encoding="utf-8")
            for scoring in args.scoring:
                row = measure(doc, scoring, args.model, args.timeout, args.every, args.extra)
                print(json.dumps({k: v for k, v in row.items() if k != "samples_mb"}), flush=True)
                rows = [r for r in rows if (r["bytes"], r["scoring"], r["extra"]) != (n, scoring, args.extra)]
                rows.append(row)
                commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()
                args.out.write_text(json.dumps({"commit": commit, "threads": os.environ.get("OMP_NUM_THREADS"),
                                                "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
