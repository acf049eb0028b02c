"""The L-BFGS step rule (:class:`savigp.training.rules.GradientStep`) keeps no autograd graph between
steps: the terms it keeps for the loop's check are values, not the full-batch graph of its last
evaluation (which held every saved intermediate of an ELBO on all N rows until the next step)."""
import gc
import weakref

import torch

import savigp
from likelihoods import Gaussian
from savigp.training.rules import GradientStep


class _Box:
    """A tensor autograd saved for backward (weak-referenceable, so that a test can see it freed)."""

    def __init__(self, tensor):
        self.tensor = tensor


def _model():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(40, 1, generator=g) * 4
    Y = torch.sin(X) + 0.1 * torch.randn(X.shape, generator=g)
    return savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=5)


def test_lbfgs_step_keeps_no_graph_of_its_reevaluation():
    model = _model()
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=3)
    rule = GradientStep(model, opt, num_samples=4, estimator="closed-form", generator=torch.Generator().manual_seed(1))
    alive = weakref.WeakSet()

    def pack(t):
        box = _Box(t)
        alive.add(box)
        return box

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.tensor):
        terms = rule.step(None, 0)
    del terms
    gc.collect()
    # every graph of the step is gone: the closure's after its backward, the re-evaluation's with it
    assert len(alive) == 0, f"{len(alive)} tensors saved for backward outlive the L-BFGS step"
    assert not rule.terms.elbo.requires_grad
    assert torch.isfinite(rule.terms.elbo) and rule.check().bad is None
