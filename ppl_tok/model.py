"""The tokenization process as a Pyro model (Geh et al., 2024, Def. 3.1 and Sec. 5).

Step ``t`` samples ``tok_t ~ Categorical(p(. | context, tok_<t))`` at the sample
site ``"tok_{t}"``; the MDD of the string constrains the process: a token that
leaves the MDD gets weight zero (the factor ``"off_mdd_{t}"`` is ``-inf``) and
ends that particle, reaching the MDD's end ends it too. The evidence is

    p(x | c) = sum over tokenizations v of x of prod_t p(v_t | c, v_<t),

the marginal string probability, so ``pyro.infer.Importance(model, guide)``
estimates it with any guide over the same sites (:mod:`ppl_tok.proposals`).

``num_particles`` particles advance in lock-step inside the plate
``"particles"``; finished particles are masked out of later sites, and the live
ones share one batched LM call per step (the LM's prefix cache computes
identical prefixes once, and the context's state once for all). ``mdd`` may also
be a list of MDDs with ``context`` a list of the same length: the plate then
holds ``num_particles`` particles for each (context, string) pair, particle ``i``
belonging to pair ``i // num_particles``, and all of them share each step's
forward (the batched engine of :mod:`ppl_tok.lm`).

Randomness: inside :func:`particle_seeds`, each pair draws its particles'
uniforms from its own generator, so a pair's samples do not depend on which
other pairs share the batch (what makes resumed and batched runs reproduce
one-at-a-time runs); outside it, Pyro's global RNG is used. With
``num_particles=1`` (the default) this is the plain sequential program that
stock ``Importance`` runs once per sample; the vectorized path of
:func:`ppl_tok.infer.importance.marginal` runs it once with ``num_particles=N``.
Both compute the same estimator.

Stock vectorized Pyro: when the model (or a guide) runs inside enclosing
vectorized plates, as ``pyro.infer.importance.vectorized_importance_weights``
and ``psis_diagnostic`` wrap it in ``pyro.plate("num_particles_vectorized", S,
dim=-(max_plate_nesting + 1))``, the walk holds ``S`` independent replicas of its
particles (:func:`outer_batch_shape`): every site then has batch shape
``outer_shape + (pairs * num_particles,)`` and the plate ``"particles"`` sits at
``dim=-1``, so Pyro's weight ``sum over sites of log p - log q`` over all dims but
the outer one is the product over the particles of one replica.

The model returns, and records at the deterministic site ``"tokenization"``,
each particle's tokens as a ``LongTensor`` of shape ``batch_shape + (width,)``
(``(width,)`` for a lone particle) padded with :data:`PAD` (``width`` = the
longest string's byte length, which bounds the number of tokens of any
particle), a value that Pyro's ``EmpiricalMarginal`` stacks and whose
``log_prob`` takes one tokenization back; :func:`unpad` turns it into tuples.

Sites: every run has the same ones, ``"tok_{t}"`` and ``"off_mdd_{t}"`` for
``t < width`` (masked once a particle has finished), so that tools which stack
traces (``pyro.infer.Predictive``) work. Under ``poutine.replay`` the model
checks the guide's sites against its own (:func:`tokenization_model`); under
``poutine.condition`` (``Predictive`` with a guide) it refuses a token site left
out of the data, under ``poutine.block`` a hidden token site, and it refuses an
observed site scored twice (the model alone conditioned, or a guide's observed
site left in ``log q``): each would weigh the run silently wrong.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence

import pyro
import torch
from pyro.infer.discrete import SamplePosteriorMessenger
from pyro.infer.tracegraph_elbo import TrackNonReparam
from pyro.poutine.util import site_is_subsample

from ppl_tok.distributions import NextToken
from ppl_tok.lm.base import LanguageModel, LMState
from ppl_tok.mdd import MDD

PLATE = "particles"
#: the deterministic site holding each particle's whole tokenization (padded with :data:`PAD`)
TOKENIZATION = "tokenization"
#: the padding id after a particle's last token
PAD = -1

#: the one-line refusal of parallel enumeration (TraceEnum_ELBO's model-side, infer_discrete)
PARALLEL_ENUMERATION = ("parallel enumeration of the tokenization model is impossible: each token's distribution "
                        "depends on the tokens before it (the LM reads them); enumerate sequentially with "
                        "ppl_tok.infer.enumeration.enumerate_tokenizations (pyro.infer.enum.iter_discrete_traces), "
                        "or enumerate a guide's sites with config_enumerate(guide, 'sequential') in TraceEnum_ELBO")

_SEEDS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("ppl_tok_particle_seeds", default=None)


@contextlib.contextmanager
def particle_seeds(seeds: Sequence[int] | None) -> Iterator[None]:
    """Within this block, the particles of pair ``g`` draw their randomness from a generator seeded ``seeds[g]``."""
    token = _SEEDS.set(None if seeds is None else [int(s) for s in seeds])
    try:
        yield
    finally:
        _SEEDS.reset(token)


def site(t: int) -> str:
    """The name of the sample site of the ``t``-th token."""
    return f"tok_{t}"


def outer_batch_shape() -> torch.Size:
    """The batch shape of the vectorized plates enclosing the current Pyro call (``()`` if none).

    A plate at ``dim=d`` (negative) sets entry ``d`` of the shape; the model's own
    plate needs ``dim=-1`` free, so an enclosing plate there is an error.
    """
    frames = [f for f in pyro.poutine.runtime.get_plates() if f.vectorized and f.dim is not None]
    if not frames:
        return torch.Size()
    if any(f.dim == -1 for f in frames):
        raise ValueError(f"an enclosing plate uses dim=-1, which the tokenization model's plate {PLATE!r} needs: "
                         "give the enclosing plate dim=-2 or lower (e.g. max_plate_nesting=1 in Pyro's helpers)")
    shape = [1] * (max(-f.dim for f in frames) - 1)
    for f in frames:
        shape[len(shape) + f.dim + 1] = f.size
    return torch.Size(shape)


def unpad(tokens: torch.Tensor) -> list[tuple[int, ...]]:
    """The model's padded return value as one tuple of token ids per particle (flattened batch)."""
    rows = tokens.reshape(-1, tokens.shape[-1]).tolist()
    return [tuple(t for t in row if t != PAD) for row in rows]


