"""Sequential Monte Carlo with resampling for the marginal string probability.

Beyond the paper (Geh et al., 2024, Sec. 5 uses plain importance sampling with
the 1-step look-ahead proposal): resampling is the usual cure for a myopic
proposal (Del Moral, 2004; Doucet & Johansen, 2009), since particles whose
prefix has become improbable are dropped early and the survivors are copied.

**Targets, aligned by byte position.** The MDD's nodes are byte offsets
``0 = b_0 < ... < n``. Stage ``b`` targets the token prefixes ``v_{1:k}`` that
have just crossed byte ``b`` (the last token ends after ``b``, the one before it
at or before ``b``), with unnormalised density ``gamma_b(v_{1:k}) = p(v_{1:k} | c)``.
At each round a pair's particles sitting furthest behind (at the smallest node
``b``) take one step with the look-ahead proposal
``q(v | v_<) = p(v | v_<) 1[v is an out-edge] / Z``, whose incremental weight is
``gamma_b / (gamma_{b-} q) = Z = sum_{v in out(b)} p(v | v_<)``; the others wait
(weight 1). After the round every particle of the pair has crossed byte ``b``,
so resampling compares particles at the same byte position of the string, each
at most one token past it. ``gamma_n`` is ``p(v | c)`` on the complete
tokenizations, so ``Z_n = p(x | c)``.

**Estimator.** Adaptive multinomial resampling when the pair's ESS falls below
``ess_threshold * N``; with ``W`` the log-weights since the last resampling,

    log p_hat(x) = sum over resampling times of log mean_i exp(W_i)  +  log mean_i exp(W_i) at the end,

the standard SMC estimate of the normalising constant, unbiased for ``p(x | c)``
(Del Moral, 2004, Thm. 7.4.2; Whiteley, Lee & Heine, 2016, for adaptive
resampling). A zero-probability out-edge set (``Z = 0``) gives weight zero.

**Uncertainty.** The standard error on the log scale is Lee & Whiteley's (2018,
"Variance estimation in the particle filter", Biometrika) estimate from one run,
with ``E_i`` the index of particle ``i``'s ancestor before the first step,
``pi`` the final normalised weights and ``R`` the number of resamplings:

    var_hat(p_hat) / p_hat^2 = 1 - (N / (N - 1))^(R + 1) (1 - sum_e (sum_{i: E_i = e} pi_i)^2),

which is the importance-sampling delta-method formula of :mod:`ppl_tok.infer.diagnostics`
when ``R = 0``. It runs on the batched engine: many (context, string) pairs in
one :class:`~ppl_tok.model.ParticleWalk`, one LM call per round for all of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch

from ppl_tok.limits import check_contexts, check_texts
from ppl_tok.common.sampling import inverse_cdf
from ppl_tok.infer import diagnostics
from ppl_tok.infer.importance import MarginalResult, _result
from ppl_tok.lm.base import LanguageModel
from ppl_tok.mdd import MDD, compile_mdd
from ppl_tok.model import ParticleWalk, particle_seeds
from ppl_tok.proposals import StepLogits, lookahead

#: a particle's stand-in node once it has stopped (reached the sink or got weight zero)
_DONE = math.inf


def _resampling_generator(seed: int) -> torch.Generator:
    """The generator of a pair's resampling draws (distinct from its proposal uniforms)."""
    return torch.Generator().manual_seed((int(seed) * 6364136223846793005 + 1442695040888963407) % (1 << 63))


def smc_relative_variance(log_w: torch.Tensor, eve: torch.Tensor, resamplings: int) -> float:
    """Lee & Whiteley's (2018) estimate of ``var(p_hat) / p_hat^2`` (see the module docstring; ``inf``: unknown)."""
    n = log_w.numel()
    pi = diagnostics.normalized_weights(log_w)
    if n < 2 or float(pi.sum()) == 0.0:
        return math.inf
    by_eve = torch.zeros(n, dtype=torch.float64).index_add_(0, eve, pi)
    value = 1.0 - (n / (n - 1)) ** (resamplings + 1) * (1.0 - float((by_eve * by_eve).sum()))
    return max(value, 0.0)


