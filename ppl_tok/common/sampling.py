"""Inverse-CDF sampling: the one place a categorical draw from given uniforms is made.

Every seeded draw of ppl-tok (a proposal's token, the LM's next token, a
generated token) takes its uniforms from the caller's generator on the host and
picks, row by row, the first index whose cumulative weight exceeds ``u`` times
the row's total: ``k = min{k : cdf[k] > u * cdf[-1]}``. The weights need not be
normalised, and the draw runs wherever ``cdf`` lives (no host-device sync).
"""

from __future__ import annotations

import torch


def inverse_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Indices ``[B, M]`` drawn from the rows of ``cdf`` (``[B, K]`` cumulative weights) at uniforms ``u`` ``[B, M]``.

    ``u`` must be on ``cdf``'s device; an index past the last (``u`` rounding up to 1) is clamped to ``K - 1``.
    """
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_max(cdf.shape[-1] - 1)
