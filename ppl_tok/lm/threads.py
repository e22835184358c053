"""torch's CPU threads: one default for the command line, lm-eval's model and the Python API.

``threads`` given, else ``$OMP_NUM_THREADS`` (a positive integer), else :data:`DEFAULT_THREADS` (one). On the
bundled LMs the string-level walks run small forwards, where a second thread buys little on a quiet machine and costs
much on a busy one (README "Threads"; issue 57 measured torch's own default of 2 threads on a loaded 2-core machine at
3x the CPU of one thread for canonical lm-eval scoring and 6x for conditional, for the same scores).

``ppl-tok --threads N``, lm-eval's ``threads=N`` and :func:`ppl_tok.lm.cards.load_lm` (the first LM a process loads,
unless threads were chosen through :func:`set_cpu_threads` before) all call :func:`set_cpu_threads`.
"""

from __future__ import annotations

import os

#: torch's CPU threads when neither ``threads`` nor ``$OMP_NUM_THREADS`` says: one.
DEFAULT_THREADS = 1

_CHOSEN: list[int] = []  # the threads set by set_cpu_threads in this process (the last)


def cpu_threads(threads: int | None = None) -> int:
    """The CPU threads to use: ``threads``, else ``$OMP_NUM_THREADS`` if it is a positive integer, else
    :data:`DEFAULT_THREADS`.

    :raises ValueError: ``threads`` is given and not a positive integer.
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        return threads
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else DEFAULT_THREADS


def set_cpu_threads(threads: int | None = None) -> int:
    """Set torch's CPU threads to :func:`cpu_threads` ``(threads)``; the number set."""
    import torch

    n = cpu_threads(threads)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    _CHOSEN[:] = [n]
    return n


def default_cpu_threads() -> int:
    """:func:`set_cpu_threads` with the default, unless threads were set through it already in this process (a
    command's ``--threads``, lm-eval's ``threads=``, a caller's own): the number in force."""
    return _CHOSEN[0] if _CHOSEN else set_cpu_threads()


__all__ = ["DEFAULT_THREADS", "cpu_threads", "default_cpu_threads", "set_cpu_threads"]
