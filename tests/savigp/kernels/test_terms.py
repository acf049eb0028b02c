"""savigp.kernels.terms: a kernel as a sum of terms, products multiplied out over sums (issue 53)."""
import pytest
import torch

from savigp.kernels import build_kernel, parse_kernel
from savigp.kernels.terms import additive_terms

COLUMNS = ["time", "x"]


@pytest.mark.parametrize("expression,names", [
    ("rbf(time) + periodic(time, period=1) * rbf(time) + linear(time)",
     ["rbf(time)", "periodic(time) * rbf(time)", "linear(time)"]),
    ("(rbf(time) + linear(x)) * matern32(x)", ["rbf(time) * matern32(x)", "linear(x) * matern32(x)"]),
    ("(rbf(time) + white) * (periodic(time) + constant)",
     ["rbf(time) * periodic(time)", "rbf(time) * constant", "white * periodic(time)", "white * constant"]),
    ("scale(rbf(time) + linear(x), variance=2) + scale(rbf(x) * periodic(time))",
     ["scale(rbf(time))", "scale(linear(x))", "scale(rbf(x) * periodic(time))"]),
    ("rbf(time, ard=false, learn=false)", ["rbf(time, ard=false)"]),
])
def test_terms_multiply_out_and_add_up_to_the_kernel(expression, names):
    """The terms' names as the expression writes them (defaults and learn= left out), and their
    Gram matrices and diagonals add up to the kernel's (a sum of products, to rounding)."""
    kernel = build_kernel(parse_kernel(expression, columns=COLUMNS), 2, 1)
    with torch.no_grad():  # hyper-parameters away from their defaults, so that a term's factors matter
        for p in kernel.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1), dtype=p.dtype))
    terms = additive_terms(kernel)
    assert [t.name(COLUMNS) for t in terms] == names
    g = torch.Generator().manual_seed(0)
    X, Z = torch.randn(7, 2, generator=g, dtype=torch.float64), torch.randn(5, 2, generator=g, dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(sum(t(Z, X) for t in terms), kernel(Z, X), rtol=1e-12, atol=1e-12)
        assert torch.allclose(sum(t.diag(X) for t in terms), kernel.diag(X), rtol=1e-12, atol=1e-12)


def test_active_dims_of_a_term_are_its_factors_columns():
    kernel = build_kernel(parse_kernel("rbf(time) * linear(x) + periodic(time) + rbf", columns=COLUMNS), 2, 1)
    assert [t.active_dims for t in additive_terms(kernel)] == [(0, 1), (0,), None]
    assert additive_terms(kernel)[0].name() == "rbf(0) * linear(1)"


def test_a_kernel_list_gives_each_latent_function_its_own_terms():
    kernel = build_kernel(parse_kernel("rbf"), 1, 1)
    lst = build_kernel({"list": [{"num_latent": 1, "kernel": {"sum": [{"kernel": "rbf"}, {"kernel": "linear"}]}},
                                 {"num_latent": 2, "kernel": {"kernel": "periodic"}}]}, 1, 3)
    assert [t.name() for t in additive_terms(lst, 0)] == ["rbf", "linear"]
    assert [t.name() for t in additive_terms(lst, 2)] == ["periodic"]
    Z = torch.randn(3, 4, 1, dtype=torch.float64)  # one set of inducing inputs per latent function
    X = torch.randn(6, 1, dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(additive_terms(lst, 1)[0](Z, X), lst(Z, X)[1:])
    with pytest.raises(ValueError, match=r"latent must be in \[0, 3\)"):
        additive_terms(lst, 3)
    assert [t.name() for t in additive_terms(kernel)] == ["rbf"]


def test_fourier_features_are_named_by_the_kernel_they_stand_for():
    """An ODVFF model's kernel (the features of an additive Matern) is one term, named as its prior."""
    import savigp
    from likelihoods import Gaussian

    X = torch.randn(20, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    model = savigp.odvff_model(X, X[:, :1], Gaussian(), num_frequencies=2, mean_basis_size=3)
    assert [t.name() for t in additive_terms(model.kernel)] == ["additive-matern"]
