"""Training a proposal with stock Pyro: reweighted wake-sleep over a word list.

The proposal is :class:`ppl_tok.proposals.LearnedProposal` (log-linear over edge
features, weights ``w``). Each step takes one training string ``x`` (in a
seeded shuffled order) and runs one step of ``pyro.infer.SVI`` with
``pyro.infer.ReweightedWakeSleep`` (Le, Kosiorek, Siddharth, Teh & Wood, 2019),
wake-phi only (``insomnia=1``): with ``K`` draws ``v_k ~ q_w`` and
self-normalised weights ``pi_k ∝ p(x, v_k) / q_w(v_k)``, the gradient

    grad_w  sum_k pi_k log q_w(v_k)

estimates ``-grad_w KL(p(. | x) || q_w)``, the mass-covering direction: it
pulls ``q`` towards every tokenization that carries posterior mass, which is
what an importance proposal needs (the ELBO's ``KL(q || p)`` may instead
settle on the canonical tokenization alone). Sleep-phi (``insomnia < 1``) would
draw from the LM prior, whose draws almost never spell ``x``.

Training fits the learned step ``q_w`` alone (the floored log-linear step of
:class:`~ppl_tok.proposals.LearnedProposal`, its defensive share ``a`` set to 0
while :attr:`~ppl_tok.proposals.LearnedProposal.training`); the look-ahead is mixed
in only when the proposal samples. Any weights it writes are a proposal that
stays positive in float64 (each step at least ``eps / K``) and, mixed, never more
than ``1 / a`` times worse in its weights than the look-ahead: a large learning rate
(``lr=20``: weights near +-77 on the toy LM) gives a poor ``q_w``, never a
collapsed estimator.

Training is resumable: after every ``save_every`` steps the weights, the step
and Adam's state go to the file; a call with a file that exists continues from
its step, and step ``s`` draws with seed ``(seed, s)``, so an interrupted run
continued equals one that was not interrupted. The file also records the run's
settings (:func:`training_settings`: the LM's name, the SHA-256 of its
vocabulary and of the word list, the learning rate, the seed and the particles),
and a resume under others is refused naming each that differs
(:func:`check_resume`): its weights would otherwise be recorded as trained so.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyro
from pyro.infer import SVI, ReweightedWakeSleep
from tqdm import tqdm

from ppl_tok.proposals import LearnedProposal
from ppl_tok.lm.base import LanguageModel
from ppl_tok.mdd import compile_mdd
from ppl_tok.model import tokenization_model


def vocabulary_sha256(lm: LanguageModel) -> str:
    """SHA-256 of the LM's vocabulary: each id's bytes in hex, one a line (a special token: ``-``)."""
    return hashlib.sha256("\n".join("-" if s is None else s.hex() for s in lm.vocab.surfaces).encode()).hexdigest()


def texts_sha256(texts: Sequence[str]) -> str:
    """SHA-256 of a word list, one text a line (as read: the order counts, it is the training order's seed)."""
    return hashlib.sha256("\n".join(texts).encode("utf-8", "surrogatepass")).hexdigest()


def training_settings(texts: Sequence[str], model: str, particles: int, lr: float, seed: int,
                      vocabulary: str | None = None) -> dict[str, Any]:
    """What a training run's weights depend on, recorded in its file and compared on resume (``vocabulary``:
    :func:`vocabulary_sha256`, ``None`` before the LM is loaded, when it is not compared)."""
    return {"model": model, "vocabulary_sha256": vocabulary, "texts_sha256": texts_sha256(texts),
            "texts": len(texts), "particles": particles, "lr": lr, "seed": seed}


def check_resume(proposal: LearnedProposal, settings: dict[str, Any], path: str | Path) -> None:
    """A ``ValueError`` naming each setting of ``settings`` that differs from those ``proposal`` (loaded from
    ``path``) was trained with; a file trained before they were recorded resumes under none."""
    if proposal.step == 0:
        return
    old = proposal.meta.get("settings")
    if not isinstance(old, dict):
        raise ValueError(f"{path} holds {proposal.step} training steps but not the settings they were trained with "
                         "(a file of an older ppl-tok), so it cannot be resumed under this run's; give another --out "
                         "file")
    flags = {"model": "--model", "particles": "--particles", "lr": "--lr", "seed": "--seed"}
    diff = [f"{k}: file has {old.get(k)!r}, this run has {v!r}" + (f" ({flags[k]} {old.get(k)} resumes it)"
                                                                   if k in flags else "")
            for k, v in settings.items() if v is not None and old.get(k) != v]
    if diff:
        raise ValueError(f"{path} was trained under other settings; give another --out file or the same settings. "
                         "Differences: " + "; ".join(diff))


def train_proposal(texts: Sequence[str], lm: LanguageModel, steps: int = 20, *, particles: int = 16,
                   lr: float = 0.1, seed: int = 0, path: str | Path | None = None, save_every: int = 1,
                   proposal: LearnedProposal | None = None, progress: bool | None = None,
                   on_step: Callable[[int, float], None] | None = None) -> LearnedProposal:
    """Train a :class:`~ppl_tok.proposals.LearnedProposal` for ``lm`` on ``texts`` for ``steps`` steps in all.

    :param particles: ``K``, the draws per step (vectorized, one batched walk).
    :param path: the file to save to; if it exists, training resumes from the step it holds.
    :param proposal: where to start (default: the look-ahead's weights), when ``path`` holds nothing.
    :param progress: a tqdm bar (``None``: only on a terminal).
    :param on_step: called with ``(step, wake-phi loss)`` after each step.
    """
    texts = [t for t in texts]
    if not texts or any(not isinstance(t, str) or not t for t in texts):
        raise ValueError("train_proposal needs a non-empty list of non-empty strings (one training text a line)")
    if steps < 0 or particles < 2:
        raise ValueError(f"steps must be >= 0 and particles >= 2 (reweighting needs two), got {steps}, {particles}")
    settings = training_settings(texts, getattr(lm, "name", type(lm).__name__), particles, lr, seed,
                                 vocabulary_sha256(lm))
    if path is not None and Path(path).exists():
        proposal = LearnedProposal.load(path)
        check_resume(proposal, settings, path)
    proposal = proposal or LearnedProposal()
    mdds = [compile_mdd(t, lm.vocab) for t in texts]
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    store = pyro.get_param_store()
    store.clear()
    proposal.training = True
    optimizer = pyro.optim.Adam({"lr": lr})
    if proposal.optimizer_state:  # resumed: Adam's moments, consumed when the parameter's optimiser is made
        optimizer.set_state(proposal.optimizer_state)
    loss_fn = ReweightedWakeSleep(num_particles=particles, insomnia=1.0, model_has_params=False,
                                  vectorize_particles=True, max_plate_nesting=1)
    svi = SVI(tokenization_model, proposal.guide, optimizer, loss_fn)
    try:
        with tqdm(total=steps, initial=min(proposal.step, steps), desc="training the proposal", unit="step",
                  disable=progress is False if progress is not None else None) as bar:
            while proposal.step < steps:
                pyro.set_rng_seed(seed * 1_000_003 + proposal.step)
                k = order[proposal.step % len(order)]
                theta_loss, phi_loss = svi.step(lm, mdds[k])  # -log p_hat(x), the wake-phi loss
                loss = float(phi_loss)
                proposal.weights = pyro.param(proposal.name).detach().clone()
                proposal.step += 1
                bar.update(1)
                bar.set_postfix(log_p=f"{-float(theta_loss):.3f}", text=texts[k][:20])
                if on_step is not None:
                    on_step(proposal.step, loss)
                if path is not None and (proposal.step % save_every == 0 or proposal.step == steps):
                    proposal.optimizer_state = optimizer.get_state()
                    proposal.meta.update({"lm": getattr(lm, "name", type(lm).__name__), "particles": particles,
                                          "lr": lr, "seed": seed, "texts": len(texts), "settings": settings})
                    proposal.save(path)
    finally:
        proposal.training = False
    return proposal
