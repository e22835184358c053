"""The learned proposal: log-linear over features of the out-edges, floored in float64, optionally mixed with the
look-ahead (a defensive mixture), and its file (trained by :mod:`ppl_tok.infer.learn`)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyro
import torch

from ppl_tok.model import ParticleWalk
from ppl_tok.proposals.guides import lookahead, mdd_guide

#: the features of an out-edge, in the order of the weights
FEATURES = ("lookahead_log_prob", "edge_bytes", "reaches_end", "log_completions_change")
#: the weights of the paper's look-ahead, where training starts
LOOKAHEAD_WEIGHTS = (1.0, 0.0, 0.0, 0.0)
FORMAT = "ppl-tok learned proposal v1"


def edge_features(walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
    """``[len(out), 4]`` float64: the :data:`FEATURES` of particle ``i``'s out-edges (in ``out``'s order)."""
    mdd, node = walk.mdd_of(i), walk.nodes[i]
    counts = mdd.log_path_counts
    lp = walk.edge_log_probs(i).to("cpu", torch.float64)
    rest = torch.tensor([[float(j - node), float(j == mdd.sink), counts[j] - counts[node]] for j in out.values()],
                        dtype=torch.float64)
    return torch.cat([lp.reshape(-1, 1), rest], 1)


#: ``epsilon``, the share of each step of a learned proposal spread evenly over the out-edges (its floor)
FLOOR = 1e-3
#: ``a``, the share of the look-ahead in a learned proposal's defensive mixture: 0, chosen on a tuning split
#: (OpenBookQA dev answers; a = 0.1 and 0.3 had the larger 90th-percentile error there, and more forwards) and
#: checked on a held-out one (OpenBookQA test): docs/pyro.md, "A learned proposal that covers its tail"
DEFENSIVE = 0.0


def floored_log_softmax(logits: torch.Tensor, floor: float = FLOOR) -> torch.Tensor:
    """``log((1 - eps) softmax(z) + eps / K)`` over the ``K`` entries of ``logits`` ``z``, in log space.

    Every entry is at least ``log(eps / K)`` however large ``z``'s spread: ``exp`` of it never underflows in
    float64 (``eps = 1e-3``, ``K < 1e300``), so a draw can reach every entry the formula gives mass.
    Entries of ``z`` that are ``-inf`` stay ``-inf`` (forbidden tokens are not floored); a row of ``-inf`` only is
    uniform.
    """
    z = logits.double()
    allowed = z > -math.inf
    if not bool(allowed.any()):
        return torch.full_like(z, -math.log(z.numel()))
    k = int(allowed.sum())
    soft = torch.log_softmax(torch.where(allowed, z, z.new_tensor(-math.inf)), -1)
    if floor <= 0.0:
        return soft
    floored = torch.logaddexp(soft + math.log1p(-floor), z.new_tensor(math.log(floor / k)).expand_as(z))
    return torch.where(allowed, floored, z.new_tensor(-math.inf))


class LearnedProposal:
    """A learnable proposal: log-linear over features of the MDD's out-edges, floored, and mixed with the look-ahead.

    For particle ``i`` at MDD node ``b`` (a byte offset) with ``K`` out-edges ``v -> b'`` the learned step is

        q_w(v | v_<) = (1 - eps) softmax_v(w · f(v)) + eps / K,
        f(v) = (log p(v | c, v_<), b' - b, 1[b' = n], log C(b') - log C(b)),

    the LM's look-ahead log-probability, the edge's bytes, whether it reaches the
    string's end ``n``, and the change in the log count of completions ``C`` (the
    MDD's path counts). ``w = (1, 0, 0, 0)`` is the paper's look-ahead
    (:func:`lookahead`), ``w = (0, 0, 0, 1)`` the uniform proposal over paths
    (both up to the floor ``eps``, :data:`FLOOR`). The features are those of the
    MDD and the LM's own next-token log-probs, so one ``w`` serves any string and
    any LM (train it on the LM it serves).

    **q stays positive, in floating point too.** ``softmax(w · f)`` alone is positive in
    exact arithmetic but not in float64: with large weights ``exp(w · (f(v) - f(v')))``
    underflows to 0, every draw follows one path, and the weights ``p / q`` no longer
    come from the distribution that was sampled (a collapsed estimate, off by any
    amount with a perfect ESS). The floor makes every step's probability at least
    ``eps / K`` (computed in log space, :func:`floored_log_softmax`), so a path of
    ``T`` steps has ``q_w(v) >= prod_t eps / K_t > 0`` for *any* finite ``w``.

    **The defensive mixture** (Hesterberg, 1995; Owen & Zhou, 2000): the proposal
    used for a whole path is

        q(v) = (1 - a) q_w(v) + a q_LA(v),

    with ``q_LA`` the look-ahead (:func:`lookahead`) and ``a`` = :attr:`defensive`
    (default :data:`DEFENSIVE`, 0: measured, the floor alone did better on the tuning split).
    It is drawn step by step with the mixture's own conditionals,
    ``q(v_t | v_<t) = sum_z r_z(v_<t) q_z(v_t | v_<t)`` where the responsibilities
    ``r_z(v_<t) ∝ pi_z prod_{s<t} q_z(v_s | v_<s)`` (``pi = (1 - a, a)``) are carried along each prefix,
    so the product of the steps is exactly the path-level mixture (no auxiliary site) and the weight
    is ``p(v) / q(v)`` with ``q(v) >= a q_LA(v)`` and ``q(v) >= (1 - a) q_w(v)``: the
    importance weights are never more than ``1 / a`` times the look-ahead's, however
    wrong ``w`` is. Both components read the same next-token rows, so the mixture
    costs no more forwards per step than either. ``a = 0`` is the learned step alone.

    ``w`` is the ``pyro.param`` named :attr:`LearnedProposal.name` while training
    (:mod:`ppl_tok.infer.learn` trains ``q_w`` alone, ``a = 0``, with stock ``ReweightedWakeSleep``);
    the guide is :func:`mdd_guide` of :meth:`LearnedProposal.proposal`.
    A file holds the weights, the training step and the optimiser's state
    (``torch.save`` of plain tensors; loaded with ``weights_only=True``).

    :param weights: 4 numbers (default: the look-ahead's, ``(1, 0, 0, 0)``).
    :param name: the ``pyro.param`` the weights live in while :attr:`training`.
    :param defensive: ``a`` in ``[0, 1]``, the look-ahead's share of the mixture (``None``: :data:`DEFENSIVE`).
    :param floor: ``eps`` in ``(0, 1)``, the even share of each learned step.
    """

    def __init__(self, weights: Sequence[float] | torch.Tensor = LOOKAHEAD_WEIGHTS, name: str = "proposal_weights",
                 *, defensive: float | None = None, floor: float = FLOOR):
        w = torch.as_tensor(weights, dtype=torch.float64).detach().clone().reshape(-1)
        if w.numel() != len(FEATURES) or not bool(torch.isfinite(w).all()):
            raise ValueError(f"a learned proposal has {len(FEATURES)} finite weights ({', '.join(FEATURES)}), "
                             f"got {w.tolist()}")
        defensive = DEFENSIVE if defensive is None else defensive
        if not 0.0 <= defensive <= 1.0:
            raise ValueError(f"defensive={defensive!r}: the look-ahead's share of the mixture is in [0, 1]")
        if not 0.0 < floor < 1.0:
            raise ValueError(f"floor={floor!r}: the even share of each step is in (0, 1) (0 lets q underflow)")
        self.weights = w
        self.name = name
        self.defensive = float(defensive)
        self.floor = float(floor)
        self.training = False
        self.step = 0
        self.optimizer_state: dict[str, Any] | None = None
        self.meta: dict[str, Any] = {}
        self._walk: Any = None  # the walk whose prefixes :attr:`_responsibilities` describe (a weak reference)
        self._responsibilities: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}
        self.guide: Callable[..., torch.Tensor] = mdd_guide(self.proposal, "learned_guide")

    def current(self) -> torch.Tensor:
        """The weights: the ``pyro.param`` while training (initialised from :attr:`weights`), else :attr:`weights`."""
        return pyro.param(self.name, self.weights.clone()) if self.training else self.weights

    def step_log_probs(self, walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
        """``log q_w(v | v_<)`` for each out-edge ``v``: the floored learned step (differentiable in ``w``)."""
        features = edge_features(walk, i, out)
        lp = features[:, 0]
        # an edge the LM gives probability 0 keeps logit -inf (0 * -inf would be NaN)
        logits = torch.where(lp > -math.inf, torch.nan_to_num(features, neginf=0.0) @ self.current(),
                             lp.new_tensor(-math.inf))
        return floored_log_softmax(logits, self.floor)

    def proposal(self, walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
        """``log q(v_t | v_<t)`` of the defensive mixture for each out-edge (``log q_w`` when ``a = 0`` or training)."""
        learned = self.step_log_probs(walk, i, out)
        a = 0.0 if self.training else self.defensive
        if a == 0.0:
            return learned
        look = floored_log_softmax(lookahead(walk, i, out).to("cpu", torch.float64), 0.0)
        if a == 1.0:
            return look
        if self._walk is None or self._walk() is not walk:  # a new run: forget the last one's prefixes
            import weakref

            self._walk, self._responsibilities = weakref.ref(walk), {}
        prefix = (walk.group[i], tuple(walk.tokens[i]))
        prior = self._responsibilities.get(prefix)
        if prior is None:
            prior = torch.tensor([math.log1p(-a), math.log(a)], dtype=torch.float64)
        joint = prior[:, None] + torch.stack([learned, look])  # [2, K]: log pi_z prod q_z, one row per component
        for k, token in enumerate(out):
            self._responsibilities[(prefix[0], prefix[1] + (token,))] = joint[:, k].detach()
        return torch.logsumexp(joint, 0) - torch.logsumexp(prior, 0)

    def __call__(self, lm, mdd, context="", num_particles: int = 1) -> torch.Tensor:
        return self.guide(lm, mdd, context, num_particles)

    def __repr__(self) -> str:
        pairs = ", ".join(f"{n}={w:.4g}" for n, w in zip(FEATURES, self.weights.tolist()))
        return f"LearnedProposal({pairs}; defensive {self.defensive:g}; step {self.step})"

    def save(self, path: str | Path) -> None:
        """Write the weights, the step, the optimiser's state and :attr:`meta` to ``path`` (atomically)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({"format": FORMAT, "features": list(FEATURES), "weights": self.weights, "step": self.step,
                    "optimizer_state": self.optimizer_state, "meta": dict(self.meta)}, tmp)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> LearnedProposal:
        """The proposal saved at ``path``; a missing or foreign file is a one-line error naming it."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no learned proposal at {path}: train one with `ppl-tok learn-proposal WORDS --out "
                             f"{path}` (or ppl_tok.infer.learn.train_proposal)")
        try:
            data = torch.load(path, weights_only=True)
        except Exception as err:  # torch raises many kinds on a foreign file
            raise ValueError(f"{path} is not a learned proposal file ({type(err).__name__}): train one with "
                             "`ppl-tok learn-proposal`") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("features") != list(FEATURES):
            raise ValueError(f"{path} is not a {FORMAT!r} file with features {list(FEATURES)}: retrain it with "
                             "`ppl-tok learn-proposal`")
        out = cls(_file_weights(data.get("weights"), path))
        step, state, meta = data.get("step"), data.get("optimizer_state"), data.get("meta", {})
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"{path}: 'step' holds {step!r}, not a count of training steps: the file is damaged; "
                             "retrain it with `ppl-tok learn-proposal`")
        for key, value in (("optimizer_state", state), ("meta", meta)):
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{path}: {key!r} holds a {type(value).__name__}, not a dict: the file is damaged; "
                                 "retrain it with `ppl-tok learn-proposal`")
        out.step, out.optimizer_state, out.meta = step, state, dict(meta or {})
        return out


def _file_weights(weights: Any, path: Path) -> torch.Tensor:
    """The weights a proposal file holds, as float64; anything but :data:`FEATURES`' count of finite real numbers
    is a one-line error naming the file."""
    if isinstance(weights, torch.Tensor) and not weights.is_complex() and weights.dtype != torch.bool:
        w = weights.detach().to(torch.float64).reshape(-1)
    elif isinstance(weights, (list, tuple)) and all(isinstance(x, numbers.Real) and not isinstance(x, bool)
                                                   for x in weights):
        w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
    else:
        shown = repr(weights)[:60]
        raise ValueError(f"{path}: 'weights' holds {shown}, not {len(FEATURES)} numbers ({', '.join(FEATURES)}): "
                         "the file is damaged; retrain it with `ppl-tok learn-proposal`")
    if w.numel() != len(FEATURES) or not bool(torch.isfinite(w).all()):
        raise ValueError(f"{path}: 'weights' holds {w.tolist()}, not {len(FEATURES)} finite numbers "
                         f"({', '.join(FEATURES)}): retrain it with `ppl-tok learn-proposal`")
    return w
