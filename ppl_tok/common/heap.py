"""The C heap under torch on glibc: settings that make a process's memory follow its live tensors.

A CPU tensor's storage comes from ``malloc``. glibc serves a request of at least
``M_MMAP_THRESHOLD`` bytes with a mapping of its own, returned to the OS by
``free``; smaller ones come from a heap (an *arena*), whose freed pages stay in
the process. The threshold starts at 128 KiB and is *dynamic*: each time a
mapped block is freed, it rises to that block's size (up to 32 MiB). So after
the first free of, say, a 12 MiB ``[B, V]`` log-prob block, every block up to
that size is cut from the heap, where blocks of different lifetimes leave holes
that the next, larger, block cannot reuse, and the heap grows past what is live.
Threads make it worse: glibc gives a thread that finds its arena locked another
one (up to 8 per core), so how much each arena holds depends on timing, and the
same command on the same input peaks at a different size from run to run
(docs/limits.md, "Memory that holds").

:func:`tune_heap` fixes the threshold at :data:`MMAP_THRESHOLD` (a fixed value
turns the dynamic rise off: every block of a megabyte or more is mapped and
returned when freed) and caps the arenas at :data:`ARENA_MAX`. The CLI calls it
first thing, a Ray actor before it loads its LM. A user's own ``MALLOC_*``
environment or ``GLIBC_TUNABLES`` wins (nothing is changed), and
``PPL_TOK_MALLOC=default`` keeps glibc's defaults. Elsewhere than glibc both
functions do nothing.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

#: ``mallopt`` parameters (glibc's ``malloc.h``)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: blocks of at least this many bytes get a mapping of their own, returned to the OS when freed
MMAP_THRESHOLD = 1 << 20
#: at most this many malloc arenas (glibc's default: 8 per core)
ARENA_MAX = 2
#: ``PPL_TOK_MALLOC=default``: leave glibc's settings alone
ENV = "PPL_TOK_MALLOC"
#: environment variables through which a user sets glibc's malloc; :func:`tune_heap` then changes nothing
USER_SETTINGS = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_",
                 "GLIBC_TUNABLES")

_LIBC: Any = None


def _libc() -> Any:
    """glibc (with ``mallopt`` and ``malloc_trim``), or ``False`` elsewhere."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 - glibc only
            _LIBC.mallopt  # noqa: B018
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


def tune_heap(mmap_threshold: int = MMAP_THRESHOLD, arena_max: int = ARENA_MAX) -> bool:
    """Fix glibc's mmap threshold at ``mmap_threshold`` bytes and cap its arenas at ``arena_max``.

    Call it before the large allocations (the CLI does, first thing). Returns whether it changed anything:
    ``False`` off glibc, under ``PPL_TOK_MALLOC=default``, or when the environment already sets malloc
    (:data:`USER_SETTINGS`).
    """
    libc = _libc()
    if not libc or os.environ.get(ENV, "").lower() == "default" or any(k in os.environ for k in USER_SETTINGS):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) & bool(libc.mallopt(M_ARENA_MAX, int(arena_max)))


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim``; elsewhere a no-op).

    Tensors freed by Python return to the C allocator, which on glibc keeps most of
    them in its heap: the process's RSS then reports memory nothing uses.
    """
    libc = _libc()
    if libc:
        libc.malloc_trim(0)