def as_pairs(mdd: MDD | Sequence[MDD], context: str | Sequence[int] | Sequence[str | Sequence[int]]
             ) -> tuple[list[MDD], list[str | Sequence[int]]]:
    """The model's ``(mdd, context)`` arguments as lists of pairs (one pair, or a batch)."""
    if isinstance(mdd, MDD):
        return [mdd], [context]
    mdds = list(mdd)
    contexts = [""] * len(mdds) if isinstance(context, str) and context == "" else list(context)
    if len(contexts) != len(mdds):
        raise ValueError(f"{len(mdds)} MDDs but {len(contexts)} contexts: give one context per string")
    return mdds, contexts


class ParticleWalk:
    """Particles walking down their MDDs together, with their LM states.

    ``nodes[i]`` is particle ``i``'s byte offset (``None`` once it left the MDD);
    ``active[i]`` says it is still walking; ``group[i]`` is its (context, string)
    pair. Model and guides each keep one.

    ``outer_shape`` (the enclosing vectorized plates, :func:`outer_batch_shape`)
    replicates the whole set: particle ``i`` is replica ``i // (pairs * num_particles)``,
    and :attr:`batch_shape` is ``outer_shape + (pairs * num_particles,)``.
    """

    def __init__(self, lm: LanguageModel, mdd: MDD | Sequence[MDD], context: str | Sequence = "",
                 num_particles: int = 1, outer_shape: Sequence[int] = ()):
        if num_particles < 1:
            raise ValueError(f"num_particles must be >= 1, got {num_particles}")
        self.lm = lm
        self.mdds, contexts = as_pairs(mdd, context)
        self.num_particles = num_particles
        self.outer_shape = torch.Size(outer_shape)
        self.replicas = self.outer_shape.numel()
        self.batch_shape = self.outer_shape + torch.Size([len(self.mdds) * num_particles])
        self.group = [g for _ in range(self.replicas) for g in range(len(self.mdds)) for _ in range(num_particles)]
        roots = lm.states([lm.prefix_ids(c) for c in contexts])
        self.states: list[LMState] = [roots[g] for g in self.group]
        self.nodes: list[int | None] = [self.mdds[g].source for g in self.group]
        self.active = torch.ones(len(self.group), dtype=torch.bool)
        self.tokens: list[list[int]] = [[] for _ in self.group]
        seeds = _SEEDS.get()
        if seeds is not None and len(seeds) != len(self.mdds):
            raise ValueError(f"{len(seeds)} particle seeds for {len(self.mdds)} (context, string) pairs")
        self._rngs = None if seeds is None else [torch.Generator().manual_seed(s) for s in seeds]
        self._edge_lps: list[torch.Tensor | None] | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def mdd(self) -> MDD:
        """The MDD (when the walk has one string)."""
        if len(self.mdds) != 1:
            raise ValueError("this walk spans several strings: use walk.mdd_of(i)")
        return self.mdds[0]

    def mdd_of(self, i: int) -> MDD:
        return self.mdds[self.group[i]]

    def any_active(self) -> bool:
        return bool(self.active.any())

    def out_tokens(self, i: int) -> dict[int, int]:
        """Particle ``i``'s allowed next tokens, each with the node it leads to."""
        node = self.nodes[i]
        return {} if node is None else self.mdd_of(i).out_tokens(node)

    def edge_log_probs(self, i: int) -> torch.Tensor:
        """The LM's log-probs of particle ``i``'s out-edges (in :meth:`out_tokens` order).

        Fetched for every active particle at once, one device gather per step.
        """
        if self._edge_lps is None:
            live = torch.nonzero(self.active).flatten().tolist()
            lps = self.lm.token_log_probs([self.states[j] for j in live], [list(self.out_tokens(j)) for j in live])
            self._edge_lps = [None] * len(self)
            for j, lp in zip(live, lps):
                self._edge_lps[j] = lp
        lp = self._edge_lps[i]
        return lp if lp is not None else self.lm.token_log_probs([self.states[i]], [list(self.out_tokens(i))])[0]

    def edge_log_prob_table(self, rows: Sequence[int], width: int) -> torch.Tensor:
        """:meth:`edge_log_probs` of the particles ``rows`` at once: ``[len(rows), width]`` float64, row ``r``
        padded with ``-inf`` after particle ``rows[r]``'s out-edges (the same numbers, one tensor)."""
        return self.lm.token_log_prob_table([self.states[i] for i in rows], [list(self.out_tokens(i)) for i in rows],
                                            width)

    @property
    def width(self) -> int:
        """The most tokens any particle can hold: the longest string's byte length (each token spans >= 1 byte)."""
        return max(max(m.sink - m.source for m in self.mdds), 1)

    def padded_tokens(self) -> torch.Tensor:
        """Every particle's tokens, ``batch_shape + (width,)``, padded with :data:`PAD`; a lone particle's
        (``batch_shape == (1,)``) have shape ``(width,)``, the value ``EmpiricalMarginal.log_prob`` takes."""
        width = self.width
        pad = [PAD] * width
        out = torch.tensor([toks + pad[len(toks):] for toks in self.tokens], dtype=torch.long).reshape(len(self), width)
        return out.reshape(-1) if self.batch_shape == (1,) else out.reshape(self.batch_shape + (self.width,))

    def uniforms(self) -> torch.Tensor:
        """One uniform per particle for this step (per-pair generators under :func:`particle_seeds`).

        Pair ``g``'s generator draws ``replicas * num_particles`` uniforms, laid out replica-major.
        """
        if self._rngs is None:
            return torch.rand(len(self), dtype=torch.float64)
        draws = [torch.rand(self.replicas * self.num_particles, generator=g, dtype=torch.float64)
                 .reshape(self.replicas, self.num_particles) for g in self._rngs]
        return torch.stack(draws, 1).reshape(-1)

    def advance(self, tokens: torch.Tensor, which: torch.Tensor | None = None) -> torch.Tensor:
        """Move the active particles (those also in the mask ``which``, if given) by ``tokens``;
        return which of them left the MDD."""
        tokens = torch.as_tensor(tokens).reshape(-1).tolist()  # read once: one Python list, not a tensor per particle
        off = torch.zeros(len(self), dtype=torch.bool)
        grow: list[int] = []
        left: list[int] = []  # particles that left the MDD
        done: list[int] = []  # particles that stop walking (left the MDD or reached its end)
        moving = self.active if which is None else self.active & which.reshape(-1)
        for i in torch.nonzero(moving).flatten().tolist():
            tok = int(tokens[i])
            self.tokens[i].append(tok)
            nxt = self.out_tokens(i).get(tok)
            self.nodes[i] = nxt
            if nxt is None:
                left.append(i)
                done.append(i)
            elif nxt == self.mdd_of(i).sink:
                done.append(i)
            else:
                grow.append(i)
        if left:
            off[left] = True
        if done:
            self.active[done] = False
        if grow:
            want = [list(self.out_tokens(i)) for i in grow]  # the next out-edges, gathered with the forward
            new = self.lm.extend([self.states[i] for i in grow], [self.tokens[i][-1] for i in grow], want)
            for i, state in zip(grow, new):
                self.states[i] = state
        self._edge_lps = None
        return off


