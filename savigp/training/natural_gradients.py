"""Natural-gradient and preconditioned updates: the ORTHNAT / COUPLEDNAT configurations of
Salimbeni et al. (2018, "Orthogonally decoupled variational Gaussian processes").

Three update rules, alternated by :func:`fit_orthnat` at every step on one mini-batch:

1. **q(v): a natural-gradient step** (Salimbeni et al. 2018, eq. (15b)-(15c), in our whitened form),
   owned by the family: ``post.natural_point()`` gives q(v) = N(m, S) with m and S as autograd
   leaves, the model's marginals at them (``model.latent(..., point=)``, the family's
   ``natural_marginals`` plus the prior mean and the mean head) go to the estimator, and
   ``post.natural_step(point, dL/dm, dL/dS, tau)`` takes the step
   (:func:`savigp.posteriors.natural.natural_update`). This module reads none of the family's
   parameters.
2. **a_gamma: the diagonally preconditioned step** of Salimbeni et al. 2018, eq. (16) (or Adam).
3. **everything else** (kernel hyper-parameters, inducing inputs Z, gamma, likelihood
   parameters, learnable prior means): Adam.

Natural gradient for the whitened Gaussian (derivation)
-------------------------------------------------------
Our coupled part is q(v_j) = N(m_j, S_j) with prior p(v_j) = N(0, I) (u_j = mu_j + L_zz v_j, see
:mod:`savigp.posteriors`). As an exponential family it has

    natural parameters      theta1 = S^-1 m,        theta2 = -1/2 S^-1,
    expectation parameters  eta1   = m,             eta2   = S + m m^T.

For an exponential family the Fisher matrix is d eta / d theta, so the natural gradient of the
ELBO with respect to theta is its ordinary gradient with respect to eta, and natural-gradient
ascent with step tau is  theta <- theta + tau dL/d eta.  With L written as a function of (m, S)
and S = eta2 - eta1 eta1^T, the chain rule gives

    dL/d eta2 = dL/dS =: g_S,          dL/d eta1 = dL/dm - 2 g_S m =: g_m - 2 g_S m.

The ELBO is ELL - KL(q(v) || N(0, I)); the KL part is analytic: its gradients are -m (for m)
and 1/2 (S^-1 - I) (for S). Substituting them and writing Lambda = S^-1 for the precision,

    Lambda' = (1 - tau) Lambda + tau (I - 2 g_S^ell)
    theta1' = (1 - tau) Lambda m + tau (g_m^ell - 2 g_S^ell m),       m' = Lambda'^-1 theta1',

where g_m^ell = d ELL / dm and g_S^ell = d ELL / dS (symmetric) are taken by autograd through the
marginals b_n = mu + v_n^T m + r(x_n), s2_n = k_nn - v_n^T v_n + v_n^T S v_n; they are whatever
the chosen ELL estimator gives (closed form, reparameterization or the score function, so the
likelihood stays a black box). This is eq. (15b)-(15c) of Salimbeni et al. 2018 (there written in u-space for
-L) carried to the whitened space; the mean head enters only through the marginal means, and by
orthogonality the q(v) and a_gamma updates are independent.

Conjugate check: for a Gaussian likelihood, g_S^ell = -V V^T / (2 sigma^2) and
g_m^ell = V (y - mu - r - V^T m) / sigma^2, so tau = 1 gives Lambda' = I + V V^T / sigma^2 and
m' = Lambda'^-1 V (y - mu - r) / sigma^2 -- the optimal q(v) (Titsias' collapsed bound) in one
step, whatever the starting point. ``tests/savigp/mean_heads/test_decoupled.py`` checks this.

A diagonal Gaussian (``DiagonalMixture`` with K = 1) is an exponential family with diagonal
Lambda; its natural gradient is the same update restricted to the diagonal of g_S. Mixtures with
K > 1 are not exponential families here; use :func:`savigp.fit` (Adam) for them.

When a step would make Lambda' indefinite (possible with noisy score-function gradients or
non-log-concave likelihoods), tau is halved until it is positive definite (with a warning).

Preconditioned step for a_gamma (Salimbeni et al. 2018, eq. (16))
----------------------------------------------------
    a_gamma <- a_gamma + tau_gamma (D_{gamma|beta} + eps)^-1 dL/da_gamma,
    D_{gamma|beta} = diag(K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma),

with eps = ``gamma_jitter`` times the prior variance k(gamma, gamma). D costs O(G M^2) per latent
function and is refreshed every ``precond_every`` steps. Its scale ignores the data: the
curvature of the ELL in a_gamma grows with the number of data points near each gamma_i over the
noise level, so tau_gamma must shrink with N (for a Gaussian likelihood, roughly
tau_gamma < sigma^2 / (data points within a length-scale)). ``gamma_precond="gauss-newton"``
adds that curvature (an extension, not in Salimbeni et al. 2018). The Gauss-Newton matrix of the ELL in a_gamma
is H = R_gamma,X Lambda R_X,gamma with R(x, gamma) = k(x, gamma) - k(x, Z) K_zz^-1 k(Z, gamma) the
residual cross-covariance and Lambda = diag(lambda_n), lambda_n = -2 d ELL / d s2_n =
-E_q[d^2 log p / d f_n^2] (Price's theorem; 1 / sigma^2 for the Gaussian; clamped at 0), taken
from the same ELL gradients (so the likelihood stays a black box). Its diagonal alone is not a
safe preconditioner -- neighbouring gamma_i share data and a_gamma is strongly coupled, so a
Jacobi step diverges for tau_gamma above about 1 / (number of strongly coupled neighbours) -- so
we use absolute row sums (Gershgorin bounds: for symmetric H and P_i >= sum_j |H_ij|,
lambda_max(P^-1 H) <= 1), for the data part

    sum_n |R_ni| lambda_n sum_j |R_nj|       (>= sum_j |(R_gamma,X Lambda R_X,gamma)_ij|)

and for the KL part, whose Hessian is R_gamma,gamma = K_gamma - K_gamma,Z K_zz^-1 K_Z,gamma itself
(its diagonal D alone -- eq. (16) -- is exceeded by a factor of about the number of correlated
neighbours, which diverges with tau = 1 wherever the data curvature is small, e.g. for confident
logistic predictions), sum_j |R_gamma,gamma|_ij (exact up to G = ``prior_columns``, else estimated
from sampled columns). Then tau_gamma = 1 is stable for a quadratic objective independently of N,
sigma and G, at O(B M G + G min(G, 512) M) per refresh.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

from .._choices import PARAMETER_GROUPS
from ..estimators import make_estimator
from ..mean_heads.base import GAMMA_PRECONDITIONERS
from ..model import SAVIGP, ELBOTerms
from ..posteriors.base import InducingPrior
from ..posteriors.natural import NaturalPoint, natural_update
from . import distributed
from .groups import parameter_groups
from .loop import Batches, TrainingHistory, run
from .rules import CheckedStep

GAMMA_UPDATES = ("precond", "adam")
#: the groups of :data:`PARAMETER_GROUPS` that fit_orthnat's Adam step trains (``hyper_groups=``): all
#: but the posterior (the natural step's); ``"mean_head"`` stands for the head's inputs gamma (its
#: coefficients a take their own step)
HYPER_GROUPS = tuple(g for g in PARAMETER_GROUPS if g != "posterior")
#: earlier names of those groups, still accepted
_GROUP_ALIASES = {"gamma_inputs": "mean_head"}


# ---------------------------------------------------------------------- the mean head's part
def _leaf_marginals(model: SAVIGP, X: Tensor, Lzz: Tensor, point: NaturalPoint):
    """The batch's marginals q(f_n) at the family's natural point (prior mean and mean head added by
    the model) and the head's terms of this evaluation (for its KL)."""
    prior = InducingPrior(Lzz)
    head_state = model.head_state(prior)
    return model.latent(X, prior, head_state=head_state, point=point), head_state


