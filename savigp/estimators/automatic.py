"""``"auto"``: the estimator that suits the likelihood (Bonilla et al. 2019, §5): the likelihood's closed form
when it has one (and it is exact for the marginals, :mod:`savigp.estimators.closed_form`), else the
reparameterization when log p is declared differentiable in f, else the black-box score function."""
from __future__ import annotations

from .base import Estimator
from .closed_form import ClosedForm
from .reparam import Reparameterization
from .score import ScoreFunction

#: the estimators ``"auto"`` tries, in order: the first that allows the likelihood runs
PREFERENCE = (ClosedForm, Reparameterization, ScoreFunction)


class Automatic(Estimator):
    """``"auto"``: the first of :data:`PREFERENCE` that allows the likelihood and the marginals
    (:meth:`~savigp.estimators.base.Estimator.allows`)."""

    name = "auto"
    chooses = True
    summary = "the likelihood's closed form, else the reparameterization, else the score function"

    @classmethod
    def resolve(cls, likelihood, coupled: bool = False) -> "type[Estimator]":
        return next(c for c in PREFERENCE if c.allows(likelihood, coupled))

    def __call__(self, likelihood, y, marginals, **kwargs):
        return self.resolve(likelihood, marginals.coupled)()(likelihood, y, marginals, **kwargs)
