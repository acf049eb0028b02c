"""Natural gradients are the families' (issue 29): fit_orthnat drives a family through its
natural_point / natural_marginals / natural_step protocol and the model's marginals and estimator,
reads none of the family's parameters itself, and trains the groups of PARAMETER_GROUPS."""
import ast

import numpy as np
import pytest
import torch

import savigp
from conftest import ROOT
from likelihoods import Gaussian
from savigp.posteriors import FullMixture
from savigp.training import PARAMETER_GROUPS
from savigp.training import natural_gradients

#: what a training rule must not read or write on a posterior: its parameters and layout
FAMILY_INTERNALS = {"diagonal", "mean", "raw_scale", "scale", "set_full", "logits"}


def test_the_natural_step_reads_no_family_internals():
    tree = ast.parse((ROOT / "savigp" / "training" / "natural_gradients.py").read_text())
    reads = sorted({f"{node.value.id}.{node.attr}" for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name) and node.value.id in ("post", "posterior")
                    and node.attr in FAMILY_INTERNALS})
    reads += sorted({f"model.posterior.{node.attr}" for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                     and node.attr in FAMILY_INTERNALS and isinstance(node.value, ast.Attribute)
                     and node.value.attr == "posterior"})
    assert reads == [], reads
    assert "whitened_marginals" not in vars(natural_gradients)


class _Counting(FullMixture):
    """The full Gaussian, counting the protocol's calls."""

    kind = "full-counting"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def natural_point(self):
        self.calls.append("point")
        return super().natural_point()

    def natural_marginals(self, *args):
        self.calls.append("marginals")
        return super().natural_marginals(*args)

    def natural_step(self, *args, **kwargs):
        self.calls.append("step")
        return super().natural_step(*args, **kwargs)


def test_fit_orthnat_goes_through_the_family_once_per_step():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (30, 1))
    Y = np.sin(2 * X) + 0.1 * rng.normal(size=(30, 1))
    post = _Counting(1, 5, 1)
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=5, posterior=post, mean_basis_size=4)
    history = savigp.fit_orthnat(model, 3, natgrad_step=0.5, num_samples=4)
    assert post.calls == ["point", "marginals", "step"] * 3 and len(history.elbo) == 3
    assert history.elbo[-1] > history.elbo[0]


def test_hyper_groups_are_the_training_packages_groups():
    assert natural_gradients.HYPER_GROUPS == tuple(g for g in PARAMETER_GROUPS if g != "posterior")
    X = np.linspace(-1, 1, 12)[:, None]
    model = savigp.SAVIGP(X, np.sin(X), Gaussian(0.1), num_inducing=4, mean_basis_size=3, learn_prior_mean=True)
    head = model.mean_head
    params = natural_gradients._hyper_parameters(model, natural_gradients.HYPER_GROUPS)
    assert any(p is head.gamma for p in params) and not any(p is head.a for p in params)
    assert any(p is model.prior_mean for p in params) and any(p is model.inducing for p in params)
    old = natural_gradients._hyper_parameters(model, ["gamma_inputs"])  # the earlier name of the head's group
    assert len(old) == 1 and old[0] is head.gamma
    with pytest.raises(ValueError, match="the posterior takes the natural step"):
        savigp.fit_orthnat(model, 1, hyper_groups=["posterior"])
    fixed = [p.detach().clone() for p in params]
    savigp.fit_orthnat(model, 1, hyper_groups=(), num_samples=4)  # no group: the hyper-parameters stay
    assert all(torch.equal(a, b.detach()) for a, b in zip(fixed, params))
    savigp.fit_orthnat(model, 1, hyper_groups=["kernel"], num_samples=4)
    moved = [not torch.equal(a, b.detach()) for a, b in zip(fixed, params)]
    kernel = {id(p) for p in model.kernel.parameters()}
    assert moved == [id(p) in kernel for p in params]
