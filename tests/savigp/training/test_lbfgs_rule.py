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


def test_lbfgs_trial_point_that_fails_to_factorize_is_rejected_not_raised():
    """A trial point of L-BFGS's line search where a matrix is not positive definite (as S_k + S_l
    of a mixture's entropy at a dense K-selection fit once was) raised a torch ``LinAlgError`` out of
    ``fit`` from inside torch's line search, leaving the parameters at the trial point. Now the step is
    rejected: the parameters go back to the last good step, L-BFGS starts afresh there, the history
    says so, and the fit goes on from a finite point no worse than where it began. Here every point
    more than 0.5 from the start in the posterior's means raises, and the optimum (y about 3) is
    farther: the first line search overshoots into the failing region."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 1, generator=g) * 4
    Y = 3.0 + torch.sin(X) + 0.1 * torch.randn(X.shape, generator=g)
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=5)
    mean0 = model.posterior.mean.detach().clone()
    start = float(model.elbo(None, estimator="closed-form").elbo.detach())
    elbo = model.elbo

    def failing_far_away(*args, **kwargs):
        if float((model.posterior.mean.detach() - mean0).abs().max()) > 0.5:
            raise torch.linalg.LinAlgError("linalg.cholesky: The factorization could not be completed because the "
                                           "input is not positive-definite (the leading minor of order 3 is not "
                                           "positive-definite).")
        return elbo(*args, **kwargs)

    model.elbo = failing_far_away
    h = savigp.fit(model, optimizer="lbfgs", iterations=3, estimator="closed-form", progress=False, final_elbo=False)
    assert h.notes and all("L-BFGS step" in n and "rejected" in n and "LinAlgError" in n for n in h.notes), h.notes
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert float((model.posterior.mean.detach() - mean0).abs().max()) <= 0.5
    assert float(elbo(None, estimator="closed-form").elbo.detach()) >= start