# ---------------------------------------------------------------------- the natural step
def _check_natgrad_posterior(model: SAVIGP) -> None:
    obstacle = model.posterior.natural_gradient_obstacle()  # the family says why it cannot take the step
    if obstacle is not None:
        raise ValueError(obstacle)


def natural_gradient_step(model: SAVIGP, *, step: float = 1.0, batch: Optional[Tensor] = None,
                          num_samples: int = 100, estimator: str = "auto",
                          generator: Optional[torch.Generator] = None) -> float:
    """One natural-gradient step on q(v) with everything else fixed; returns the step taken.

    Args:
        step: tau (1.0 with a Gaussian likelihood and the full batch reaches the optimal q(v)).
        batch: indices of a mini-batch (None = all data; the ELL is scaled by N / B).
    """
    _check_natgrad_posterior(model)
    post = model.posterior
    X, Y = (model.train_x, model.train_y) if batch is None else (model.train_x[batch], model.train_y[batch])
    point = post.natural_point()
    Lzz = model.prior_factor().detach()
    q, _ = _leaf_marginals(model, X, Lzz, point)
    ell = make_estimator(estimator, model.likelihood)(model.likelihood, Y, q, num_samples=num_samples,
                                                      scale=model.num_data / X.shape[0], generator=generator)
    coupling = model.head.mean_coupling(model.kernel, model.inducing, Lzz, point.mean)  # (HYBRID's; else 0)
    g_m, g_S = torch.autograd.grad(ell.value - coupling, [point.mean, point.cov])
    return post.natural_step(point, g_m, g_S, step, fix_mean=model.head.fixes_mean)


