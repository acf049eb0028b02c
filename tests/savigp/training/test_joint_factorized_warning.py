"""A factorized q(u) learned jointly with a dense model's kernel or likelihood warns once at fit
time and names the two-stage recipe (issue 25, item 5; docs/mixtures.md measures the bias)."""
import warnings

import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp.training.warm_start import FactorizedHyperparameterWarning


def _model(posterior="diag-u", K=2, dense=True, learn_noise=True, learn_kernel=True):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(15, 1, generator=g, dtype=torch.float64) * 4
    Y = torch.sin(X) + 0.1 * torch.randn(15, 1, generator=g, dtype=torch.float64)
    kernel = savigp.RBF(1, 1, lengthscale=1.0, variance=1.0, learn=learn_kernel)
    return savigp.SAVIGP(X, Y, Gaussian(0.1, learn_variance=learn_noise), kernel, posterior=posterior,
                         num_components=K, dense=dense, num_inducing=None if dense else 5, seed=0)


def _warnings(model, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        savigp.fit(model, iterations=1, progress=False, **kw)
    return [w for w in caught if issubclass(w.category, FactorizedHyperparameterWarning)]


@pytest.mark.parametrize("posterior, K", [("diag-u", 2), ("diag-u", 1), ("diag", 2)])
def test_joint_fit_of_a_factorized_posterior_on_a_dense_model_warns_once(posterior, K):
    caught = _warnings(_model(posterior, K))
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "savigp.warm_start" in text and "groups=['posterior']" in text and "kernel and likelihood" in text
    assert caught[0].filename == __file__  # points at the caller of fit
    assert len(_warnings(_model(posterior, K), groups=["posterior", "likelihood"])) == 1


def test_no_warning_when_only_the_posterior_learns_or_nothing_is_biased():
    assert _warnings(_model(), groups=["posterior"]) == []
    assert _warnings(_model(learn_noise=False, learn_kernel=False)) == []  # no trainable hyper-parameters
    assert _warnings(_model("full", 2)) == []
    assert _warnings(_model("full", 1)) == []
    assert _warnings(_model(dense=False)) == []