def tokenization_model(lm: LanguageModel, mdd: MDD | Sequence[MDD], context: str | Sequence = "",
                       num_particles: int = 1) -> torch.Tensor:
    """Sample token sequences from the LM, constrained to the tokenizations in ``mdd``.

    Returns each particle's tokens, padded (:func:`unpad` gives tuples), also
    recorded at the site ``"tokenization"``; a particle whose sequence leaves
    the MDD has weight zero. The sites are the same in every run (see the module
    docstring): ``"tok_{t}"`` and ``"off_mdd_{t}"`` for ``t < width``.

    Run against a guide (``poutine.replay``: stock ``Importance``, ``SVI``,
    ``vectorized_importance_weights``), a guide that leaves a site unsampled
    where a particle is still walking, or samples a site the model does not
    have, is an error naming the sites; so is ``num_particles > 1`` outside
    :func:`per_particle_weights` (Pyro's weight of one run is the product over the
    plate, an estimate of ``p(x)^num_particles``).
    """
    if any(isinstance(f, TrackNonReparam) for f in pyro.poutine.runtime._PYRO_STACK):
        raise ValueError("TraceGraph_ELBO cannot train a guide of the tokenization model: its provenance tracking "
                         "loses each drawn token where the LM reads it as an id, so a choice's cost leaves out log p "
                         "and the loss drifts up; use Trace_ELBO or ReweightedWakeSleep")
    if any(isinstance(f, SamplePosteriorMessenger) for f in pyro.poutine.runtime._PYRO_STACK):
        raise ValueError("infer_discrete cannot decode the tokenization model: it needs parallel enumeration, and "
                         "each token's distribution depends on the tokens before it; use "
                         "ppl_tok.infer.enumeration.enumerate_tokenizations (Pyro's sequential enumeration) or "
                         "ppl_tok.infer.search.most_likely")
    walk = ParticleWalk(lm, mdd, context, num_particles, outer_batch_shape())
    replayed = _replayed_trace()
    if replayed is not None and num_particles > 1 and not _PER_PARTICLE.get():
        raise ValueError(f"num_particles={num_particles} under stock Pyro inference (Importance.run, SVI, "
                         "vectorized_importance_weights): Pyro weighs a run by the product over the plate "
                         f"{PLATE!r}, which estimates p(x)^{num_particles}, not p(x). Use "
                         f"Importance(..., num_samples={num_particles}) with num_particles=1, or "
                         f"ppl_tok.infer.importance.marginal(text, lm, {num_particles}, guide=...) (one batched run)")
    particles = pyro.plate(PLATE, walk.batch_shape[-1], dim=-1)
    with particles:
        for t in range(walk.width):
            active = walk.active.clone().reshape(walk.batch_shape)
            if bool(active.any()):
                _check_site(site(t), int(active.sum()), replayed, walk.width)
            with pyro.poutine.mask(mask=active):
                tok = pyro.sample(site(t), NextToken(walk))
            if tok.dim() > len(walk.batch_shape):  # Pyro's parallel enumeration put the site's support on a new dim
                raise ValueError(PARALLEL_ENUMERATION)
            off = walk.advance(tok)
            pyro.factor(f"off_mdd_{t}", torch.where(off, -math.inf, 0.0).double().reshape(walk.batch_shape))
    if replayed is not None:
        extra = _unknown_sites(replayed, walk.width)
        if extra:
            raise ValueError(f"the guide sampled site(s) {', '.join(map(repr, extra))} that the tokenization model "
                             f"does not have (its sites are 'tok_0' ... 'tok_{walk.width - 1}', ppl_tok.model.site(t)): "
                             "rename them, or mark auxiliary ones infer={'is_auxiliary': True}")
    tokens = walk.padded_tokens()
    if tokens.dim() == 1:  # one particle: its tokenization alone, outside the plate
        return _record(tokens)
    with particles:
        return _record(tokens)


