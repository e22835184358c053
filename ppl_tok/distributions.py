"""Next-token distributions for N particles that never build an ``[N, |V|]`` tensor.

Both are ordinary Pyro distributions (batch shape ``[N]``, integer token ids as
values), so they sit at the model's and the guides' sample sites like
``dist.Categorical`` would, at a fraction of the cost for large vocabularies:

* :class:`NextToken`: the LM's own next-token distribution of each particle,
  read from the LM's states on its device; ``log_prob`` fetches one entry per particle.
* :class:`OverCandidates`: a distribution over a few candidate tokens per
  particle (a proposal restricted to the MDD's out-edges), normalised over them.

Shapes follow Pyro's semantics: the particles are held flat, in the row-major
order of ``batch_shape`` (``outer_shape + (particles,)`` under enclosing
vectorized plates, see :mod:`ppl_tok.model`); values and ``log_prob`` have
exactly ``batch_shape``, and ``expand`` accepts the shapes a plate broadcast
asks for (the same shape up to leading singleton dims).

Enumeration (Pyro's ``config_enumerate(..., "sequential")``): a lone particle's
``enumerate_support`` is the MDD's out-edges at its node (:class:`NextToken`:
every other token leaves the MDD, where the model's factor ``"off_mdd_{t}"`` gives
weight zero, so leaving them out changes no sum and no maximum) or its
candidates (:class:`OverCandidates`); a finished particle has the one masked
placeholder value ``0``. Only sequential enumeration of one particle is defined:
later sites depend on the values of earlier ones (the LM reads them), which
parallel enumeration cannot express (see :mod:`ppl_tok.infer.enumeration`).
"""

from __future__ import annotations

import math
import copy
from collections.abc import Sequence

import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints

from ppl_tok.common.sampling import inverse_cdf


