"""The base class of the estimators of the expected log-likelihood (Bonilla et al. 2019, §4.6, §5, App. F)

    L_ell = (N / B) sum_{n in batch} sum_k pi_k E_{q_k(f_n)}[log p(y_n | f_n)]      (eq. 24, 29, 33)

and how a registered name becomes one (:func:`resolve_estimator`, :func:`make_estimator`).

An estimator reads the batch's :class:`~savigp.posteriors.marginals.LatentMarginals` -- q_k(f_n) =
N(b_kn, diag s2_kn) for the families factorized over the Q latent functions (eq. 22-23), or
N(b_n, C_n) with a full Q x Q covariance for a family coupled across them -- and returns an
:class:`ELLEstimate` whose value is the estimate of L_ell and whose gradient, by autograd, is the
estimator's gradient with respect to the marginals (and through them to m, S, the kernel's
hyper-parameters and the inducing inputs), to the mixture weights and to the likelihood's parameters.

Each estimator declares what it needs and allows, as class attributes that callers read instead of its
name: ``needs_closed_form``, ``needs_differentiable_likelihood``, ``takes_coupled_marginals`` and
``sees_coupled_marginals``, ``cuda_graph_safe``, ``monte_carlo``, ``score_function`` and ``chooses``. A new estimator is
a subclass (its own module in this package) that implements :meth:`Estimator.factorized` (and
:meth:`Estimator.coupled` if ``takes_coupled_marginals``) plus one line in
:data:`savigp._choices.ESTIMATORS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .._choices import ESTIMATORS


@dataclass
class ELLEstimate:
    """Result of an estimator.

    Attributes:
        value: scalar; value = the estimate of L_ell (already scaled by N / B); gradient = the
            estimator's gradient.
        per_component: ``(K, B)`` detached estimates of E_{q_k}[log p(y_n | f_n)].
        stderr: Monte Carlo standard error of ``value``, a detached 0-dim tensor (the float 0.0 for
            deterministic estimators).
    """

    value: Tensor
    per_component: Tensor
    stderr: Tensor | float


def _separable(likelihood) -> bool:
    """Whether the likelihood's log-density is a sum of functions of one latent function each (one latent
    function: trivially), so that its expectation reads the per-latent marginals only."""
    return int(likelihood.num_latent) == 1 or bool(likelihood.separable_latents)


class Estimator:
    """An estimator of L_ell for the marginals of one batch, built with no arguments from
    :data:`~savigp._choices.ESTIMATORS` and called once per ELBO evaluation::

        estimate = estimator(likelihood, y, marginals, num_samples=S, scale=N / B, generator=gen)

    with targets ``y (B, P)`` and :class:`~savigp.posteriors.marginals.LatentMarginals` (means and variances
    ``(K, B, Q)``, covariances ``(K, B, Q, Q)`` or None, log-weights ``(K,)``); it returns an
    :class:`ELLEstimate`. A call checks first that the estimator allows the likelihood and the marginals
    (:meth:`refusal`), then runs :meth:`factorized` or :meth:`coupled`.
    """

    #: the name it is registered under (messages, ``TrainingHistory.estimator``, model files; a subclass
    #: that leaves it empty is named by its registry entry)
    name: ClassVar[str] = ""
    #: what it uses, one line (the command prints it beside the name)
    summary: ClassVar[str] = ""
    #: it calls the likelihood's closed form ``expected_log_prob`` (``has_closed_form_ell``)
    needs_closed_form: ClassVar[bool] = False
    #: it differentiates log p(y | f) in f (the likelihood's ``differentiable``)
    needs_differentiable_likelihood: ClassVar[bool] = False
    #: it has a form for marginals coupled across the latent functions (:meth:`coupled`)
    takes_coupled_marginals: ClassVar[bool] = False
    #: its coupled form uses the cross-covariances of C_n (False: it reads the per-latent marginals only,
    #: exact only for a likelihood whose log-density is separable in the latent functions)
    sees_coupled_marginals: ClassVar[bool] = True
    #: its work stays on the device, with no host read or numpy, so fit may capture it in a CUDA graph
    cuda_graph_safe: ClassVar[bool] = True
    #: it draws ``num_samples`` per point and component (a Monte Carlo standard error; False: deterministic)
    monte_carlo: ClassVar[bool] = True
    #: it stands for another estimator that it chooses per likelihood (``"auto"``, :meth:`resolve`)
    chooses: ClassVar[bool] = False
    #: its gradient is a Monte Carlo score-function estimate from values of log p only (the black-box
    #: estimator; a likelihood differentiable in f would do better with the reparameterization)
    score_function: ClassVar[bool] = False

    @classmethod
    def refusal(cls, likelihood, coupled: bool = False) -> str:
        """Why this estimator cannot run for ``likelihood`` (and, ``coupled``, marginals coupled across the
        latent functions), one sentence; empty when it can (what its declarations above require)."""
        who, missing, name = type(likelihood).__name__, cls._missing(likelihood, coupled), cls.name or cls.__name__
        if missing == "closed form":
            return f"estimator={name!r}: {who} has no closed-form expected log-likelihood"
        if missing == "derivative":
            return (f"estimator={name!r} needs a likelihood differentiable in f; {who} is declared "
                    "non-differentiable (use 'score')")
        if missing == "coupled form":
            return (f"estimator={name!r} is not available with posterior='joint' (marginals coupled across the "
                    f"latent functions); use one of {_coupled_names(likelihood)}")
        if missing == "cross-covariances":
            return (f"estimator={name!r} reads the per-latent marginals only and would drop the cross-covariances "
                    f"of a posterior coupled across the latent functions (posterior='joint'), but {who} couples its "
                    f"latent functions (it does not declare separable_latents=True); use one of "
                    f"{_coupled_names(likelihood)}")
        return ""

    @classmethod
    def allows(cls, likelihood, coupled: bool = False) -> bool:
        """Whether this estimator can run for ``likelihood`` (and ``coupled`` marginals): :meth:`refusal` empty."""
        return not cls._missing(likelihood, coupled)

    @classmethod
    def _missing(cls, likelihood, coupled: bool) -> str:
        """The first requirement of the declarations that ``likelihood`` and the marginals miss, or ''."""
        if cls.needs_closed_form and not likelihood.has_closed_form_ell:
            return "closed form"
        if cls.needs_differentiable_likelihood and not likelihood.differentiable:
            return "derivative"
        if coupled and not cls.takes_coupled_marginals:
            return "coupled form"
        if coupled and not cls.sees_coupled_marginals and not _separable(likelihood):
            return "cross-covariances"
        return ""

    @classmethod
    def resolve(cls, likelihood, coupled: bool = False) -> "type[Estimator]":
        """The estimator class that runs for ``likelihood`` (itself; ``"auto"`` picks one); a ``ValueError``
        (one line, :meth:`refusal`) when it cannot run."""
        why = cls.refusal(likelihood, coupled)
        if why:
            raise ValueError(why)
        return cls

    def __call__(self, likelihood, y: Tensor, marginals, *, num_samples: int, scale: float = 1.0,
                 generator: torch.Generator | None = None) -> ELLEstimate:
        why = self.refusal(likelihood, marginals.coupled)
        if why:
            raise ValueError(why)
        if not marginals.coupled:
            return self.factorized(likelihood, y, marginals, num_samples=num_samples, scale=scale, generator=generator)
        if marginals.shape[0] != 1:
            raise ValueError(f"marginals coupled across the latent functions have one component here, "
                             f"got K={marginals.shape[0]}")
        return self.coupled(likelihood, y, marginals, num_samples=num_samples, scale=scale, generator=generator)

    def factorized(self, likelihood, y: Tensor, marginals, *, num_samples: int, scale: float,
                   generator: torch.Generator | None) -> ELLEstimate:
        """L_ell for q_k(f_n) = prod_j N(b_knj, s2_knj): ``marginals.mean``, ``marginals.var`` ``(K, B, Q)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement factorized()")

    def coupled(self, likelihood, y: Tensor, marginals, *, num_samples: int, scale: float,
                generator: torch.Generator | None) -> ELLEstimate:
        """L_ell for q(f_n) = N(b_n, C_n) coupled across the latent functions: ``marginals.mean`` ``(1, B, Q)``,
        ``marginals.cov`` ``(1, B, Q, Q)`` (only called when ``takes_coupled_marginals``)."""
        raise NotImplementedError(f"{type(self).__name__} declares takes_coupled_marginals but has no coupled()")


def _coupled_names(likelihood) -> str:
    """The registered estimators that run on coupled marginals for ``likelihood``, in the registry's order."""
    return ", ".join(repr(n) for n in ESTIMATORS.names()
                     if ESTIMATORS[n].takes_coupled_marginals and ESTIMATORS[n].allows(likelihood, coupled=True))


def resolve_estimator(estimator: str, likelihood, coupled: bool = False) -> str:
    """The registered name of the estimator that ``estimator`` stands for with ``likelihood`` (``"auto"``
    picks one), for factorized marginals or, ``coupled``, marginals coupled across the latent functions.

    Raises:
        ValueError: a name not in :data:`~savigp._choices.ESTIMATORS` (naming them), or one line saying why the
            estimator cannot run for this likelihood (:meth:`Estimator.refusal`).
    """
    name = ESTIMATORS.canonical(estimator)
    chosen = ESTIMATORS[name].resolve(likelihood, coupled)
    return chosen.name or name


def make_estimator(estimator: str, likelihood, coupled: bool = False) -> Estimator:
    """The :class:`Estimator` that the name ``estimator`` stands for (see :func:`resolve_estimator`), built."""
    return ESTIMATORS[ESTIMATORS.canonical(estimator)].resolve(likelihood, coupled)()
