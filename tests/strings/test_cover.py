"""The vocabulary in byte order (strings/cover.py): a prefix's run masses, read once per LM state and run."""

import math

import torch

from ppl_tok.strings.beam import Hypothesis
from ppl_tok.strings.cover import _RUN_MASSES, Cover, run_log_masses
from ppl_tok.lm.base import LMState


def _cover(state, a, vals):
    return Cover(Hypothesis(0.0, state=state), a, vals, -math.inf)


def test_run_masses_equal_each_runs_log_sum_exp_and_are_kept_per_state_and_run():
    g = torch.Generator().manual_seed(0)
    states = [LMState((0, i)) for i in range(4)]
    runs = [torch.randn(n, generator=g) * 30 for n in (1, 7, 1000, 5)]
    runs[3][:] = -math.inf  # a run with no mass
    runs[2][::3] = -math.inf
    covers = [_cover(s, 3 * i, v) for i, (s, v) in enumerate(zip(states, runs))]
    got = run_log_masses(covers)
    for m, v in zip(got, runs):
        want = float(torch.logsumexp(v.double(), 0))
        assert m == want, (m, want)  # the same sum
    assert got[3] == -math.inf
    assert all((c.a, c._b) in _RUN_MASSES[s] for c, s in zip(covers, states))
    # a second reader of the same state and run gets the kept mass, whatever values it holds; another run is summed
    again = run_log_masses([_cover(states[1], 3, torch.zeros(7)), _cover(states[1], 3, torch.zeros(6))])
    assert again[0] == got[1] and again[1] == float(torch.logsumexp(torch.zeros(6, dtype=torch.float64), 0))
    # no state (a forgotten prefix): summed, not kept
    assert run_log_masses([_cover(None, 0, torch.zeros(2))]) == [math.log(2)]
