r"""A profile of the suite that a loaded machine does not distort much: the CPU seconds of each test.

Opt-in plugin: ``PYTHONPATH=.:tests python -m pytest -p cpu_profile -p no:xdist [PATHS]`` writes one JSON line
per test to ``$PPL_TOK_CPU_PROFILE`` (default ``cpu-profile.jsonl``) as the run goes: the node id, ``cpu`` (this
process, user and system, over setup, call and teardown: a session fixture is counted in the first test that
uses it), ``child`` (the processes the test started and waited for: the CLI, the wheel; not Ray's actors,
which Ray starts), ``wall`` and ``slow`` (whether the test carries the mark). Under xdist each worker's torch
uses one thread: set ``OMP_NUM_THREADS=1`` to profile as ``make test`` runs. ``--durations`` gives walls only.
The CPU seconds by directory::

    python -c "import json, collections, sys; s = collections.Counter()
    for line in open(sys.argv[1]): r = json.loads(line); s[r['id'].rsplit('/', 1)[0]] += r['cpu'] + r['child']
    print(*sorted(s.items()), sep='\n')" cpu-profile.jsonl
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    (own, children), wall = _cpu(), time.time()
    yield
    own_after, children_after = _cpu()
    row = {"id": item.nodeid, "cpu": round(own_after - own, 3), "child": round(children_after - children, 3),
           "wall": round(time.time() - wall, 2), "slow": item.get_closest_marker("slow") is not None}
    with open(os.environ.get("PPL_TOK_CPU_PROFILE", "cpu-profile.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")
