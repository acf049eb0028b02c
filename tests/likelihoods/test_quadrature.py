"""The one Gauss-Hermite rule (``likelihoods.quadrature``) against the closed-form moments of a
standard normal: E[z^k] = (k - 1)!! for even k, 0 for odd k; the n-point rule is exact for k < 2n."""
from __future__ import annotations

import math

import pytest
import torch

from likelihoods.quadrature import gauss_hermite, gauss_hermite_grid


def _normal_moment(k: int) -> float:
    return 0.0 if k % 2 else float(math.prod(range(k - 1, 0, -2)))


@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_rule_is_exact_for_polynomials_below_degree_2n(n):
    x, w = gauss_hermite(n, torch.zeros((), dtype=torch.float64))
    assert x.shape == w.shape == (n,) and x.dtype == w.dtype == torch.float64
    assert abs(w.sum().item() - 1.0) < 1e-14
    for k in range(2 * n):
        # rounding is relative to the size of the terms summed (odd k cancels large terms to 0)
        ref, size = _normal_moment(k), (w * x.abs() ** k).sum().item()
        assert abs((w * x ** k).sum().item() - ref) <= 1e-12 * size, (n, k)
    # degree 2n is the first the rule gets wrong (it must, or the test above proves nothing)
    assert abs((w * x ** (2 * n)).sum().item() - _normal_moment(2 * n)) > 1e-3


def test_product_grid_matches_product_moments_and_follows_dtype():
    n, Q = 4, 3
    nodes, weights = gauss_hermite_grid(n, Q, torch.zeros(2, dtype=torch.float32))
    assert nodes.shape == (n ** Q, Q) and weights.shape == (n ** Q,)
    assert nodes.dtype == weights.dtype == torch.float32
    nodes, weights = gauss_hermite_grid(n, Q, torch.zeros(2, dtype=torch.float64))
    for powers in [(0, 0, 0), (2, 0, 0), (2, 4, 0), (1, 2, 2), (6, 2, 4), (7, 7, 7)]:
        ref = math.prod(_normal_moment(k) for k in powers)
        terms = weights * torch.prod(nodes ** torch.tensor(powers, dtype=nodes.dtype), dim=-1)
        assert abs(terms.sum().item() - ref) <= 1e-12 * terms.abs().sum().item(), (powers, terms.sum(), ref)
    # last coordinate varies fastest; the one-dimensional rule is the grid's marginal
    x, w = gauss_hermite(n, nodes)
    assert torch.equal(nodes[:n, -1], x) and torch.equal(nodes[:n, 0], x[0].expand(n))


@pytest.mark.parametrize("bad", [0, -2, 2.5])
def test_bad_sizes_are_refused_with_the_argument_named(bad):
    with pytest.raises(ValueError, match="num_points"):
        gauss_hermite(bad, torch.zeros(1))
    with pytest.raises(ValueError, match="dims"):
        gauss_hermite_grid(3, bad, torch.zeros(1))
