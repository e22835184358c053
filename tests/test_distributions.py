"""The sample sites' distributions (ppl_tok.distributions) follow Pyro's shape semantics."""

import pyro
import pytest
import torch

from ppl_tok.distributions import OverCandidates
from ppl_tok.model import tokenization_model
from toys import LM, MDD_


def test_distributions_follow_pyro_shapes():
    d = OverCandidates.from_lists([[1, 2], [3]], [torch.zeros(2), torch.zeros(1)], batch_shape=(2,))
    e = d.expand((1, 2))
    assert e.batch_shape == (1, 2) and e.sample().shape == (1, 2) and e.log_prob(e.sample()).shape == (1, 2)
    with pytest.raises(ValueError, match="cannot expand"):
        d.expand((4, 2))
    with pytest.raises(ValueError, match="does not hold"):
        OverCandidates.from_lists([[1]], [torch.zeros(1)], batch_shape=(3,))
    with pytest.raises(ValueError, match="dim=-1"), pyro.plate("outer", 4, dim=-1):
        tokenization_model(LM, MDD_)
