"""``ppl_tok/bench/memory.py``: ``ppl-tok bench memory --repeat N --command ARGS`` (peak RSS of fresh processes and
its spread, issue 37, item 6).

Structure only, on a command that loads a vocabulary (a few seconds); the figures of the 2 kB case are in
docs/benchmarks.md."""

import json

import pytest

from cli_run import run
from ppl_tok.bench.memory import child_peak, repeat_command, spread


def test_spread_of_known_values():
    s = spread([3.0, 1.0, 2.0, 10.0])
    assert s == {"runs": 4, "min": 1.0, "median": 2.5, "max": 10.0, "spread": 9.0, "relative_spread": 9.0 / 2.5}
    with pytest.raises(ValueError, match="no runs"):
        spread([])


def test_a_child_that_holds_more_memory_has_a_larger_peak():
    small = child_peak(["-c", "pass"])["peak_rss_mb"]
    big = child_peak(["-c", "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096])"])
    assert big["peak_rss_mb"] - small > 150  # the 200 MiB the child touched, seen by the kernel
    with pytest.raises(RuntimeError, match="exited with status 3"):
        child_peak(["-c", "raise SystemExit(3)"])


@pytest.mark.slow  # two fresh processes that import torch: about 11 CPU-s
def test_bench_memory_repeats_a_command_in_fresh_processes(capsys):
    code, out, _ = run(capsys, "bench", "memory", "--repeat", "2", "--command", "count 'a b' --json", "--json")
    r = json.loads(out)
    assert code == 0 and r["command"] == "ppl-tok count 'a b' --json" and len(r["per_run"]) == 2
    s = r["peak_rss_mb"]
    assert s["runs"] == 2 and 0 < s["min"] <= s["median"] <= s["max"] and s["spread"] == s["max"] - s["min"]
    with pytest.raises(ValueError, match="--command is empty"):
        repeat_command("  ", 1)
