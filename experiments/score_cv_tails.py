"""The score estimator's control variate at S = 2 and the heavy tails of its variance gradient.

For a logistic and a Poisson likelihood (K = 2 components, B = 12 points, marginal means N(0, 1),
variances in [0.2, 1.2], the setting of tests/savigp/estimators/test_estimators.py) this draws R independent
S = 2 estimates of the gradient of L_ell with ``estimator="score-nocv"`` and ``"score"`` (the same
draws) and prints, over the gradient elements of the marginal means b and variances s2: the median
and least variance ratio (no CV / CV) and the median and largest excess kurtosis of the s2
gradient. For Poisson it also prints the kurtosis left when the exponential term is removed from
the black box (log p = y f - exp(f) - log y!, the part -exp(f) with its Gaussian expectation
-exp(b + s2 / 2) taken in closed form, i.e. a control variate with the exponential's own
expectation): what remains comes from y f alone.

    python -m experiments.score_cv_tails [--reps 20000]
"""
from __future__ import annotations

import argparse

import torch

from likelihoods import CallableLikelihood, Logistic, Poisson
from savigp.estimators import make_estimator
from savigp.posteriors.marginals import LatentMarginals

K, B, Q = 2, 12, 1


def _inputs():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(K, B, Q, generator=g, dtype=torch.float64).requires_grad_(True)
    var = (0.2 + torch.rand(K, B, Q, generator=g, dtype=torch.float64)).requires_grad_(True)
    return mean, var


def _estimates(lik, y, estimator, reps, seed=1):
    """(reps, 2 K B Q): the gradients wrt (b, s2) of R independent S = 2 estimates."""
    mean, var = _inputs()
    gen = torch.Generator().manual_seed(seed)
    w = torch.full((K,), 1.0 / K, dtype=torch.float64)
    out = torch.empty(reps, 2 * K * B * Q, dtype=torch.float64)
    for r in range(reps):
        v = make_estimator(estimator, lik)(lik, y, LatentMarginals(mean, var, w.log()), num_samples=2, generator=gen).value
        gm, gv = torch.autograd.grad(v, (mean, var))
        out[r] = torch.cat([gm.flatten(), gv.flatten()])
    return out


def _excess_kurtosis(x):
    x = x - x.mean(0)
    return (x ** 4).mean(0) / (x ** 2).mean(0) ** 2 - 3.0


def _report(name, nocv, cv):
    """Statistics over the elements whose gradient is random (a constant log p, e.g. y f - log y! at
    y = 0, gives exactly zero gradients: 0 / 0 there is left out)."""
    n = K * B * Q
    live = nocv.var(0) > 0
    ratio = nocv.var(0) / cv.var(0)
    kn, kc = _excess_kurtosis(nocv), _excess_kurtosis(cv)
    rb, rs = ratio[:n][live[:n]], ratio[n:][live[n:]]
    kn, kc = kn[n:][live[n:]], kc[n:][live[n:]]
    print(f"{name}: variance ratio no CV / CV: b median {float(rb.median()):.2f} least {float(rb.min()):.2f}; "
          f"s2 median {float(rs.median()):.2f} least {float(rs.min()):.2f} "
          f"({int(live[n:].sum())} of {n} elements random)")
    print(f"{name}: excess kurtosis of the s2 gradient: no CV median {float(kn.median()):.0f} max "
          f"{float(kn.max()):.0f}; CV median {float(kc.median()):.0f} max {float(kc.max()):.0f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    y = torch.where(torch.rand(B, 1, generator=torch.Generator().manual_seed(4)) > 0.5, 1.0, -1.0)
    _report("logistic", _estimates(Logistic(), y, "score-nocv", args.reps),
            _estimates(Logistic(), y, "score", args.reps))
    mean, var = _inputs()
    rate = torch.exp(mean.detach()[0, :, 0] + 0.5 * var.detach()[0, :, 0])
    counts = torch.poisson(rate, generator=torch.Generator().manual_seed(5))[:, None]
    lik = Poisson(learn_offset=False)
    _report("poisson", _estimates(lik, counts, "score-nocv", args.reps), _estimates(lik, counts, "score", args.reps))
    # the black box without its exponential term: y f - log y! (E[-exp f] is then in closed form)
    linear = CallableLikelihood(lambda yy, f: yy[:, 0] * f[..., 0] - torch.lgamma(yy[:, 0] + 1), backend="torch")
    _report("poisson, exp(f) in closed form", _estimates(linear, counts, "score-nocv", args.reps),
            _estimates(linear, counts, "score", args.reps))


if __name__ == "__main__":
    main()