def _move_hindmost(walk: ParticleWalk, lm: LanguageModel, n: int, pairs: int, log_w: torch.Tensor,
                   log_p: torch.Tensor, proposal: StepLogits | None = None) -> None:
    """One step: in each of the ``pairs`` groups of ``n`` particles, the active ones at the group's hindmost
    node draw a token from the look-ahead proposal (or ``proposal``'s logits over the out-edges).

    A mover's weight gains ``p(t) / q(t)`` for the token ``t`` drawn (inverse CDF at this step's uniform): the
    allowed mass ``sum p(t)`` over its out-tokens for the look-ahead; its path gains ``log p(t)``. A mover whose
    allowed mass is zero gets weight zero and stops.
    """
    u = walk.uniforms()
    node = [walk.nodes[i] if walk.active[i] else _DONE for i in range(len(walk))]
    behind = [min(node[g * n:(g + 1) * n]) for g in range(pairs)]
    movers = [i for i in range(len(walk)) if node[i] != _DONE and node[i] == behind[walk.group[i]]]
    outs = [list(walk.out_tokens(i)) for i in movers]
    lps = lm.token_log_probs([walk.states[i] for i in movers], outs)
    tokens = torch.zeros(len(walk), dtype=torch.long)
    which = torch.zeros(len(walk), dtype=torch.bool)
    for i, out, lp in zip(movers, outs, lps):
        lp = lp.double().cpu()
        mass = float(torch.logsumexp(lp, 0))
        if mass == -math.inf:  # every allowed token has probability zero: weight zero, stop
            log_w[i] = -math.inf
            walk.active[i] = False
            continue
        log_q = lp - mass
        if proposal is not None:
            logits = proposal(walk, i, walk.out_tokens(i)).detach().to("cpu", torch.float64).reshape(-1)
            logits = logits if bool((logits > -math.inf).any()) else torch.zeros_like(logits)
            log_q = logits - torch.logsumexp(logits, 0)
        k = int(inverse_cdf(log_q.exp().cumsum(0)[None], u[i].reshape(1, 1)))
        tokens[i], which[i] = out[k], True
        log_w[i] += mass if proposal is None else float(lp[k] - log_q[k])
        log_p[i] += float(lp[k])
    walk.advance(tokens, which)