class _Particles(TorchDistribution):
    """One value per particle, held flat; ``batch_shape`` only arranges them (see the module docstring)."""

    arg_constraints: dict = {}
    support = constraints.nonnegative_integer

    def _shaped(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.reshape(self.batch_shape)

    def expand(self, batch_shape, _instance=None):
        shape = torch.Size(batch_shape)
        if _strip(shape) != _strip(self.batch_shape):
            raise ValueError(f"{type(self).__name__} has batch shape {tuple(self.batch_shape)} (one entry per "
                             f"particle), cannot expand to {tuple(shape)}: run the model inside the plates instead")
        new = copy.copy(self)
        new._batch_shape = shape
        return new


def _one_particle(d: _Particles) -> None:
    if d.batch_shape.numel() != 1:
        raise ValueError(f"{type(d).__name__}.enumerate_support enumerates one particle (batch shape "
                         f"{tuple(d.batch_shape)}): enumerate the model with num_particles=1 and no vectorized "
                         "plates around it (ppl_tok.infer.enumeration does)")


def _strip(shape: torch.Size) -> torch.Size:
    """``shape`` without its leading singleton dims."""
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return torch.Size(dims)


class NextToken(_Particles):
    """Each particle's LM next-token distribution, read from a particle walk.

    ``walk`` is a :class:`~ppl_tok.model.ParticleWalk` (its ``lm``, ``states``,
    ``active`` and ``uniforms()``), snapshotted at construction. Sampling draws
    on the device by inverse CDF; ``log_prob`` fetches one entry per active
    particle (finished particles get 0: the model masks them out).
    """

    has_enumerate_support = True

    def __init__(self, walk):
        self.lm = walk.lm
        self.states = list(walk.states)
        self.live = torch.nonzero(walk.active).flatten().tolist()
        self._nodes, self._mdd_of = list(walk.nodes), walk.mdd_of
        self._uniforms = walk.uniforms
        super().__init__(batch_shape=torch.Size(getattr(walk, "batch_shape", [len(self.states)])),
                         validate_args=False)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise NotImplementedError("NextToken draws one token per particle")
        out = torch.zeros(len(self.states), dtype=torch.long)
        if self.live:  # no draw at all once every particle has finished (the model's masked tail sites)
            u = self._uniforms()
            out[self.live] = self.lm.sample_tokens([self.states[i] for i in self.live], u[self.live])
        return self._shaped(out)

    def enumerate_support(self, expand: bool = True) -> torch.Tensor:
        """``[K, *batch_shape]``: the lone particle's MDD out-edges (the only tokens of nonzero weight), or ``[[0]]``
        once it has finished (a masked site)."""
        _one_particle(self)
        tokens = list(self._mdd_of(0).out_tokens(self._nodes[0])) if self.live else [0]
        return torch.tensor(tokens, dtype=torch.long).reshape((-1,) + tuple(self.batch_shape))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        values = value.reshape(-1).tolist()
        out = torch.zeros(len(self.states), dtype=torch.float64)
        if self.live:
            out[self.live] = self.lm.token_log_prob_table([self.states[i] for i in self.live],
                                                          [[int(values[i])] for i in self.live]).reshape(-1)
        return self._shaped(out)


class OverCandidates(_Particles):
    """A proposal over a few candidate tokens per particle, normalised per row.

    ``q(candidates[i, k]) = exp(logits[i, k] - logsumexp_k logits[i, k])`` for
    particle ``i`` (row ``i`` is the ``i``-th particle in the row-major order of
    ``batch_shape``, default ``(N,)``); ``-inf`` pads a row. The logits stay a
    torch expression: ``log_prob`` is differentiable in them, so a proposal whose
    logits depend on ``pyro.param`` sites learns under ``SVI`` and
    ``ReweightedWakeSleep`` (sampling is not differentiated: it is discrete).

    :param candidates: ``[N, K]`` token ids (``LongTensor``).
    :param logits: ``[N, K]`` unnormalised log-weights (any float dtype, computed in float64; no NaN, no ``+inf``).
    :param uniforms: ``[N]`` uniforms for a seeded inverse-CDF draw (``None``: ``torch.multinomial``).
    :param batch_shape: the shape the ``N`` particles are arranged in (its product must be ``N``).
    """

    def __init__(self, candidates: torch.Tensor, logits: torch.Tensor, uniforms: torch.Tensor | None = None,
                 batch_shape: Sequence[int] | None = None):
        if candidates.shape != logits.shape or candidates.dim() != 2:
            raise ValueError("candidates and logits must both be [N, K]")
        if torch.isnan(logits).any():
            raise ValueError("a proposal gave NaN logits")
        logits = logits.double()
        norm = torch.logsumexp(logits, -1, keepdim=True)
        if (norm == math.inf).any():
            raise ValueError("a proposal gave +inf logits")
        self.candidates = candidates
        self.logits = logits - norm
        self.uniforms = uniforms
        shape = torch.Size([candidates.shape[0]] if batch_shape is None else batch_shape)
        if shape.numel() != candidates.shape[0]:
            raise ValueError(f"batch shape {tuple(shape)} does not hold {candidates.shape[0]} particles")
        super().__init__(batch_shape=shape, validate_args=False)

    @classmethod
    def from_lists(cls, candidates: Sequence[Sequence[int]], logits: Sequence[torch.Tensor | Sequence[float]],
                   uniforms: torch.Tensor | None = None, batch_shape: Sequence[int] | None = None) -> OverCandidates:
        """Pad ragged candidate lists (torch operations only: gradients flow from ``logits``).

        A row whose logits are all ``-inf`` (every allowed token has probability zero) becomes
        uniform over its candidates: the model then gives the drawn token probability zero, so
        the particle gets weight zero instead of an error."""
        width = max(1, max((len(c) for c in candidates), default=1))
        rows = [(lp if torch.is_tensor(lp) else torch.as_tensor(lp, dtype=torch.float64)).reshape(-1) for lp in logits]
        for c, row in zip(candidates, rows):
            if row.numel() != len(c):
                raise ValueError(f"{len(c)} candidates but {row.numel()} logits")
        ids = torch.tensor([list(c) + [0] * (width - len(c)) for c in candidates],
                           dtype=torch.long).reshape(len(candidates), width)
        if not rows:
            return cls(ids, torch.zeros(0, width, dtype=torch.float64), uniforms, batch_shape)
        # padded on the rows' own device and read on the host once (one synchronisation a step on a GPU, not one per
        # particle, and the host's tokens after it); every operation is torch's, so gradients flow from ``logits``
        device = next((r.device for r in rows if r.device.type != "cpu"), rows[0].device)
        rows = [(r if r.device == device else r.to(device, non_blocking=True)).to(torch.float64) for r in rows]
        lps = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=-math.inf)
        if lps.shape[1] < width:
            lps = torch.cat([lps, lps.new_full((lps.shape[0], width - lps.shape[1]), -math.inf)], 1)
        return cls.from_padded(ids, lps.cpu(), [len(c) for c in candidates], uniforms, batch_shape)

    @classmethod
    def from_padded(cls, candidates: torch.Tensor, logits: torch.Tensor, counts: Sequence[int],
                    uniforms: torch.Tensor | None = None, batch_shape: Sequence[int] | None = None) -> OverCandidates:
        """Candidates already padded: ``candidates[i, :counts[i]]`` with their ``logits`` (``-inf`` after them),
        both ``[N, K]``. A row whose logits are all ``-inf`` becomes uniform over its candidates
        (:meth:`from_lists`)."""
        valid = torch.arange(candidates.shape[1]) < torch.as_tensor(counts, dtype=torch.long)[:, None]
        dead = ~(logits > -math.inf).any(-1, keepdim=True)  # every allowed token at probability zero: uniform instead
        return cls(candidates, torch.where(dead & valid, 0.0, logits), uniforms, batch_shape)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise NotImplementedError("OverCandidates draws one token per particle")
        probs = self.logits.detach().exp()
        if self.uniforms is None:
            k = torch.multinomial(probs, 1)
        else:  # inverse CDF at the given uniforms
            k = inverse_cdf(probs.cumsum(-1), self.uniforms.reshape(-1, 1).double())
        return self._shaped(self.candidates.gather(1, k).flatten())

    has_enumerate_support = True

    def enumerate_support(self, expand: bool = True) -> torch.Tensor:
        """``[K, *batch_shape]``: the lone particle's candidates of positive probability."""
        _one_particle(self)
        keep = self.logits[0] > -math.inf
        return self.candidates[0][keep].reshape((-1,) + tuple(self.batch_shape))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        hit = self.candidates == value.reshape(-1, 1)
        return self._shaped(torch.logsumexp(self.logits.masked_fill(~hit, -math.inf), -1))