# ---------------------------------------------------------------------- the training loop
def _hyper_parameters(model: SAVIGP, groups: Sequence[str]) -> list:
    """The parameters of ``groups`` (names of :data:`HYPER_GROUPS`) that the Adam step trains: those
    :func:`savigp.training.parameter_groups` gives, less the mean head's coefficients a."""
    groups = tuple(_GROUP_ALIASES.get(g, g) for g in groups)
    unknown = set(groups) - set(HYPER_GROUPS)
    if unknown:
        raise ValueError(f"unknown hyper-parameter group(s) {sorted(unknown)}; choose from {HYPER_GROUPS} "
                         "(the posterior takes the natural step)")
    own = model.head.natural_parameters()
    return [p for p in parameter_groups(model, groups) if all(p is not a for a in own)]


def fit_orthnat(
    model: SAVIGP,
    iterations: int,
    *,
    batch_size: Optional[int] = None,
    natgrad_step: float = 0.1,
    natgrad_warmup: int = 0,
    gamma_update: str = "precond",
    gamma_step: float = 1.0,
    gamma_precond: str = "gauss-newton",
    gamma_jitter: float = 1e-3,
    precond_every: int = 1,
    gamma_lr: float = 0.01,
    hyper_lr: float = 0.01,
    hyper_groups: Sequence[str] = HYPER_GROUPS,
    num_samples: int = 100,
    estimator: str = "auto",
    seed: int = 0,
    progress: bool = False,
    callback: Optional[Callable[[int, ELBOTerms], Optional[bool]]] = None,
) -> TrainingHistory:
    """Salimbeni et al. (2018)'s ORTHNAT (with a mean head) or COUPLEDNAT (without): at every step, on one
    mini-batch and one set of Monte Carlo draws,

    1. a natural-gradient step of size ``natgrad_step`` on q(v) (module docstring);
    2. for a_gamma, the preconditioned step (``gamma_update="precond"``, step ``gamma_step``,
       preconditioner ``gamma_precond``: ``"eq16"`` is eq. (16) exactly, whose stable step
       shrinks with N / sigma^2 and must be tuned; the default ``"gauss-newton"`` uses row-sum
       bounds of the data and KL curvature so that ``gamma_step=1`` is stable; it is rebuilt
       every ``precond_every`` steps, O(B M G + G min(G, 512) M) each time) or Adam
       (``"adam"``, lr ``gamma_lr``; the practical variant Salimbeni et al. 2018 recommend);
    3. an Adam step (lr ``hyper_lr``) on the ``hyper_groups`` (:data:`HYPER_GROUPS`: the groups of
       :data:`savigp.training.PARAMETER_GROUPS` but the posterior): kernel hyper-parameters,
       inducing inputs, likelihood parameters, learnable prior means and the mean head's inputs
       gamma (``"mean_head"``; ``"gamma_inputs"`` is its earlier name).

    All gradients are taken at the same (pre-step) parameters. ``natgrad_warmup`` ramps the
    natural step linearly from 1e-5 to ``natgrad_step`` over that many steps (Salimbeni et al. 2018, App. E,
    for non-conjugate likelihoods). ``hyper_lr=0`` or ``hyper_groups=()`` keeps them fixed.

    The loop is fit's (:func:`savigp.training.loop.run`): ``seed`` seeds the mini-batch order and
    the draws, every step is checked (a NaN/inf term or parameter restores the last good parameters
    and raises :class:`savigp.TrainingDiverged`), ``callback(step, terms)`` runs after every step
    (True stops), and ``progress`` reports on stderr as fit does (a bar on a terminal, lines in a log).

    Returns:
        :class:`savigp.training.TrainingHistory` (the ELBO at each step's starting parameters).
    """
    _check_natgrad_posterior(model)
    if gamma_update not in GAMMA_UPDATES:
        raise ValueError(f"gamma_update must be one of {GAMMA_UPDATES}, got {gamma_update!r}")
    if gamma_precond not in GAMMA_PRECONDITIONERS:
        raise ValueError(f"gamma_precond must be one of {GAMMA_PRECONDITIONERS}, got {gamma_precond!r}")
    if getattr(model, "shared_kernel", False):
        raise ValueError("fit_orthnat: the model's kernel is shared by its latent functions (num_latent=1), which the "
                         "natural-gradient step does not take yet; use savigp.fit, or a kernel with "
                         f"num_latent={model.num_latent}")
    if not 0.0 < natgrad_step <= 1.0:
        raise ValueError(f"natgrad_step must be in (0, 1], got {natgrad_step}")
    distributed.refuse("fit_orthnat (natural-gradient training)")
    N = model.num_data
    B = N if batch_size is None else int(batch_size)
    if not 1 <= B <= N:
        raise ValueError(f"batch_size must be between 1 and N={N}, got {batch_size}")
    iterations = int(iterations)
    estimator = model.resolved_estimator(estimator)
    own = model.head.natural_parameters()
    hypers = _hyper_parameters(model, hyper_groups) if hyper_lr > 0 else []
    opt = torch.optim.Adam(hypers, lr=hyper_lr) if hypers else None
    gamma_opt = torch.optim.Adam(own, lr=gamma_lr) if (own and gamma_update == "adam") else None

    gen = torch.Generator().manual_seed(seed)
    history = TrainingHistory(estimator=f"orthnat/{estimator}")
    rule = NaturalStep(model, opt, gamma_opt, hypers, natgrad_step=natgrad_step, natgrad_warmup=natgrad_warmup,
                       gamma_step=gamma_step, gamma_precond=gamma_precond, gamma_jitter=gamma_jitter,
                       precond_every=precond_every, num_samples=num_samples, estimator=estimator, generator=gen)
    batches = Batches(N, B, gen, torch.randperm(N, generator=gen), 0, model.device)
    run(model, rule, batches, history, start=0, iterations=iterations, progress=progress, callback=callback)
    if history.still_rising:
        import warnings

        from .convergence import ConvergenceWarning

        warnings.warn(f"savigp.fit_orthnat: {history.still_rising}", ConvergenceWarning, stacklevel=2)
    return history


