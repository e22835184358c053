"""Seeds derived from names: one random stream per (question, answer) pair or document window.

:func:`pair_seed` hashes ``(seed, split, id, choice)`` with sha256 and keeps 31
bits, so a pair's draws depend on the study's seed and the pair's identity
only: not on batching, order, resumption or which other pairs run beside it.
The QA study (split ``"tune"``/``"test"``, question id, answer index), the
perplexity study (split ``"perplexity"``, document index, window index) and
the lm-eval integration all draw from it.
"""

from __future__ import annotations

import hashlib


def pair_seed(seed: int, split: str, question_id: str, choice: int) -> int:
    """The RNG seed of one (question, answer) pair: a 31-bit hash of ``(seed, split, id, choice)``."""
    digest = hashlib.sha256(f"{seed}/{split}/{question_id}/{choice}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
