"""Inverse-CDF draws (ppl_tok.common.sampling): k = min{k : cdf[k] > u * cdf[-1]}."""

import torch

from ppl_tok.common.sampling import inverse_cdf


def test_the_first_index_whose_cumulative_weight_exceeds_u_times_the_total():
    cdf = torch.tensor([[1.0, 3.0, 4.0]])  # unnormalised weights 1, 2, 1
    u = torch.tensor([[0.0, 0.2, 0.25, 0.5, 0.74, 0.75, 0.99]])
    assert inverse_cdf(cdf, u).tolist() == [[0, 0, 1, 1, 1, 2, 2]]  # at u * 4 == 1 exactly: index 1 (strictly >)


def test_rows_apart_zero_weights_skipped_and_u_of_one_clamped():
    cdf = torch.tensor([[0.0, 0.0, 2.0], [1.0, 1.0, 1.0]])  # row 0: all mass on 2; row 1: all on 0
    u = torch.tensor([[0.0, 0.5], [0.3, 0.999]])
    assert inverse_cdf(cdf, u).tolist() == [[2, 2], [0, 0]]
    assert inverse_cdf(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0]])).tolist() == [[1]]  # not past K - 1