class NaturalStep(CheckedStep):
    """The step of :func:`fit_orthnat` (its docstring), checked after every step: on one batch and
    one set of draws, the natural step on q(v), the a_gamma step (preconditioned, or ``gamma_opt``)
    and Adam (``opt``) on ``hypers``, all with gradients at the parameters the step started from."""

    def __init__(self, model: SAVIGP, opt, gamma_opt, hypers: list, *, natgrad_step: float, natgrad_warmup: int,
                 gamma_step: float, gamma_precond: str, gamma_jitter: float, precond_every: int, num_samples: int,
                 estimator: str, generator: torch.Generator):
        super().__init__(model, opt)
        self.gamma_opt, self.hypers, self.generator = gamma_opt, hypers, generator
        self.natgrad_step, self.natgrad_warmup, self.gamma_step = natgrad_step, natgrad_warmup, gamma_step
        self.gamma_precond, self.gamma_jitter, self.precond_every = gamma_precond, gamma_jitter, precond_every
        self.num_samples, self.estimator = num_samples, estimator
        self.precond = None

    def step(self, batch: Optional[Tensor], step: int) -> ELBOTerms:
        model, post, head, hypers = self.model, self.model.posterior, self.model.head, self.hypers
        X, Y = (model.train_x, model.train_y) if batch is None else (model.train_x[batch], model.train_y[batch])
        tau = self.natgrad_step if step >= self.natgrad_warmup else \
            1e-5 + (self.natgrad_step - 1e-5) * step / max(1, self.natgrad_warmup)

        # ---- one forward pass with the family's (m, S) as autograd leaves
        point = post.natural_point()
        Lzz = model.prior_factor()
        q, head_state = _leaf_marginals(model, X, Lzz, point)
        ell = make_estimator(self.estimator, model.likelihood)(model.likelihood, Y, q, num_samples=self.num_samples,
                                                               scale=model.num_data / X.shape[0], generator=self.generator)
        head_kl = head.kl(model.kernel, model.inducing, Lzz, mean=point.mean, state=head_state)
        objective = ell.value - head_kl
        own = head.natural_parameters()  # the head's coefficients a (none for the zero head)
        wrt = [point.mean, point.cov] + hypers + own + [q.var]
        grads = torch.autograd.grad(objective, wrt, allow_unused=True)
        g_m, g_S = grads[0], grads[1]
        g_hyper = grads[2:2 + len(hypers)]
        g_own = grads[2 + len(hypers):2 + len(hypers) + len(own)]
        g_var = grads[-1]

        with torch.no_grad():
            ent, cross = post.kl_terms(InducingPrior(Lzz.detach()))
            terms = model.assemble_terms(ell, ent, cross, head_kl.detach(), Lzz)
            if torch.isfinite(terms.elbo):
                # 1. the natural step on q(v), owned by the family (from the point's start: the
                #    other steps' gradients were all taken at the same parameters)
                post.natural_step(point, g_m, g_S, tau, fix_mean=head.fixes_mean)
                # 2. a_gamma: the head's own parameters (none for the zero head)
                if any(g is not None for g in g_own):
                    if self.gamma_opt is not None:
                        for a, g_a in zip(own, g_own):
                            a.grad = None if g_a is None else -g_a
                        self.gamma_opt.step()
                    else:
                        if self.precond is None or step % max(1, int(self.precond_every)) == 0:
                            curv = None if g_var is None else (-2.0 * g_var[0]).transpose(0, 1)  # (Q, B)
                            self.precond = head.natural_preconditioner(
                                model.kernel, model.inducing, Lzz.detach(), jitter=self.gamma_jitter,
                                kind=self.gamma_precond, X=X, curvature=curv)
                        for a, g_a in zip(own, g_own):
                            if g_a is not None:
                                a.add_(self.gamma_step * g_a / self.precond)
                # 3. Adam on the hyper-parameters
                if self.optimizer is not None:
                    for p, g in zip(hypers, g_hyper):
                        p.grad = None if g is None else -g
                    self.optimizer.step()
        self.terms, self.index = terms, step
        return terms
