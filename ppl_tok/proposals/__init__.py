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

from ppl_tok.proposals.guides import (StepLogits, StratifiedGuide, lookahead, lookahead_guide, mdd_guide, uniform,
                                      uniform_guide)
from ppl_tok.proposals.learned import (DEFENSIVE, FEATURES, FLOOR, FORMAT, LOOKAHEAD_WEIGHTS, LearnedProposal,
                                       edge_features, floored_log_softmax)
from ppl_tok.proposals.registry import (DEFAULT_PROPOSAL, PROPOSALS, NoParams, Proposal, check_file, named_guide, proposal, proposal_settings,
                                        register_proposal, resolve_proposal, settings_guide, unregister_proposal)

__all__ = ["StepLogits", "StratifiedGuide", "lookahead", "lookahead_guide", "mdd_guide", "uniform", "uniform_guide",
           "DEFENSIVE", "FEATURES", "FLOOR", "FORMAT", "LOOKAHEAD_WEIGHTS", "LearnedProposal", "edge_features",
           "floored_log_softmax", "DEFAULT_PROPOSAL", "PROPOSALS", "NoParams", "Proposal", "check_file", "named_guide", "proposal", "proposal_settings",
           "register_proposal", "resolve_proposal", "settings_guide", "unregister_proposal"]