def _record(tokens: torch.Tensor) -> torch.Tensor:
    """``pyro.deterministic(TOKENIZATION, tokens, event_dim=1)`` with a float64 log-prob (0), like every other
    site: Pyro's own gives float32, which ``TraceEnum_ELBO`` cannot contract with the float64 sites."""
    zero = torch.zeros(tokens.shape[:-1], dtype=torch.float64)
    return pyro.sample(TOKENIZATION, pyro.distributions.Delta(tokens, log_density=zero, event_dim=1), obs=tokens,
                       infer={"_deterministic": True})


_PER_PARTICLE: contextvars.ContextVar[bool] = contextvars.ContextVar("ppl_tok_per_particle", default=False)


@contextlib.contextmanager
def per_particle_weights() -> Iterator[None]:
    """Within this block the caller reads each particle's weight separately (as
    :func:`ppl_tok.infer.importance.marginal` does), so the model runs ``num_particles > 1`` under replay."""
    token = _PER_PARTICLE.set(True)
    try:
        yield
    finally:
        _PER_PARTICLE.reset(token)


def _replayed_trace() -> pyro.poutine.Trace | None:
    """The guide trace the current call replays (the innermost ``poutine.replay``), if any.

    None under ``poutine.queue`` (an ``escape`` on the stack): Pyro's sequential enumeration
    (``iter_discrete_traces``) replays its own partial traces, not a guide's."""
    if any(isinstance(f, pyro.poutine.escape_messenger.EscapeMessenger) for f in pyro.poutine.runtime._PYRO_STACK):
        return None
    for frame in reversed(pyro.poutine.runtime._PYRO_STACK):
        if isinstance(frame, pyro.poutine.replay_messenger.ReplayMessenger) and frame.trace is not None:
            return frame.trace
    return None