def smc_marginals(texts: Sequence[str], lm: LanguageModel, num_particles: int = 64, *,
                  contexts: Sequence[str | Sequence[int]] | None = None, seeds: Sequence[int] | None = None,
                  ess_threshold: float = 0.5, mdds: Sequence[MDD] | None = None,
                  guide: Callable | None = None) -> list[MarginalResult]:
    """Estimate ``log p(texts[i] | contexts[i])`` by SMC with ``num_particles`` particles per pair.

    ``results[i].log_weights`` are the final weights scaled so that their log-mean-exp
    is the estimate; ``results[i].log_se`` is Lee & Whiteley's standard error.
    :param ess_threshold: resample a pair when its ESS falls below this fraction of
        ``num_particles`` (0: never, plain look-ahead IS; 1: at every byte position).
    :param guide: the proposal of each step, a guide built by :func:`ppl_tok.proposals.mdd_guide` (its
        ``.proposal`` over out-edges: ``uniform_guide``, a ``LearnedProposal``'s ``.guide``, your own); the
        incremental weight is then ``p(t) / q(t)``, and the estimate stays unbiased. Default: the look-ahead.
    """
    texts = check_texts("texts", texts)
    proposal = _step_proposal(guide)
    texts = list(texts)
    contexts = [""] * len(texts) if contexts is None else check_contexts("contexts", contexts)
    seeds = list(range(len(texts))) if seeds is None else [int(s) for s in seeds]
    if not len(contexts) == len(seeds) == len(texts):
        raise ValueError(f"{len(texts)} texts, {len(contexts)} contexts and {len(seeds)} seeds: one each")
    if num_particles < 1:
        raise ValueError(f"num_particles must be >= 1, got {num_particles}")
    if not 0.0 <= ess_threshold <= 1.0:
        raise ValueError(f"ess_threshold must be in [0, 1], got {ess_threshold}")
    if not texts:
        return []
    start, forwards0 = time.perf_counter(), lm.stats.forwards
    mdds = [compile_mdd(t, lm.vocab) for t in texts] if mdds is None else list(mdds)
    canonicals = [tuple(lm.canonical(t)) for t in texts]
    canonical_lps = lm.log_probs_many(canonicals, contexts)
    n, pairs = num_particles, len(texts)
    with particle_seeds(seeds):
        walk = ParticleWalk(lm, mdds, contexts, n)
    rngs = [_resampling_generator(s) for s in seeds]
    log_w = torch.zeros(len(walk), dtype=torch.float64)  # since the last resampling
    log_p = torch.zeros(len(walk), dtype=torch.float64)  # of each particle's path
    log_z = [0.0] * pairs  # accumulated over resamplings
    eve = torch.arange(len(walk))
    resamplings = [0] * pairs
    while walk.any_active():
        _move_hindmost(walk, lm, n, pairs, log_w, log_p, proposal)
        for g in range(pairs):
            part = slice(g * n, (g + 1) * n)
            if not walk.active[part].any():
                continue
            if not torch.isfinite(log_w[part]).any():  # every particle has weight zero: so is the estimate
                log_z[g] = -math.inf
                walk.active[part] = False
            elif diagnostics.ess(log_w[part]) < ess_threshold * n:
                log_z[g] += diagnostics.log_mean_exp(log_w[part])
                pi = diagnostics.normalized_weights(log_w[part])
                picks = (g * n + torch.multinomial(pi, n, replacement=True, generator=rngs[g])).tolist()
                _copy_particles(walk, range(g * n, (g + 1) * n), picks)
                log_p[part] = log_p[picks].clone()
                eve[part] = eve[picks].clone()
                log_w[part] = 0.0
                resamplings[g] += 1
    forwards, seconds = lm.stats.forwards - forwards0, time.perf_counter() - start
    out = []
    for g, text in enumerate(texts):
        part = slice(g * n, (g + 1) * n)
        final = log_w[part] + log_z[g]
        rel_var = smc_relative_variance(log_w[part], eve[part] - g * n, resamplings[g])
        samples = [tuple(t) for t in walk.tokens[part]]
        out.append(_result(text, "smc", log_p[part].clone(), log_p[part] - final, samples, canonicals[g],
                           canonical_lps[g], None, forwards, seconds, log_se=math.sqrt(rel_var)))
    return out


def _copy_particles(walk: ParticleWalk, slots: Sequence[int], sources: Sequence[int]) -> None:
    """Particle ``slots[j]`` becomes a copy of particle ``sources[j]`` (LM states are shared, not recomputed)."""
    states = [walk.states[i] for i in sources]
    nodes = [walk.nodes[i] for i in sources]
    tokens = [list(walk.tokens[i]) for i in sources]
    active = walk.active[list(sources)].clone()
    for j, slot in enumerate(slots):
        walk.states[slot], walk.nodes[slot], walk.tokens[slot] = states[j], nodes[j], tokens[j]
    walk.active[list(slots)] = active
    walk._edge_lps = None


def _step_proposal(guide: Callable | None) -> StepLogits | None:
    """The proposal over out-edges that ``guide`` steps with (``None``: the look-ahead, computed inline)."""
    if guide is None or getattr(guide, "proposal", None) is lookahead:
        return None
    proposal = getattr(guide, "proposal", None)
    if not callable(proposal):
        raise ValueError(f"SMC draws each token from a proposal over the MDD's out-edges: give a guide built by "
                         f"ppl_tok.proposals.mdd_guide (it carries .proposal), not {getattr(guide, '__name__', guide)!r}")
    return proposal


def smc_marginal(text: str, lm: LanguageModel, num_particles: int = 64, *, context: str | Sequence[int] = "",
                 seed: int = 0, ess_threshold: float = 0.5, mdd: MDD | None = None,
                 guide: Callable | None = None) -> MarginalResult:
    """:func:`smc_marginals` for one string (``guide``: the step proposal, see there)."""
    return smc_marginals([text], lm, num_particles, contexts=[context], seeds=[seed], ess_threshold=ess_threshold,
                         mdds=None if mdd is None else [mdd], guide=guide)[0]
