"""Run one command and report its peak resident memory and wall time, as JSON (issue 50's memory checks).

Usage: python benchmarks/peak_rss.py [--timeout SECONDS] [--out FILE.json] -- COMMAND ...

The peak is the kernel's high-water mark of the child and its descendants (``getrusage(RUSAGE_CHILDREN)``,
``ru_maxrss``), read after the command exits; a command stopped by the timeout reports ``finished: false``.
Needs nothing but the standard library, so it runs on a machine with only the package (the GPU machine).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=None, help="stop the command after this many seconds")
    ap.add_argument("--out", help="write the JSON here too")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command after --")
    start = time.perf_counter()
    finished, code = True, None
    try:
        done = subprocess.run(command, timeout=args.timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as err:
        finished, stdout, stderr = False, err.stdout or "", err.stderr or ""
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        stderr = stderr.decode() if isinstance(stderr, bytes) else stderr
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: kilobytes
    row = {"command": command, "finished": finished, "returncode": code, "seconds": round(seconds, 1),
           "peak_rss_mb": round(peak_mb, 1), "stdout_tail": stdout[-2000:], "stderr_tail": stderr[-2000:]}
    text = json.dumps(row, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if finished and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