def conditioned(name: str) -> bool:
    """Whether an enclosing ``poutine.condition`` observes the site ``name`` (its data holds it)."""
    return any(name in _condition_data(frame) for frame in pyro.poutine.runtime._PYRO_STACK)


def _condition_data(frame) -> Sequence[str]:
    if not isinstance(frame, pyro.poutine.condition_messenger.ConditionMessenger):
        return ()
    data = frame.data
    return list(data.nodes) if isinstance(data, pyro.poutine.Trace) else list(data)


def _hidden(name: str) -> bool:
    """Whether an enclosing ``poutine.block`` hides the latent site ``name`` by name (not every site: Pyro's
    own ``block()`` around a whole run, as in ``Predictive``, hides everything and is no error)."""
    def hides(frame, probe: str) -> bool:
        msg = {"type": "sample", "name": probe, "is_observed": False, "infer": {}, "fn": None, "value": None}
        try:
            return bool(frame.hide_fn(msg))
        except (KeyError, TypeError, AttributeError):  # a user hide_fn reading other fields: no verdict
            return False
    return any(isinstance(f, pyro.poutine.block_messenger.BlockMessenger) and hides(f, name)
               and not hides(f, "__ppl_tok_probe__") for f in pyro.poutine.runtime._PYRO_STACK)


