"""The likelihood protocol shared by every likelihood savigp can use.

A likelihood is a ``torch.nn.Module`` giving the log-density of the targets given the latent
functions at every data point,

    log_prob(y, f) -> log p(y_n | f_n),

with ``y`` of shape ``(B, P)`` (one row per data point, P output columns) and ``f`` of shape
``(..., B, Q)`` (any leading sample / mixture-component axes, then the data points, then the Q
latent functions), returning a tensor of shape ``(..., B)``. The likelihood factorizes over data
points (Bonilla et al. 2019, eq. (1)): the engine never needs anything but these values.

**Writing a likelihood** (subclass :class:`Likelihood`):

* set ``num_latent`` (Q) and ``output_dim`` (P), as class attributes or in ``__init__``;
* implement ``_log_prob(y, f)``: ``y (B, P)``, ``f (..., B, Q)`` -> ``(..., B)``. The public
  ``log_prob`` is a template method (as in GPflow): it checks the shapes of ``y`` and ``f``, calls
  ``_log_prob`` and checks the shape of its result, so an implementation never checks shapes
  itself, and a wrong shape is reported once, naming the class, both shapes and what was expected.
  (A class that overrides ``log_prob`` itself, as code written before ``_log_prob`` did, keeps
  working: the engine calls it through :func:`log_prob_checked`, which checks the same shapes
  around it.)
* to offer it on the command line (``savigp train --likelihood NAME``), register it with savigp
  (:func:`savigp.cli.register_likelihood`): this package knows nothing of the command line.

Everything else is optional and has a sensible default:

* ``expected_log_prob(y, mean, var)`` -- a closed form of E_{N(f; mean, diag var)}[log p(y | f)],
  shape ``(..., B)``; when present (``has_closed_form_ell``) the engine uses it by default.
* ``conditional_moments(f)`` -- E[y | f] and Var[y | f], each ``(..., B, P)``; this gives the
  predictive mean and variance of y by Monte Carlo over q(f) (law of total variance).
* ``predictive_moments(mean, var)`` -- the same predictive moments without Monte Carlo, when the
  likelihood can integrate over f itself (closed form or quadrature).
* ``validate_targets(y)`` -- raise a ``ValueError`` naming the bad rows and values.
* ``differentiable`` -- True when ``_log_prob`` is a torch expression differentiable in f, which
  makes the reparameterization estimator available. Likelihood *parameters* (noise variances,
  warping parameters, ...) are ``nn.Parameter`` s and are learned through their own gradient
  (Bonilla et al. 2019, App. D.2), with f detached.

``task`` is ``"regression"`` or ``"classification"`` and selects the paper's metrics (SSE and
NLPD, or error rate and NLP).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn


class Likelihood(nn.Module):
    """Base class of all likelihoods.

    Subclasses set ``num_latent`` (Q, the number of latent functions they read from ``f``) and
    ``output_dim`` (P, the number of columns of ``y``), and implement ``_log_prob`` (see the
    module docstring).
    """

    #: Q: number of latent functions this likelihood reads from the last axis of ``f``.
    num_latent: int = 1
    #: P: number of columns of the target matrix ``y``.
    output_dim: int = 1
    #: True when ``log_prob`` is differentiable in ``f`` with torch autograd.
    differentiable: bool = True
    #: True when log p(y_n | f_n) is a sum of functions of one latent function f_nj each, so that an
    #: expectation of it reads the per-latent marginals only (its ``expected_log_prob`` is then exact also
    #: under a posterior coupled across the latent functions); with one latent function it always is.
    separable_latents: bool = False
    #: "regression" or "classification": which of the paper's metrics apply.
    task: str = "regression"
    #: True when log p(y | f) is concave in f for every y: with a Gaussian prior the posterior then has
    #: one mode, so a single Gaussian's start is no saddle (savigp.training.starts skips its test)
    log_concave: bool = False
    #: True when p(y | f) is Gaussian in f with a variance that does not depend on f (y = f + noise):
    #: conjugate to the Gaussian prior, so the exact posterior over f is Gaussian (a mean-field q(u)
    #: then has the optimum of Bishop 2006, §10.1.2, which ``savigp train`` warns of)
    conjugate: bool = False
    #: classification into two classes with labels {-1, +1} (or {0, 1}) in one column: a binary
    #: classifier (Logistic, Probit), whose class count and labels a model file reads from this
    binary: bool = False
    #: classification: True when the labels are ordered (ordinal), so that the mean and variance of
    #: the label are summaries worth reporting (``savigp predict`` writes them only then; for
    #: unordered classes the class probabilities say everything).
    ordered: bool = False
    # ------------------------------------------------------------------ required
    def log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """log p(y_n | f_n) for every data point: checks the shapes and calls ``_log_prob``.

        Args:
            y: targets, shape ``(B, P)`` with P = ``output_dim``.
            f: latent function values, shape ``(..., B, Q)`` with Q = ``num_latent``.

        Returns:
            shape ``(..., B)``. A ``ValueError`` names the class, the shapes and what was expected
            when ``y``, ``f`` or the result has the wrong shape (a check of shapes only: it reads
            no values and costs no device synchronization).
        """
        return _shape_checked(self, y, f, self._log_prob)

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        """The subclass's log p(y_n | f_n): ``y (B, P)``, ``f (..., B, Q)`` -> ``(..., B)``; shapes
        are already checked."""
        raise NotImplementedError(f"{type(self).__name__} must implement _log_prob(y, f)")

    def _name_in_errors(self) -> str:
        """How shape errors name this likelihood's log-density."""
        return f"{type(self).__name__}.log_prob"

    # ------------------------------------------------------------------ optional
    @property
    def has_closed_form_ell(self) -> bool:
        """True when ``expected_log_prob`` is implemented in closed form."""
        return type(self).expected_log_prob is not Likelihood.expected_log_prob

    def expected_log_prob(self, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """Closed-form E_{N(f; mean, diag(var))}[log p(y | f)].

        Args:
            y: shape ``(B, P)``; mean, var: shape ``(..., B, Q)``.

        Returns:
            shape ``(..., B)``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no closed-form expected log-likelihood")

    def predictive_moments(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Optional: E[y] and Var[y] under f ~ N(mean, diag(var)) without Monte Carlo, each
        ``(..., B, P)`` for mean, var of shape ``(..., B, Q)``. When a likelihood implements it
        (Gaussian exactly, the warped Gaussian by quadrature), predictions use it instead of
        sampling f and calling :meth:`conditional_moments`."""
        raise NotImplementedError(f"{type(self).__name__} has no predictive_moments")

    def predictive_log_prob(self, y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        """Optional: the log predictive density without Monte Carlo,

            log p(y_n) = log int p(y_n | f) N(f; mean_n, diag(var_n)) df,

        of shape ``(..., B)`` for ``y (B, P)`` and ``mean``, ``var (..., B, Q)`` (closed form or
        deterministic quadrature). When a likelihood implements it, the model's
        :meth:`~savigp.SAVIGP.log_predictive_density` mixes it over the components (log-sum-exp
        with log pi_k) instead of averaging p(y | f) over draws of f (Bonilla et al. 2019, §7). It
        must use only the marginals given: a likelihood with Q > 1 that couples its latent
        functions cannot implement it for a posterior that correlates them."""
        raise NotImplementedError(f"{type(self).__name__} has no predictive_log_prob")

    def predictive_class_probabilities(self, mean: Tensor, var: Tensor) -> Tensor:
        """Optional, classification only: p(y* = c) = int p(y = c | f) N(f; mean, diag(var)) df for
        every class c without Monte Carlo, shape ``(..., B, C)`` for ``mean``, ``var (..., B, Q)``.
        When implemented, predictions use it instead of averaging :meth:`class_probabilities` over
        draws of f."""
        raise NotImplementedError(f"{type(self).__name__} has no predictive_class_probabilities")

    def conditional_moments(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """E[y | f] and Var[y | f], each of shape ``(..., B, P)``, for ``f`` of shape ``(..., B, Q)``.

        Used for the predictive mean and variance of y. Likelihoods that cannot provide it
        (e.g. an arbitrary user callable) raise ``NotImplementedError``; predictions then report
        the latent functions and log predictive densities only.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define conditional_moments(f)")

    def sample(self, f: Tensor, generator: torch.Generator) -> Tensor:
        """Optional: draws y ~ p(y | f), shape ``(..., B, P)`` for ``f`` of shape ``(..., B, Q)``,
        from ``generator`` (on f's device). Plots use it for predictive quantiles of y, which stay
        in the support of y (counts >= 0, a probability in (0, 1)) where mean +- 2 sd does not;
        without it they draw mean +- 2 sd, labelled so."""
        raise NotImplementedError(f"{type(self).__name__} cannot sample y given f")

    def class_probabilities(self, f: Tensor) -> Tensor:
        """Classification likelihoods only: p(y = c | f) for every class c, shape ``(..., B, C)``."""
        raise NotImplementedError(f"{type(self).__name__} is not a classification likelihood")

    def class_index(self, y: Tensor) -> Tensor:
        """Classification likelihoods only: the class index in [0, C) of each row of ``y``: ``(B,)``."""
        raise NotImplementedError(f"{type(self).__name__} is not a classification likelihood")

    def validate_targets(self, y: Tensor) -> None:
        """Raise ``ValueError`` if ``y`` (shape ``(N, P)``) is not valid for this likelihood.

        The default checks the number of columns; subclasses extend it (labels in the class set,
        positive counts, ...) and must name the offending rows and values.
        """
        if y.dim() != 2 or y.shape[1] != self.output_dim:
            raise ValueError(
                f"{type(self).__name__} expects targets y of shape (N, {self.output_dim}), got "
                f"{tuple(y.shape)}"
            )

    def initialize_from_data(self, y: Tensor) -> None:
        """Optional data-dependent initialization of likelihood parameters (no-op by default)."""

    def parameter_tensors(self) -> dict:
        """The likelihood's parameters by name, as tensors in their constrained units and
        differentiable (for code that needs their gradients): each child
        :class:`~likelihoods.parameters.PositiveParameter` (its value) and each parameter of the
        module itself. Subclasses with other parameters override it."""
        from .parameters import PositiveParameter

        out = {name: child() for name, child in self.named_children() if isinstance(child, PositiveParameter)}
        out.update(self.named_parameters(recurse=False))
        return out

    def parameter_values(self) -> dict:
        """The likelihood's parameters by name as plain values (:meth:`parameter_tensors`, detached):
        a float for a parameter of one value, else a numpy array of its shape (float64)."""
        out = {}
        for name, t in self.parameter_tensors().items():
            t = t.detach().to("cpu", torch.float64)
            out[name] = float(t.reshape(())) if t.numel() == 1 else t.numpy().copy()
        return out

    def extra_repr(self) -> str:
        return f"num_latent={self.num_latent}, output_dim={self.output_dim}"


def bad_rows_message(mask: Tensor, y: Tensor, what: str, limit: int = 5) -> Optional[str]:
    """Build an error message listing the first rows of ``y`` (shape ``(N, P)``) where ``mask``
    (shape ``(N,)`` or ``(N, P)``) is True, or None when no row is bad."""
    if mask.dim() == 2:
        mask = mask.any(dim=1)
    rows = torch.nonzero(mask).flatten()
    if rows.numel() == 0:
        return None
    shown = ", ".join(f"row {int(r)}: {y[r].tolist()}" for r in rows[:limit])
    more = f" (and {rows.numel() - limit} more)" if rows.numel() > limit else ""
    return f"{rows.numel()} target row(s) {what}: {shown}{more}"


def mean_is_latent(likelihood) -> bool:
    """Whether E[y | f] = f (one output per latent function, ``conditional_moments`` the identity
    on its mean: Gaussian, Student-t, Laplace), read off a few values of f: the latent functions
    are then in the targets' units, and a standardization of the targets maps them linearly."""
    Q = int(getattr(likelihood, "num_latent", 0))
    if Q < 1 or int(getattr(likelihood, "output_dim", 0)) != Q:
        return False
    f = torch.linspace(-2.0, 3.0, 6, dtype=torch.float64)[:, None].expand(6, Q).contiguous()
    try:
        mean, _ = likelihood.conditional_moments(f)
    except NotImplementedError:
        return False
    return isinstance(mean, Tensor) and tuple(mean.shape) == tuple(f.shape) and bool(
        torch.allclose(mean.detach().cpu().to(torch.float64), f))


def log_prob_checked(likelihood: Likelihood, y: Tensor, f: Tensor) -> Tensor:
    """``likelihood.log_prob(y, f)`` with the shapes checked, for every likelihood: through the
    template for a class that implements ``_log_prob``, around the call for one that overrides
    ``log_prob`` itself (code written before the template). Shapes as in :meth:`Likelihood.log_prob`.
    """
    if type(likelihood).log_prob is Likelihood.log_prob:
        return likelihood.log_prob(y, f)
    return _shape_checked(likelihood, y, f, likelihood.log_prob)


def _shape_checked(likelihood: Likelihood, y: Tensor, f: Tensor, log_prob) -> Tensor:
    """``log_prob(y, f)`` between the checks of ``y (B, P)``, ``f (..., B, Q)`` and the result
    ``(..., B)``: Python-side comparisons of ``torch.Size`` s only (no tensor op, no device sync)."""
    fs, ys = f.shape, y.shape
    if len(fs) < 2 or len(ys) != 2 or fs[-1] != likelihood.num_latent or ys[0] != fs[-2] \
            or ys[1] != likelihood.output_dim:
        _raise_input_error(likelihood, y, f)
    out = log_prob(y, f)
    if not isinstance(out, Tensor) or out.shape != fs[:-1]:
        _raise_output_error(likelihood, y, f, out)
    return out


def _who(likelihood) -> str:
    name = getattr(likelihood, "_name_in_errors", None)  # duck-typed likelihoods (not subclasses) have none
    return name() if name is not None else f"{type(likelihood).__name__}.log_prob"


def _raise_input_error(likelihood: Likelihood, y: Tensor, f: Tensor) -> None:
    """The ``ValueError`` for ``y``, ``f`` that are not ``(B, P)``, ``(..., B, Q)`` with P =
    ``output_dim`` and Q = ``num_latent``: names both shapes and what was expected."""
    Q, P = int(likelihood.num_latent), int(likelihood.output_dim)
    if f.shape[-1:] != (Q,):
        raise ValueError(f"{type(likelihood).__name__} reads Q={Q} latent functions but f has shape "
                         f"{tuple(f.shape)}; expected (..., B, {Q}) for y of shape {tuple(y.shape)}")
    raise ValueError(f"{_who(likelihood)}: expected y of shape (B, {P}) and f of shape (..., B, {Q}) "
                     f"with the same B, got y of shape {tuple(y.shape)} and f of shape {tuple(f.shape)}")


def _raise_output_error(likelihood: Likelihood, y: Tensor, f: Tensor, out) -> None:
    """The ``ValueError`` for a result ``out`` that is not ``(..., B)`` = ``f.shape[:-1]``."""
    got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
    raise ValueError(
        f"{_who(likelihood)} returned shape {got} for y of shape {tuple(y.shape)} and f of shape "
        f"{tuple(f.shape)}; expected {tuple(f.shape[:-1])} (one log-density per sample and data point)"
    )
