"""Kill a child process (SIGKILL) while it appends to a store, or a Ray worker mid-batch: the shared harness of the
stores' crash tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def line_count(path: Path) -> int:
    """Complete lines in ``path`` (0 if it does not exist yet)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def kill_while_appending(script: Path, records: Path, delays: tuple[float, ...] = (0.0, 0.017),
                         progress: int = 3) -> int:
    """Run ``script`` once per delay and SIGKILL it ``delay`` seconds after it appended ``progress`` lines.

    A zero delay kills right after progress is seen, a small one often mid-write. Returns the kills made.
    """
    kills = 0
    for delay in delays:
        start = line_count(records)
        proc = subprocess.Popen([sys.executable, str(script)], env=os.environ.copy())
        deadline = time.monotonic() + 120
        while proc.poll() is None and line_count(records) < start + progress and time.monotonic() < deadline:
            time.sleep(0.003)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    return kills


def killed_twice_then_finished(script: Path, records: Path, total: int, delays: tuple[float, ...] = (0.0, 0.013),
                               progress: int = 3, **run: Any) -> subprocess.CompletedProcess:
    """The crash test's steps: SIGKILL ``script`` once per delay while it appends to ``records``
    (:func:`kill_while_appending`), check that every delay killed it part-way (some of the ``total`` lines
    stored, not all), then run it to the end (``run``: more ``subprocess.run`` arguments) and return that run."""
    kills = kill_while_appending(script, records, delays, progress)
    assert kills >= len(delays), "the child finished before it could be killed"
    assert 0 < line_count(records) < total
    return subprocess.run([sys.executable, str(script)], check=True, env=os.environ.copy(), **run)


def ray_driver(body: str, root: Path, address: str) -> str:
    """A driver script: ``tests/`` and the checkout ``root`` on its path (and its actors'), connected to the Ray at
    ``address``, then ``body``."""
    tests = str(root / "tests")
    path = os.pathsep.join([tests, str(root)])
    return (f"import sys\nsys.path[:0] = [{tests!r}, {str(root)!r}]\nimport ray\n"
            f"ray.init(address={address!r}, log_to_driver=False,\n"
            f"         runtime_env={{'env_vars': {{'PYTHONPATH': {path!r}, 'OMP_NUM_THREADS': '1'}}}})\n" + body)


@dataclass(frozen=True)
class CrashOnceLoader:
    """The toy LM, whose worker process is SIGKILLed (by itself) at its first call of ``method`` if ``marker`` is
    absent, mid-batch (it writes ``marker`` first, so the actor that replaces it lives). ``always``: at every call."""

    marker: str
    always: bool = False
    method: str = "log_probs_many"

    def __call__(self):
        from qa_toy import toy_lm

        lm = toy_lm()
        real = getattr(lm, self.method)
        marker = Path(self.marker)

        def crashing(*args, **kwargs):
            if self.always or not marker.exists():
                marker.write_text("the worker died here\n")
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        setattr(lm, self.method, crashing)
        return lm