def _check_site(name: str, walking: int, replayed: pyro.poutine.Trace | None, width: int) -> None:
    """Refuse, in one line naming the fix, each way stock Pyro would weigh the site ``name`` silently wrong."""
    if _hidden(name):
        raise ValueError(f"poutine.block hides the model's site {name!r}: its token would be drawn from the LM and "
                         "its probability left out of the weight; block nothing of tokenization_model (condition "
                         "it, or mask a site with poutine.mask, instead)")
    if replayed is None:
        observed = {n for f in pyro.poutine.runtime._PYRO_STACK for n in _condition_data(f) if n.startswith("tok_")}
        if observed and name not in observed:
            raise ValueError(f"the model is conditioned on {len(observed)} token site(s) but not on {name!r}, where "
                             f"{walking} particle(s) are still walking: the LM prior would fill it silently (a "
                             "guide in Predictive that stops emitting sites does this); use a guide that samples "
                             "every 'tok_{t}' (ppl_tok.proposals.mdd_guide does), or condition on whole tokenizations")
        return
    if name not in replayed.nodes:
        if any(isinstance(f, pyro.poutine.enum_messenger.EnumMessenger) for f in pyro.poutine.runtime._PYRO_STACK):
            raise ValueError(PARALLEL_ENUMERATION)  # TraceEnum_ELBO left the site to the model's enumeration
        raise ValueError(_unsampled_message(name, walking, replayed, width))
    node = replayed.nodes[name]
    if conditioned(name) and not node["is_observed"]:
        raise ValueError(f"the model's site {name!r} is observed (poutine.condition) but the guide samples it: the "
                         "guide's draw would be scored against another token; condition the guide on the same data")
    mask = node.get("mask")
    if node["is_observed"] and not (mask is False or (torch.is_tensor(mask) and not bool(mask.any()))):
        raise ValueError(f"the guide's site {name!r} is observed (poutine.condition on the guide) and unmasked: its "
                         "log q would enter the weight; wrap that site in poutine.mask(mask=False) (mdd_guide does)")


def _unknown_sites(trace: pyro.poutine.Trace, width: int) -> list[str]:
    """The latent, non-auxiliary sample sites of a guide trace that the model does not have."""
    known = {site(t) for t in range(width)}
    return [name for name, node in trace.nodes.items()
            if node["type"] == "sample" and not node["is_observed"] and name not in known
            and not node["infer"].get("is_auxiliary") and not site_is_subsample(node)]


def _unsampled_message(name: str, walking: int, trace: pyro.poutine.Trace, width: int) -> str:
    extra = _unknown_sites(trace, width)
    also = f"; it sampled {', '.join(map(repr, extra[:5]))}{' ...' if len(extra) > 5 else ''}, which the model " \
           "does not have" if extra else ""
    return (f"the guide did not sample the model's site {name!r}, where {walking} particle(s) are still walking "
            f"down the MDD{also}: a guide must sample 'tok_{{t}}' (ppl_tok.model.site(t)) for every token of "
            "every particle, or the model's prior fills the site silently")
