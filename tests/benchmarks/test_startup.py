"""``python -m benchmarks startup``: each command's CPU seconds against the interpreter, and what it imported."""

from benchmarks.startup import COMMANDS, bench_startup, format_startup


def test_the_benchmark_reports_every_command_with_its_heavy_imports():
    result = bench_startup(runs=1)
    rows = {r["command"]: r for r in result["rows"]}
    assert list(rows) == list(COMMANDS)
    assert all(r["median_cpu_seconds"] > 0 for r in rows.values())
    assert rows["ppl-tok --help"]["heavy_imported"] == []
    assert set(rows[list(COMMANDS)[-1]]["heavy_imported"]) == {"torch", "pyro", "networkx"}
    lines = format_startup(result)
    assert len(lines) == len(COMMANDS) + 2 and "ppl-tok --help" in lines[-1]
