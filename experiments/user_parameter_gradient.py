"""How good and how costly the gradient of a numpy user function's learnable parameter is.

A numpy ``log_lik(y, f, r)`` given to :class:`likelihoods.CallableLikelihood` with
``params={"r": ...}`` gets d log p / d r by central differences (in log r for a positive
parameter). This prints

1. the relative error of that derivative, summed against random weights over S x B draws, to
   the closed-form derivative of a negative binomial in r (digamma terms), for several r;
2. the same for a real parameter and a vector one (ordinal cut-points), against torch autograd of
   the same function written in torch;
3. the time of one ``fit`` step with r learned against r fixed (the cost of the two extra calls
   per parameter), alternating the two in one process.

    python -m experiments.user_parameter_gradient            # about 20 s on one thread
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from experiments._common import add_threads_argument
import savigp
from likelihoods import CallableLikelihood
from savigp.testing.examples import nb_dlogp_dr, nb_numpy, ordinal_numpy, ordinal_torch


def nb_errors(rng) -> list:
    out = []
    for r in (0.5, 4.0, 50.0):
        y = rng.poisson(5.0, (200, 1)).astype(float)
        f = torch.as_tensor(1.5 + 0.7 * rng.standard_normal((100, 1, 200, 1)))
        w = torch.as_tensor(rng.standard_normal((100, 1, 200)))
        lik = CallableLikelihood(nb_numpy, backend="numpy", params={"r": r}, constraints={"r": "positive"})
        (lik.log_prob(torch.as_tensor(y), f) * w).sum().backward()
        raw = lik.raw_params["r"]
        rr = lik.parameter_values()["r"]
        exact = float((w.numpy() * nb_dlogp_dr(y, f.numpy(), rr)).sum()) * float(torch.sigmoid(raw.detach()))
        out.append((r, abs(raw.grad.item() - exact) / abs(exact)))
    return out


def ordinal_error(rng) -> float:
    y = rng.integers(0, 4, (200, 1)).astype(float)
    f = torch.as_tensor(0.5 * rng.standard_normal((100, 1, 200, 1)))
    w = torch.as_tensor(rng.standard_normal((100, 1, 200)))
    grads = []
    for fn, backend in ((ordinal_numpy, "numpy"), (ordinal_torch, "torch")):
        lik = CallableLikelihood(fn, backend=backend, params={"c0": -0.8, "gaps": [0.9, 1.1]},
                                 constraints={"gaps": "positive"})
        (lik.log_prob(torch.as_tensor(y), f) * w).sum().backward()
        grads.append(torch.cat([lik.raw_params["c0"].grad.reshape(1), lik.raw_params["gaps"].grad]))
    return float(((grads[0] - grads[1]).abs() / grads[1].abs()).max())


def step_times(rng, steps: int, rounds: int) -> tuple:
    X = rng.uniform(-2, 2, (500, 1))
    Y = rng.poisson(rng.gamma(4.0, np.exp(1.5 + np.sin(2 * X)) / 4.0)).astype(float)
    models = {}
    for kind in ("positive", "fixed"):
        lik = CallableLikelihood(nb_numpy, backend="numpy", params={"r": 2.0}, constraints={"r": kind})
        models[kind] = savigp.SAVIGP(X, Y, lik, num_inducing=20)
    times = {"positive": [], "fixed": []}
    for _ in range(rounds):
        for kind, model in models.items():
            t0 = time.perf_counter()
            savigp.fit(model, iterations=steps, num_samples=50, progress=False)
            times[kind].append(1e3 * (time.perf_counter() - t0) / steps)
    return statistics.median(times["positive"]), statistics.median(times["fixed"])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    add_threads_argument(p, 1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    for r, err in nb_errors(rng):
        print(f"negative binomial, r = {r:5.1f}: relative error of the central-difference gradient {err:.2e}")
    print(f"ordinal cut-points (c0 real, 2 gaps positive): largest relative error against autograd "
          f"{ordinal_error(rng):.2e}")
    learned, fixed = step_times(rng, a.steps, a.rounds)
    print(f"fit step, N = 500, M = 20, S = 50, numpy NB: r learned {learned:.1f} ms, r fixed {fixed:.1f} ms "
          f"(ratio {learned / fixed:.2f}; medians of {a.rounds} alternating rounds of {a.steps} steps)")


if __name__ == "__main__":
    main()
