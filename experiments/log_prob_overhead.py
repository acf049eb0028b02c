"""What the shape checks of ``Likelihood.log_prob`` cost per call (issue 16: the template method).

``likelihoods.Likelihood.log_prob`` checks ``y (B, P)``, ``f (..., B, Q)`` and the result ``(..., B)``
around the subclass's ``_log_prob``; the engine reaches it through
``likelihoods.base.log_prob_checked``. This prints microseconds per call, alternating in one
process (median of the rounds) three ways of computing the same values:

* ``bare``: ``lik._log_prob(y, f)`` with no check;
* ``before``: the checks the engine ran before the template (a Q check, the call, an output-shape
  check in ``savigp.estimators.sampling.checked_log_prob``), re-created here for the comparison;
* ``template``: ``log_prob_checked(lik, y, f)``;

for a likelihood that returns a precomputed tensor (the Python overhead alone) and for Logistic.

    OMP_NUM_THREADS=1 python -m experiments.log_prob_overhead     # about 20 s
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import Tensor

from experiments._common import add_cli_options
from likelihoods import Likelihood, Logistic
from likelihoods.base import log_prob_checked


class _Precomputed(Likelihood):
    """Returns a fixed tensor: what is left of a call is the Python overhead."""

    def __init__(self, out: Tensor):
        super().__init__()
        self.out = out

    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        return self.out


def _bare(lik, y, f):
    return lik._log_prob(y, f)


def _before(lik, y, f):
    Q = int(lik.num_latent)
    if f.shape[-1] != Q:
        raise ValueError("Q")
    out = lik._log_prob(y, f)
    if not isinstance(out, Tensor) or tuple(out.shape) != tuple(f.shape[:-1]):
        raise ValueError("shape")
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--batch", type=int, default=256, help="B")
    add_cli_options(p, "--samples", defaults={"--samples": 10})
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    B, S = args.batch, args.samples
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(B, 1, generator=g, dtype=torch.float64) > 0.5).double()
    f = torch.randn(S, 1, B, 1, generator=g, dtype=torch.float64)
    print(f"torch {torch.__version__}, 1 thread; f {tuple(f.shape)}; median of {args.rounds} alternated rounds")
    for lik, calls in ((_Precomputed(torch.zeros(S, 1, B, dtype=torch.float64)), 50_000), (Logistic(), 5_000)):
        times = {"bare": [], "before": [], "template": []}
        for _ in range(args.rounds):
            for name, fn in (("bare", _bare), ("before", _before), ("template", log_prob_checked)):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(lik, y, f)
                times[name].append((time.perf_counter() - t0) / calls * 1e6)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{type(lik).__name__:12s} us/call: bare {med['bare']:.2f}  before {med['before']:.2f}  "
              f"template {med['template']:.2f}  (template - before {med['template'] - med['before']:+.2f} us)")


if __name__ == "__main__":
    main()
