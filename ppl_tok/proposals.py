"""Proposals for the tokenization model: ordinary Pyro guides over its sites.

A guide takes the model's arguments ``(lm, mdd, context, num_particles)`` and
samples every ``"tok_{t}"`` site of :func:`ppl_tok.model.tokenization_model`
inside the plate ``"particles"``; any function that does so swaps in. The
easiest way to write one is :func:`mdd_guide`, which turns a function from the
particles' state to next-token logits into a guide (see the tutorial "Writing
your own proposal").

* :func:`lookahead_guide`: the paper's 1-step look-ahead proposal (Sec. 5,
  after Chirkova et al., 2023): the LM's next-token distribution masked to the
  MDD's out-edges at the current node and renormalised,
  ``q(v_j | v_<j) ∝ p(v_j | v_<j) 1[v_<=j tokenizes a prefix of x]``.
  The importance weight of a path is the product of the masked masses,
  ``prod_j sum_{v in out(node_j)} p(v | v_<j)``: no second scoring pass.
* :func:`uniform_guide`: uniform over the MDD's paths (exact, from path counts).
* :class:`StratifiedGuide`: the look-ahead restricted to the tokenizations a
  certified search has *not* enumerated (:mod:`ppl_tok.infer.importance`).
* :class:`LearnedProposal`: log-linear over features of the out-edges, with
  learnable weights, a floor that keeps every step's probability positive in
  float64, and a defensive mixture with the look-ahead that covers its tail
  (below; trained by :mod:`ppl_tok.infer.learn`).

The LM prior (the naive proposal the paper dismisses) is ``guide=None`` in
:func:`ppl_tok.infer.importance.marginal`: the model is its own proposal and every
sample that leaves the MDD is rejected.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import pyro
import torch

from ppl_tok.common.registry import Registry
from ppl_tok.distributions import OverCandidates
from ppl_tok.lm.base import LanguageModel
from ppl_tok.mdd import MDD
from ppl_tok.model import PLATE, ParticleWalk, conditioned, outer_batch_shape, site

#: A step proposal ``proposal(walk, i, out) -> logits``: for particle ``i`` of ``walk`` at an MDD
#: node whose out-edges are ``out`` (token -> next node), one logit per token of
#: ``out`` in its order (``-inf`` forbids a token; at least one must be finite).
StepLogits = Callable[[ParticleWalk, int, dict[int, int]], torch.Tensor]


def mdd_guide(proposal: StepLogits, name: str | None = None) -> Callable[..., torch.Tensor]:
    """A Pyro guide for :func:`~ppl_tok.model.tokenization_model` from a proposal over out-edges.

    Like the model, it runs ``outer_shape`` replicas of its particles inside
    enclosing vectorized plates (stock ``vectorized_importance_weights``), and
    returns the padded tokens (the model's return value).

    The logits stay torch expressions (:class:`~ppl_tok.distributions.OverCandidates`):
    a proposal whose logits depend on ``pyro.param`` sites is learnable with
    stock ``SVI`` / ``ReweightedWakeSleep``. A site observed by ``poutine.condition``
    (applied to the guide and the model alike) is masked out of ``log q``: the
    weight is then ``p(v) / q(v_unobserved | v_observed)``, whose mean is the
    probability of the string *and* the observed tokens.
    """

    def guide(lm: LanguageModel, mdd: MDD | Sequence[MDD], context: str | Sequence = "",
              num_particles: int = 1) -> torch.Tensor:
        walk = ParticleWalk(lm, mdd, context, num_particles, outer_batch_shape())
        with pyro.plate(PLATE, walk.batch_shape[-1], dim=-1):
            for t in range(walk.width):  # the model's sites, every one (finished particles masked)
                active = walk.active.clone()
                if not bool(active.any()):  # every particle finished: a masked placeholder site
                    zeros = torch.zeros(len(walk), 1)  # (uniforms given: no random draw)
                    with pyro.poutine.mask(mask=active.reshape(walk.batch_shape)):
                        pyro.sample(site(t), OverCandidates(zeros.long(), zeros.double(), zeros.flatten(),
                                                            walk.batch_shape))
                    continue
                candidates, logits = [], []
                for i in range(len(walk)):
                    out = walk.out_tokens(i) if active[i] else {}
                    if out:
                        candidates.append(list(out))
                        logits.append(proposal(walk, i, out))
                    else:  # finished particle: any value, masked out
                        candidates.append([0])
                        logits.append(torch.zeros(1))
                proposal_t = OverCandidates.from_lists(candidates, logits, walk.uniforms(), walk.batch_shape)
                # an observed site (poutine.condition on the guide) is no draw of q: its log q stays out of the weight
                keep = active & (not conditioned(site(t)))
                with pyro.poutine.mask(mask=keep.reshape(walk.batch_shape)):
                    tok = pyro.sample(site(t), proposal_t)
                walk.advance(tok)
        return walk.padded_tokens()

    guide.__name__ = guide.__qualname__ = name or getattr(proposal, "__name__", "mdd_guide")
    guide.__doc__ = proposal.__doc__
    guide.proposal = proposal  # the step proposal, for samplers that draw token by token (smc_marginal(guide=...))
    return guide


def lookahead(walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
    """The 1-step look-ahead: the LM's next-token log-probs of the MDD's out-edges."""
    return walk.edge_log_probs(i)


def uniform(walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
    """Uniform over the MDD's paths: each out-edge weighted by its number of completions."""
    log_counts = walk.mdd_of(i).log_path_counts
    return torch.tensor([log_counts[j] for j in out.values()], dtype=torch.float64)


lookahead_guide = mdd_guide(lookahead, "lookahead_guide")
uniform_guide = mdd_guide(uniform, "uniform_guide")


class StratifiedGuide:
    """The look-ahead proposal restricted to tokenizations outside an enumerated set ``S``.

    With ``S`` summed exactly, ``p(x) = sum_{v in S} p(v) + E_q[p(v)/q(v)]`` where
    ``q`` is supported on the complement of ``S``; the estimator stays unbiased and
    its variance comes only from the mass left outside ``S``. A token is allowed
    when some completion through it is not in ``S`` (``S`` counted per prefix
    against the MDD's path counts).
    """

    def __init__(self, mdd: MDD, enumerated: Sequence[tuple[int, ...]]):
        self.mdd = mdd
        self.covered: dict[tuple[int, ...], int] = {}
        for path in set(enumerated):
            for k in range(1, len(path) + 1):
                self.covered[path[:k]] = self.covered.get(path[:k], 0) + 1
        self.exhausted = len(set(enumerated)) >= mdd.count()
        self.caps = mdd.capped_path_counts(len(self.covered) + 1)  # exact below the cap: enough to compare
        self.guide = mdd_guide(self.proposal, "stratified_guide")

    def open(self, prefix: tuple[int, ...], node: int) -> bool:
        """Whether some tokenization through ``prefix`` (ending at ``node``) is outside ``S``."""
        return self.covered.get(prefix, 0) < self.caps[node]

    def proposal(self, walk: ParticleWalk, i: int, out: dict[int, int]) -> torch.Tensor:
        """The look-ahead, with the tokens whose completions are all in ``S`` forbidden."""
        if walk.mdd_of(i) is not self.mdd:
            raise ValueError("a StratifiedGuide samples the one string whose tokenizations it enumerated")
        prefix = tuple(walk.tokens[i])
        logits = lookahead(walk, i, out).double()
        closed = torch.tensor([not self.open(prefix + (t,), j) for t, j in out.items()])
        return logits.masked_fill(closed, -math.inf)

    def __call__(self, lm: LanguageModel, mdd: MDD, context: str | Sequence[int] = "",
                 num_particles: int = 1) -> torch.Tensor:
        if self.exhausted:
            raise ValueError("every tokenization is already enumerated: there is nothing left to sample")
        return self.guide(lm, mdd, context, num_particles)


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


@dataclass(frozen=True)
class Proposal:
    """A registered proposal: what ``--proposal NAME``, lm-eval's ``proposal=`` and a run's settings name.

    :param name: its name.
    :param guide: the ``guide=`` of :func:`ppl_tok.infer.importance.marginals`: a Pyro guide over the model's
        sites (a user's own), a name the importance sampler implements itself (``"lookahead"``, ``"uniform"``,
        ``"stratified"``), or ``None`` (the LM prior, rejection).
    :param from_record: a proposal with parameters of its own (``learned``): the guide of a run's settings record
        (the parameters travel with the run, not a path); ``None``: :attr:`guide`.
    :param read_file: a proposal whose parameters are read from a file: the settings record's fields of that file
        (its checksum and weights, so that a resume under another file is refused); ``None``: it takes no file.
    :param doc: one line: what it draws.
    """

    name: str
    guide: str | Callable[..., Any] | None = None
    from_record: Callable[[dict[str, Any]], Callable[..., Any]] | None = None
    read_file: Callable[[Path], dict[str, Any]] | None = None
    doc: str = ""

    def guide_of(self, record: dict[str, Any]) -> str | Callable[..., Any] | None:
        """The guide of a settings record of :func:`proposal_settings` naming this proposal."""
        return self.guide if self.from_record is None else self.from_record(record)


#: Every proposal by name (:class:`~ppl_tok.common.registry.Registry`): the built-in ones below, and a user's own
#: (:func:`register_proposal`); every consumer (``ppl-tok marginal``, perplexity's ``canonical+rest``, lm-eval, the
#: QA study) accepts any of them.
PROPOSALS: Registry[Proposal] = Registry("proposal", hint="add one with ppl_tok.proposals.register_proposal")


def register_proposal(proposal: Proposal, *, replace: bool = False) -> Proposal:
    """Register ``proposal`` under its name (``replace=True`` to shadow one of the same name, a built-in included;
    :func:`unregister_proposal` then restores it)."""
    if not isinstance(proposal, Proposal):
        raise TypeError(f"register_proposal takes a Proposal, got {proposal!r}")
    PROPOSALS.register(proposal.name, proposal, replace=replace)
    return proposal


def unregister_proposal(name: str) -> None:
    """Remove a registered proposal (a test's toy one, say); the one it shadowed is registered again."""
    PROPOSALS.unregister(name)


def proposal(name: str) -> Proposal:
    """The registered proposal ``name``; an unknown one is a ``ValueError`` naming the registered ones."""
    return PROPOSALS.lookup(name)


def _learned_file(file: Path) -> dict[str, Any]:
    import hashlib

    learned = LearnedProposal.load(file)  # a missing or foreign file: its one-line error, before any run starts
    return {"proposal_sha256": hashlib.sha256(Path(file).read_bytes()).hexdigest(),
            "proposal_weights": learned.weights.tolist(), "proposal_defensive": learned.defensive}


def _learned_guide(record: dict[str, Any]) -> Callable[..., Any]:
    if "proposal_weights" not in record:
        raise ValueError(f"a run's settings name the proposal {record.get('proposal')!r} without its weights: the "
                         "record is damaged or from another release; start a new run folder")
    return LearnedProposal(record["proposal_weights"], defensive=record.get("proposal_defensive")).guide


for _builtin in (
        Proposal("lookahead", "lookahead", doc="the LM's next-token distribution masked to the MDD (the default)"),
        Proposal("uniform", "uniform", doc="uniform over the MDD's paths"),
        Proposal("prior", None, doc="the LM prior, every draw that leaves the MDD rejected"),
        Proposal("stratified", "stratified", doc="the look-ahead over what a certified search has not enumerated"),
        Proposal("learned", from_record=_learned_guide, read_file=_learned_file,
                 doc="log-linear over edge features, weights from `ppl-tok learn-proposal` (a proposal file)")):
    PROPOSALS.register(_builtin.name, _builtin)


def named_guide(name: str) -> Callable[..., Any] | None:
    """The guide of ``guide=name`` in :func:`ppl_tok.infer.importance.marginals`: a registered proposal's own guide
    (``None``: the prior). A proposal built from a settings record (``learned``) or run by the sampler itself
    (``stratified``) is an error naming the fix."""
    found, own = proposal(name), {"lookahead": lookahead_guide, "uniform": uniform_guide}
    if found.from_record is not None or (isinstance(found.guide, str) and found.guide not in own):
        raise ValueError(f"proposal {name!r} is not a plain guide: pass guide=ppl_tok.proposals.resolve_proposal"
                         f"({name!r}, ...) (its settings' guide), or use marginal()")
    return own.get(found.guide, found.guide) if isinstance(found.guide, str) else found.guide


def proposal_settings(name: str = "lookahead", file: str | Path | None = None) -> dict[str, Any]:
    """The settings record of a proposal: ``{"proposal": name}``, plus what its file holds (``learned``: the
    file's SHA-256 and weights).

    A run stores it, so that a resume with another proposal file (another checksum) is refused, and
    rebuilds its guide from it (:func:`settings_guide`). A proposal that reads a file needs ``file``; the others
    refuse one (one-line errors naming the fix); an unknown name is an error naming the registered ones.
    """
    found = proposal(name)
    check_file(found, file, "proposal {} and a proposal file")
    return {"proposal": name, **({} if file is None else found.read_file(Path(file)))}


def check_file(found: Proposal, file: object, pair: str) -> None:
    """A proposal that reads a file is given one, and only such a proposal is: else a ``ValueError`` naming the
    pair (``pair``: how the setting reads, ``{}`` for the proposals that read files, ``"--proposal {} and
    --proposal-file F"``)."""
    if (found.read_file is not None) != (file is not None):
        readers = "|".join(n for n, p in PROPOSALS.items() if p.read_file is not None)
        raise ValueError(f"{pair.format(readers)} go together: give both (train the file with "
                         "`ppl-tok learn-proposal WORDS --out F`), or neither")


def settings_guide(record: dict[str, Any]) -> str | Callable[..., Any] | None:
    """The guide of a settings record of :func:`proposal_settings` (``"lookahead"`` where none is recorded)."""
    name = record.get("proposal", "lookahead")
    try:
        found = proposal(name)
    except ValueError as err:
        raise ValueError(f"a run's settings name the proposal {name!r}, which is not registered here ({err}): "
                         "register it before the run, or start a new run folder") from None
    return found.guide_of(record)


def resolve_proposal(name: str = "lookahead", file: str | Path | None = None) -> str | Callable[..., Any] | None:
    """The ``guide=`` of :func:`ppl_tok.infer.importance.marginals` for a consumer's proposal setting: the one
    place ``ppl-tok marginal``, QA, perplexity and lm-eval turn ``proposal`` (and its file) into a guide (checked
    as :func:`proposal_settings` checks it)."""
    return settings_guide(proposal_settings(name, file))
