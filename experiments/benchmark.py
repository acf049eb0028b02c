"""Speed of one training step: savigp against GPyTorch SVGP and against the flop floor.

One *step* is what :func:`savigp.training.fit` does per mini-batch with Adam: its step runner
(``savigp.training.StepRunner``: zero the gradients, the ELBO on the batch, backward, Adam, and the
on-device bookkeeping of failures and the last good parameters; replayed from a CUDA graph on CUDA
unless ``--cuda-graphs off``), with fit's host read of the ELBO every ``log_every`` steps (every
step on the CPU, every 100 on CUDA), and for GPyTorch the usual SVGP step
(``-VariationalELBO(model(x), y)``, backward, Adam). Neither step reads its loss back otherwise.

Both libraries get identical data (N x D inputs, the same mini-batch indices at every step), the
same RBF ARD kernel initialization, the same M inducing inputs (learned), the same
full-Cholesky whitened q(u) (K = 1) and the same dtype and device. Steps of the two libraries
alternate inside one process (``--rounds`` rounds of ``--steps`` steps each, after
``--warmup`` warm-up steps); we report the median milliseconds per step over the rounds, so
their ratio survives the noise of a shared machine. Both use Adam with PyTorch's fused kernel,
and (``--allocator tuned``, the default) the process runs with :func:`savigp.tune_cpu_allocator`,
as ``savigp.fit`` does: it is process-wide, so GPyTorch's steps get it too and the ratio compares
the two steps' own work.

Likelihoods:

* ``gaussian``: savigp's closed-form ELL, GPyTorch's GaussianLikelihood (closed form).
* ``bernoulli``: savigp's Logistic as a black box (``estimator="score"``, S samples with
  leave-one-out control variates); GPyTorch: a Bernoulli likelihood with the same logistic link
  and GPyTorch's Monte Carlo expected log-likelihood with the same S samples (its generic
  ``Likelihood.expected_log_prob``: reparameterized draws from the diagonal marginals). With
  ``--gpytorch-bernoulli quadrature`` GPyTorch's own BernoulliLikelihood is used instead (probit
  link, 20-point Gauss-Hermite quadrature, its default).
* ``softmax``: Q latent functions, savigp's likelihoods.Softmax (score estimator, S samples);
  GPyTorch's SoftmaxLikelihood (S Monte Carlo samples) over an
  IndependentMultitaskVariationalStrategy (Q independent SVGPs).
* Mixtures are savigp only (GPyTorch has no mixture posterior): ``posterior="diag-u"`` is the paper's
  mog (diagonal over u), ``"diag"`` diagonal in whitened coordinates, ``"full"`` full
  Cholesky factors (K = 2 full: eq. (8) in its general form).

The *flop floor* of a step is ``Q (M^3 + 6 M^2 B)`` flops (Cholesky-related M^3 work plus
forward and backward triangular products with the B cross-covariance columns); ``GFLOP/s`` is
that count divided by the measured time and ``floor x`` is the time divided by the floor time
at the float matmul peak measured in the same run (largest of several square GEMMs).
The *dense* time (``DenseStep``, K = 1 full posteriors only) is savigp's own dense linear algebra
for the step -- the Cholesky factorization, triangular solves and blocked products of the fused
moments, forward and backward -- called back to back with nothing else, timed in the same
alternating rounds as the two libraries. ``savigp_dense_x`` (savigp / dense) is what everything
else costs (kernel, likelihood, elementwise passes, autograd and the optimizer);
``dense_floor_x`` (dense / floor) is how far the BLAS and LAPACK calls themselves run from the
matmul peak at these shapes. With ``--phases`` the dense calls are also timed one by one, each
beside its useful flops and GFLOP/s (:func:`dense_pieces`): which LAPACK or BLAS call runs below
the peak.
Peak memory is the largest amount of memory torch allocated during one step above what was
allocated before it (torch profiler memory events on CPU; ``max_memory_allocated`` on CUDA).
Each library's step is also profiled (``torch.profiler``, a few steps after the timed rounds,
``--no-profile`` to skip): ``*_ops`` = ATen operator calls per step (nested calls included),
``*_reads`` = host reads of a tensor's value per step (``aten::_local_scalar_dense``: ``.item()``,
``float()``, ``bool()``), and on CUDA ``*_busy_ms`` = the time per step the GPU runs kernels, copies
or memsets (the union of their intervals), ``*_kernels`` = device kernels per step and ``*_syncs`` =
stream/event synchronizations per step (the host waiting for the device).

Usage::

    python -m experiments.benchmark --quick                 # a few configurations, < ~1 min
    python -m experiments.benchmark                         # full sweep over M, B, S, K and Q
    python -m experiments.benchmark --device cuda --dtype float32 --out results/benchmark_gpu
    python -m experiments.benchmark --composite             # rbf + periodic * rbf against GPyTorch's, beside the RBF
    python -m experiments.benchmark --kernel-parts          # the composite's kernel work against its parts'

Outputs in ``--out`` (default ``results/benchmark``): ``benchmark.csv``, ``benchmark.md`` and
``benchmark.png`` (time against M, B, S, K and Q).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, asdict, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from experiments._common import (add_device_arguments, add_out_argument, add_seed_argument,
                                 add_threads_argument, gpytorch_svgp, pyplot, save_figure,
                                 write_csv_atomic, write_text_atomic)
from savigp import SAVIGP
from savigp.kernels import RBF, Periodic
from savigp.training import WARMUP_STEPS, StepRunner, default_log_every, graph_decision, make_adam
import likelihoods as L

try:  # GPyTorch is only in the ``benchmark`` extra
    import gpytorch  # noqa: F401

    HAVE_GPYTORCH = True
except Exception:  # pragma: no cover - depends on the environment
    HAVE_GPYTORCH = False


# ---------------------------------------------------------------------------------------- configs
@dataclass
class Config:
    """One benchmark configuration."""

    lik: str  # "gaussian" | "bernoulli" | "softmax"
    M: int
    B: int
    S: int = 100
    K: int = 1
    Q: int = 1
    posterior: str = "full"  # "full" | "diag-u" (the paper's mog, diagonal over u) | "diag" (whitened)
    G: int = 0  # size of the orthogonally decoupled mean basis (savigp only; 0: none)
    sweep: str = ""  # which plot panel(s) it belongs to: "M", "B", "S", "K", "Q"
    D: int = 0  # input dimension (0: the run's --input-dim)
    ard: bool = True  # one length-scale per input dimension (False: one per latent function)
    learn_inducing: bool = True
    est: str = ""  # savigp's estimator ("": closed form for the Gaussian, else the score function)
    shared: bool = False  # one kernel and one set of inducing inputs for the Q latent functions
    link: str = "logistic"  # the Bernoulli likelihood's link: "logistic" or "probit" (GPyTorch's BernoulliLikelihood)
    kernel: str = "rbf"  # "rbf", or "composite": rbf + periodic * rbf (GPyTorch: ScaleKernel(RBF) + ScaleKernel(Periodic * RBF))

    @property
    def estimator(self) -> str:
        return self.est or ("closed-form" if self.lik == "gaussian" else "score")

    @property
    def label(self) -> str:
        post = f"K={self.K} {self.posterior}" + (f" G={self.G}" if self.G else "")
        s = "" if self.lik == "gaussian" else f" S={self.S}"
        extra = (f" D={self.D}" if self.D else "") + ("" if self.ard else " iso") + (
            "" if self.learn_inducing else " Z-fixed") + (f" {self.est}" if self.est else "") + (
            " shared" if self.shared else "") + (" probit" if self.link == "probit" else "") + (
            f" {self.kernel}" if self.kernel != "rbf" else "")
        return f"{self.lik} Q={self.Q} M={self.M} B={self.B}{s} {post}{extra}"

    @property
    def gpytorch_ok(self) -> bool:
        """GPyTorch has the family: one full Gaussian (CholeskyVariationalDistribution) or one
        mean-field diagonal (MeanFieldVariationalDistribution; savigp's whitened ``diag``), no mean head."""
        return self.K == 1 and self.posterior in ("full", "diag") and not self.G


def quick_configs() -> list[Config]:
    return [
        Config("gaussian", 100, 1000, sweep="M"),
        Config("bernoulli", 500, 1000, S=100, sweep="M"),
        Config("bernoulli", 500, 1000, S=100, K=2, posterior="diag-u", sweep="K"),
        Config("softmax", 100, 1000, S=100, Q=10, sweep="Q"),
    ]


def full_configs() -> list[Config]:
    cfg: list[Config] = []
    for lik in ("gaussian", "bernoulli"):
        for M in (100, 250, 500, 1000):
            cfg.append(Config(lik, M, 1000, S=100, sweep="M"))
        for B in (100, 10000):
            cfg.append(Config(lik, 500, B, S=100, sweep="B"))
    for S in (10, 1000):
        cfg.append(Config("bernoulli", 500, 1000, S=S, sweep="S"))
    cfg.append(Config("bernoulli", 500, 1000, S=100, K=1, posterior="diag-u", sweep="K"))
    cfg.append(Config("bernoulli", 500, 1000, S=100, K=2, posterior="diag-u", sweep="K"))
    cfg.append(Config("bernoulli", 500, 1000, S=100, K=2, posterior="diag", sweep="K"))
    cfg.append(Config("bernoulli", 500, 1000, S=100, K=2, posterior="full", sweep="K"))
    for Q in (3, 10):
        cfg.append(Config("softmax", 100, 1000, S=100, Q=Q, sweep="Q"))
    cfg.append(Config("softmax", 250, 1000, S=100, Q=10, sweep="Q"))
    cfg += [c for c in composite_configs() if c.kernel != "rbf"]
    return cfg


def target_configs() -> list[Config]:
    """The acceptance configurations of the speed issue: full Gaussian q(u), black-box Bernoulli
    (score estimator, S = 100), M = 500 and 1000 at B = 1000 (plus the Gaussian at M = 500)."""
    return [
        Config("bernoulli", 500, 1000, S=100, sweep="M"),
        Config("bernoulli", 1000, 1000, S=100, sweep="M"),
        Config("gaussian", 500, 1000, sweep="M"),
        mnist_config(),
    ]


def composite_configs() -> list[Config]:
    """A composite kernel, rbf + periodic * rbf over all D columns (ARD), in the step at M = 500,
    B = 1000, beside the RBF alone (issue 42): savigp's expression against GPyTorch's
    ``ScaleKernel(RBFKernel()) + ScaleKernel(PeriodicKernel() * RBFKernel())`` in the same SVGP."""
    return [Config("gaussian", 500, 1000, sweep="kernel"), Config("gaussian", 500, 1000, kernel="composite", sweep="kernel"),
            Config("bernoulli", 500, 1000, S=100, sweep="kernel"),
            Config("bernoulli", 500, 1000, S=100, kernel="composite", sweep="kernel")]


def mnist_config() -> Config:
    """The step of ``experiments/mnist.py``'s ``cpu`` setting for MNIST (Bonilla et al. 2019, §9.4.1):
    softmax over Q = 10 latent functions, D = 784 inputs, one isotropic RBF kernel and one set of
    M = 1000 learned inducing inputs shared by the latent functions, a diagonal (whitened) q(u),
    B = 1000, the reparameterization estimator with S = 10 samples. GPyTorch gets the same structure:
    an unbatched kernel and Z, ``MeanFieldVariationalDistribution`` batched over Q in an
    ``IndependentMultitaskVariationalStrategy``, its ``SoftmaxLikelihood`` with S samples."""
    return Config("softmax", 1000, 1000, S=10, Q=10, D=784, posterior="diag", ard=False, learn_inducing=True,
                  est="reparam", shared=True, sweep="mnist")


def mnist_binary_config() -> Config:
    """The step of ``experiments/mnist.py``'s ``cpu`` setting for mnist-b (odd against even digits):
    Q = 1, D = 784, one isotropic RBF kernel, M = 2400 fixed (k-means) inducing inputs, full q(u),
    B = 1000, the probit likelihood with savigp's Gauss-Hermite estimator of the expected
    log-likelihood (no Monte Carlo; S is unused). GPyTorch: one SVGP with its BernoulliLikelihood
    (probit, Gauss-Hermite quadrature), the same structure."""
    return Config("bernoulli", 2400, 1000, S=100, D=784, ard=False, learn_inducing=False, est="quadrature",
                  link="probit", sweep="mnist")


def mnist_per_latent_config() -> Config:
    """The paper's structure of the MNIST step (the earlier default of ``experiments/mnist.py``): one
    isotropic RBF kernel per latent function, M = 500 fixed inducing inputs (the same for all),
    full Cholesky q(u), otherwise as :func:`mnist_config` (GPyTorch: Q independent SVGPs)."""
    return Config("softmax", 500, 1000, S=10, Q=10, D=784, ard=False, learn_inducing=False, est="reparam",
                  sweep="mnist")


def gpu_target_configs() -> list[Config]:
    """The GPU issue's acceptance configurations (besides the full sweep): the black-box Bernoulli
    step at M = 1000, B = 10^4, S = 100, and the decoupled mean head at M = 500, G = 20000,
    B = 10^4 (savigp only). Run on CUDA and on the CPU for the speed-up."""
    return [
        Config("bernoulli", 1000, 10000, S=100, sweep="B"),
        Config("gaussian", 500, 10000, G=20000, sweep="B"),
    ]


def smallest_config() -> Config:
    """What the smoke test runs."""
    return Config("bernoulli", 20, 64, S=10, sweep="M")


# ---------------------------------------------------------------------------------------- data
class Data:
    """Synthetic inputs and targets for every likelihood, shared by both libraries."""

    def __init__(self, N: int, D: int, num_classes: int, seed: int, dtype, device):
        g = torch.Generator().manual_seed(seed)
        X = torch.randn(N, D, dtype=torch.float64, generator=g)
        w = torch.randn(D, dtype=torch.float64, generator=g) / math.sqrt(D)
        f = torch.sin(2.0 * X @ w) + 0.5 * torch.cos(X[:, 0])
        self.N, self.D = N, D
        self.X = X.to(dtype=dtype, device=device)
        self.y_gauss = (f + 0.1 * torch.randn(N, dtype=torch.float64, generator=g)).to(dtype=dtype, device=device)
        self.y_binary = (f + 0.3 * torch.randn(N, dtype=torch.float64, generator=g) > 0).to(dtype=dtype, device=device)
        self._classes: dict[int, torch.Tensor] = {}
        self._g = g
        self.dtype, self.device = dtype, device
        self.lengthscale = float(math.sqrt(D))  # savigp's default: sqrt(D) * std(X), std ~ 1

    def classes(self, C: int) -> torch.Tensor:
        if C not in self._classes:
            g = torch.Generator().manual_seed(1000 + C)
            W = torch.randn(self.D, C, dtype=torch.float64, generator=g)
            logits = torch.sin(self.X.cpu().double() @ W) * 3.0
            self._classes[C] = logits.argmax(-1).to(self.device)
        return self._classes[C]

    def inducing(self, M: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        idx = torch.randperm(self.N, generator=g)[:M]
        return self.X[idx.to(self.device)].clone()


# ---------------------------------------------------------------------------------------- steps
def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


#: Both libraries' steps use the same optimizer: Adam with PyTorch's fused kernel (savigp's side is
#: ``savigp.training.make_adam``, what ``fit`` uses; GPyTorch's gets the same flag).
ADAM_OPTIONS = {"fused": True}


class SavigpStep:
    """One savigp training step, as in :func:`savigp.training.fit`."""

    def __init__(self, cfg: Config, data: Data, Z: torch.Tensor, lr: float = 0.01, seed: int = 0,
                 cuda_graphs: bool = True):
        D = data.D
        if cfg.lik == "gaussian":
            lik, Y = L.Gaussian(variance=1.0), data.y_gauss
        elif cfg.lik == "bernoulli":
            lik, Y = (L.Probit() if cfg.link == "probit" else L.Logistic()), data.y_binary
        elif cfg.lik == "softmax":
            lik, Y = _softmax_likelihood(cfg.Q), data.classes(cfg.Q).to(data.dtype)
        else:
            raise ValueError(cfg.lik)
        kernel = savigp_kernel(cfg, D, data.lengthscale)
        # the model keeps X/Y as buffers; build it on the CPU copy then move (constructor validates targets)
        self.model = SAVIGP(data.X.cpu(), Y.cpu(), lik, kernel, inducing_inputs=Z.cpu(), posterior=cfg.posterior,
                            num_components=cfg.K, mean_basis_size=cfg.G, dtype=data.dtype, device=data.device,
                            seed=seed, learn_inducing=cfg.learn_inducing)
        device = torch.device(data.device)
        graphs, _ = graph_decision(None if cuda_graphs else False, device=device, optimizer="adam",
                                   estimator=cfg.estimator, likelihood=lik, joint=False,
                                   mean_head=self.model.head)
        self.opt = make_adam([p for p in self.model.parameters() if p.requires_grad], lr, capturable=graphs)
        # as fit: the draws from a CPU generator on the CPU, from one on the device elsewhere
        gen = torch.Generator(device=device).manual_seed(seed)
        self.runner = StepRunner(self.model, self.opt, num_samples=cfg.S, estimator=cfg.estimator,
                                 generator=gen, window=default_log_every(device), graphs=graphs)
        self.cfg = cfg

    def __call__(self, batch: torch.Tensor) -> None:
        self.runner.run(batch)
        if self.runner.filled == len(self.runner.values):  # fit's read every log_every steps
            info = self.runner.read()
            if not info["ok"]:
                raise FloatingPointError(f"savigp step {info['step']} was not finite: {info['terms']}")


def savigp_kernel(cfg: Config, D: int, lengthscale: float):
    """The step's kernel: an RBF (ARD or isotropic), or with ``cfg.kernel == "composite"``
    rbf + periodic * rbf (period 1, the periodic length-scale ``lengthscale``, every part over all D
    columns), initialized as :func:`experiments._common.gpytorch_kernel`'s."""
    Q = 1 if cfg.shared else cfg.Q
    kernel = RBF(D, Q, lengthscale=lengthscale, variance=1.0, ard=cfg.ard)
    if cfg.kernel == "composite":
        kernel = kernel + Periodic(D, Q, lengthscale=lengthscale, period=1.0, ard=cfg.ard) * RBF(
            D, Q, lengthscale=lengthscale, ard=cfg.ard)
    elif cfg.kernel != "rbf":
        raise ValueError(f"unknown benchmark kernel {cfg.kernel!r}")
    return kernel


def _logistic_mc_likelihood():
    """GPyTorch Bernoulli likelihood with a logistic link whose expected log-likelihood is GPyTorch's
    generic Monte Carlo estimate with ``num_likelihood_samples`` draws (S, as savigp's)."""
    import gpytorch

    class LogisticBernoulliMC(gpytorch.likelihoods.Likelihood):
        def forward(self, function_samples, *args, **kwargs):
            return torch.distributions.Bernoulli(logits=function_samples)

        def expected_log_prob(self, observations, function_dist, *args, **kwargs):
            return gpytorch.likelihoods.Likelihood.expected_log_prob(self, observations, function_dist, *args, **kwargs)

    return LogisticBernoulliMC()


def _softmax_likelihood(Q: int):
    if hasattr(L, "Softmax"):
        return L.Softmax(Q)

    def log_softmax_lik(y, f):  # pragma: no cover - fallback while likelihoods.Softmax does not exist
        idx = y[:, 0].long().expand(f.shape[:-1]).unsqueeze(-1)
        return torch.gather(torch.log_softmax(f, -1), -1, idx).squeeze(-1)

    return L.CallableLikelihood(log_softmax_lik, num_latent=Q, backend="torch", task="classification")


class GPyTorchStep:
    """One GPyTorch SVGP training step (VariationalELBO, Adam), on the same data and initialization."""

    def __init__(self, cfg: Config, data: Data, Z: torch.Tensor, lr: float = 0.01, seed: int = 0,
                 bernoulli: str = "mc"):
        import gpytorch

        torch.manual_seed(seed)
        Q = cfg.Q
        model = gpytorch_svgp(Z, Q if cfg.lik == "softmax" else 0, ard=cfg.ard, learn_inducing=cfg.learn_inducing,
                              shared=cfg.shared, diagonal=cfg.posterior == "diag", kernel=cfg.kernel,
                              lengthscale=data.lengthscale)
        if cfg.lik == "gaussian":
            lik, self.y = gpytorch.likelihoods.GaussianLikelihood(), data.y_gauss
            lik.noise = 1.0
        elif cfg.lik == "bernoulli":
            lik = (gpytorch.likelihoods.BernoulliLikelihood() if bernoulli == "quadrature" or cfg.link == "probit"
                   else _logistic_mc_likelihood())
            self.y = data.y_binary
        else:
            lik = gpytorch.likelihoods.SoftmaxLikelihood(num_features=Q, num_classes=Q, mixing_weights=False)
            self.y = data.classes(Q)
        self.model = model.to(dtype=data.dtype, device=data.device)
        self.lik = lik.to(dtype=data.dtype, device=data.device)
        self.mll = gpytorch.mlls.VariationalELBO(self.lik, self.model, num_data=data.N)
        self.opt = torch.optim.Adam(list(self.model.parameters()) + list(self.lik.parameters()), lr=lr,
                                    **ADAM_OPTIONS)
        self.X = data.X
        self.cfg = cfg
        self._settings = gpytorch.settings.num_likelihood_samples(cfg.S)

    def __call__(self, batch: torch.Tensor) -> None:
        with self._settings:
            self.opt.zero_grad()
            out = self.model(self.X[batch])
            loss = -self.mll(out, self.y[batch])
            loss.backward()
            self.opt.step()


class DenseStep:
    """The dense linear algebra of one savigp step alone: what the step would cost with no kernel,
    likelihood, elementwise or framework work at all (K = 1 full posterior, batched over Q), in the
    form :class:`savigp.posteriors._autograd._WhitenedMoments` picks for M and B, called back to back with
    savigp's own blocked helpers. Both forms: Cholesky of K_zz and V = L^-1 K_zx forward, and the
    K_zz adjoint L^-T Phi L^-1 (two solves) backward; in between,

    * P form (B large): P = L_s L_s^T - I, R = L^-T P, R V; backward dP = V diag(g) V^T,
      tril(dP L_s), P dP;
    * A form: A = L_s^T V; backward tril(V dA^T), L_s dA, L^-T Gbar, Gbar V^T.

    The kernel matrices, the factor L_s and the weights g are fixed (the batch is ignored)."""

    def __init__(self, cfg: Config, data: Data, Z: torch.Tensor, seed: int = 0):
        from savigp.kernels.stationary import RBF as _RBF

        g = torch.Generator().manual_seed(seed)
        Q, M, B = cfg.Q, cfg.M, cfg.B
        kern = _RBF(data.D, Q, lengthscale=data.lengthscale).to(dtype=data.dtype, device=data.device)
        with torch.no_grad():
            Kzz = kern(Z, Z)
            self.Kzz = Kzz + 1e-6 * torch.eye(M, dtype=data.dtype, device=data.device)
            self.Kzx = kern(Z, data.X[:B]).contiguous()
        Ls = 0.1 * torch.randn(1, Q, M, M, dtype=torch.float64, generator=g).tril(-1) + torch.eye(M, dtype=torch.float64)
        self.Ls = Ls.to(dtype=data.dtype, device=data.device)
        self.g = torch.randn(1, Q, 1, B, dtype=torch.float64, generator=g).to(dtype=data.dtype, device=data.device)

    @staticmethod
    def applies(cfg: Config) -> bool:
        return cfg.K == 1 and cfg.posterior == "full" and not cfg.shared

    def __call__(self, batch: torch.Tensor) -> float:
        return self.run()

    def run(self, lap: Optional[Callable[[str, float], None]] = None) -> float:
        """The calls back to back; ``lap(name, flops)`` after each (for :func:`dense_pieces`), where
        ``flops`` is the call's useful count: what a triangular or symmetric kernel needs at least
        (M^3 / 3 for the Cholesky factorization, M^2 N for a triangular solve or product with N
        columns, M^2 B for V diag(g) V^T, whose result is symmetric)."""
        from savigp.linalg import triangular as T
        from savigp.posteriors import use_middle_form

        lap = lap or (lambda name, flops: None)
        Q, M, B = self.Kzx.shape
        with torch.no_grad():
            L = torch.linalg.cholesky_ex(self.Kzz)[0]
            lap("Cholesky of K_zz", Q * M ** 3 / 3)
            V = T.solve_lower(L, self.Kzx)
            lap("V = L^-1 K_zx (solve)", Q * M * M * B)
            if not use_middle_form(M, B, 1):
                return self._a_form(L, V, lap)
            P = T.lower_factor_gram(self.Ls)
            P.diagonal(dim1=-2, dim2=-1).sub_(1.0)
            lap("P = L_s L_s^T - I", Q * M ** 3 / 3)
            R = T.solve_lower(L, P, transpose=True)
            lap("R = L^-T P (solve)", Q * M ** 3)
            RV = torch.matmul(R, V)
            lap("R V (product)", Q * 2 * M * M * B)
            dP = T.lower_of_product(V * self.g, V.unsqueeze(0), symmetric=True)
            lap("dP = V diag(g) V^T", Q * M * M * B)
            d_scale = T.lower_of_sym_times_lower(dP, self.Ls)
            lap("tril(dP L_s)", Q * 2 * M ** 3 / 3)
            X = T.lower_of_product(P, dP, upper="any")[0].tril_()
            lap("tril(P dP)", Q * M ** 3)
            d_kzz = torch.linalg.solve_triangular(L, T.solve_lower(L, X, transpose=True), upper=False, left=False)
            lap("K_zz adjoint L^-T Phi L^-1 (2 solves)", Q * 2 * M ** 3)
        return float(RV[0, 0, 0, 0] + d_scale[0, 0, 0, 0] + d_kzz[0, 0, 0])

    def _a_form(self, L: torch.Tensor, V: torch.Tensor, lap: Callable[[str, float], None]) -> float:
        from savigp.linalg import triangular as T

        Q, M, B = self.Kzx.shape
        A = T.upper_t_mm(self.Ls, V.unsqueeze(0))
        lap("A = L_s^T V (product)", Q * M * M * B)
        dA = A * self.g
        d_scale = T.lower_of_product(V.unsqueeze(0), dA)
        lap("tril(V dA^T)", Q * M * M * B)
        Gbar = T.lower_mm(self.Ls, dA)[0]
        lap("L_s dA (product)", Q * M * M * B)
        d_kzx = T.solve_lower(L, Gbar, transpose=True)
        lap("L^-T Gbar (solve)", Q * M * M * B)
        X = T.lower_of_product(Gbar, V, upper="any").tril_()
        lap("tril(Gbar V^T)", Q * M * M * B)
        d_kzz = torch.linalg.solve_triangular(L, T.solve_lower(L, X, transpose=True), upper=False, left=False)
        lap("K_zz adjoint L^-T Phi L^-1 (2 solves)", Q * 2 * M ** 3)
        return float(d_scale[0, 0, 0, 0] + d_kzx[0, 0, 0] + d_kzz[0, 0, 0])


def dense_pieces(step: DenseStep, device, repeats: int = 9) -> list[dict]:
    """Each call of :class:`DenseStep` timed on its own in the sequence (synchronized timers,
    median over ``repeats`` runs after one warm-up): ``[{"piece", "ms", "gflop"}]``. It shows
    which LAPACK and BLAS calls keep the dense work from the matmul peak at these shapes."""
    times: dict[str, list[float]] = {}
    flops: dict[str, float] = {}
    for r in range(repeats + 1):
        marks = [time.perf_counter()]

        def lap(name: str, f: float) -> None:
            _sync(device)
            marks.append(time.perf_counter())
            if r:
                times.setdefault(name, []).append(1e3 * (marks[-1] - marks[-2]))
                flops[name] = f

        _sync(device)
        marks[0] = time.perf_counter()
        step.run(lap)
    return [{"piece": k, "ms": statistics.median(v), "gflop": flops[k] / 1e9} for k, v in times.items()]


def format_pieces(pieces: list[dict], label: str, peak_gflops: float, floor_ms: float) -> str:
    total_ms = sum(p["ms"] for p in pieces)
    total_gflop = sum(p["gflop"] for p in pieces)
    lines = [f"dense linear algebra of the step call by call ({label}); medians, GFLOP = the call's useful flops:",
             f"  {'call':40s} {'ms':>7s} {'GFLOP':>7s} {'GFLOP/s':>8s}"]
    for p in pieces:
        rate = p["gflop"] / (p["ms"] / 1e3) if p["ms"] > 0 else float("nan")
        lines.append(f"  {p['piece']:40s} {p['ms']:7.2f} {p['gflop']:7.3f} {rate:8.1f}")
    lines.append(f"  {'sum':40s} {total_ms:7.2f} {total_gflop:7.3f} {total_gflop / (total_ms / 1e3):8.1f}")
    lines.append(f"  at the matmul peak ({peak_gflops:.1f} GFLOP/s) these flops take {1e3 * total_gflop / peak_gflops:.2f} ms; "
                 f"the flop floor is {floor_ms:.2f} ms; the calls as timed take {total_ms / floor_ms:.2f}x the floor")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- measuring
def matmul_peak(dtype, device, sizes=(1000, 2000), repeats: int = 3) -> float:
    """Largest GFLOP/s of square float matmuls (the machine's practical peak)."""
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        a @ b
        _sync(device)
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            _sync(device)
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def floor_flops(cfg: Config) -> float:
    """The dense flops of one step, a floor on its time at the machine's matmul peak.

    One latent function per kernel, full q(u): Q (M^3 + 6 M^2 B) (the factorization, the moments'
    triangular products and their adjoints). A kernel shared by the Q latent functions with a
    diagonal q(u): M^3 / 3 (one Cholesky factorization), 3 M^2 B (V = L^-1 K_zx and the two
    backward solves, once for all Q) and, with D given, the kernel's distance products: 2 M B D for
    K_zx, and with learned inducing inputs 2 M^2 D for K_zz (fixed ones: computed once) and the same
    two again backward for the inputs' gradient. (A shared kernel with a full q(u) gets the first
    formula, which counts the factorization Q times: no configuration here has one.)"""
    if cfg.shared and cfg.posterior == "diag":
        kernel = 2.0 * cfg.M * cfg.D * (cfg.B + cfg.M) * 2 if cfg.learn_inducing else 2.0 * cfg.M * cfg.B * cfg.D
        return cfg.M ** 3 / 3.0 + 3.0 * cfg.M ** 2 * cfg.B + kernel
    return cfg.Q * (cfg.M ** 3 + 6.0 * cfg.M ** 2 * cfg.B)


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the C++ profiler's start/stop lines on file descriptor 2."""
    try:
        fd = os.dup(2)
    except OSError:  # pragma: no cover
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)


def profile_steps(step: Callable, batches: list, device) -> dict:
    """Per step over ``batches``: ATen operator calls, host reads of tensor values, and on CUDA the
    GPU-busy milliseconds (union of kernel, copy and memset intervals), kernels and stream/event
    synchronizations (torch.profiler)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    _sync(device)
    with _quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            for b in batches:
                step(b)
        _sync(device)
    events = prof.events()
    n = len(batches)
    out = {"ops": sum(e.name.startswith("aten::") for e in events if e.device_type == DeviceType.CPU) / n,
           "reads": sum(e.name == "aten::_local_scalar_dense" for e in events) / n}
    if cuda:
        spans = sorted((e.time_range.start, e.time_range.end) for e in events if e.device_type == DeviceType.CUDA)
        busy, end = 0.0, -math.inf
        for a, b in spans:  # the union of the device intervals (us)
            if b > end:
                busy += b - max(a, end)
                end = b
        out.update(busy_ms=busy / 1e3 / n, kernels=len(spans) / n,
                   syncs=sum(e.name in ("cudaStreamSynchronize", "cudaEventSynchronize") for e in events) / n)
    return out


def peak_step_memory(step: Callable, batch: torch.Tensor, device) -> float:
    """MiB torch allocates at the peak of one step, above what was allocated before it."""
    if torch.device(device).type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step(batch)
        _sync(device)
        return (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step(batch)
    events = sorted(((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]"), key=lambda t: t[0])
    cur = peak = 0
    for _, nb in events:
        cur += nb
        peak = max(peak, cur)
    return peak / 2 ** 20


#: the phases of :func:`phase_profile`, in the order of the step
PHASES = ("kernel", "factorization", "moments (solves)", "ELL: sampling", "ELL: likelihood", "KL", "backward",
          "optimizer")


def phase_profile(step: "SavigpStep", batches: list, seed: int = 0) -> dict:
    """Milliseconds per phase of savigp's training step (medians over ``batches``), timed with
    synchronized timers around the pieces the step is made of, called in the order of
    :meth:`savigp.SAVIGP.elbo` (K = 1 families with a fused prior, no mean head):

    kernel (K_zz, K_zx, diag), factorization (Cholesky of K_zz), moments (the whitened marginals:
    triangular solves and blocked products), ELL (the estimator: the Monte Carlo draws, timed alone
    with a generator of the same seed, and the rest: likelihood and reductions), KL (entropy and
    cross entropy), backward (all of the step's backward passes), optimizer (Adam).

    The backward pass is split by autograd node in ``backward_nodes`` (torch.profiler, one more
    step): kernel (the RBF's hand-written backward and its inputs'), moments (the fused whitened
    moments), the rest. ``elbo`` is the ELBO of the last step, for checking that the pieces make
    the model's ELBO; ``peak_mib`` the most memory torch allocated above the start of a step.
    """
    from torch.profiler import ProfilerActivity, profile

    from savigp.estimators import make_estimator
    from savigp.estimators.sampling import standard_normal
    from savigp.posteriors.base import InducingPrior

    model, opt, cfg = step.model, step.opt, step.cfg
    post, device = model.posterior, model.device
    gen = torch.Generator(device=device).manual_seed(seed)
    times: dict[str, list[float]] = {k: [] for k in PHASES}
    out: dict = {}

    def one(batch, timed: bool):
        marks = [time.perf_counter()]

        def lap(name):
            _sync(device)
            marks.append(time.perf_counter())
            if timed:
                times[name].append(1e3 * (marks[-1] - marks[-2]))

        opt.zero_grad(set_to_none=True)
        X, Y = model.train_x[batch], model.train_y[batch]
        Z = model.kernel_inducing()
        Kzz, Kzx, kxx = model.kernel(Z, Z), model.kernel(Z, X), model.kernel.diag(X)
        lap("kernel")
        with torch.no_grad():
            Lzz, jitter = model._factorize(Kzz.detach())
        prior = InducingPrior(Lzz, Kzz, jitter)
        lap("factorization")
        state = post.evaluation_state(prior)
        q = post.marginals(prior, Kzx, kxx, state).shifted(model.prior_mean)
        lap("moments (solves)")
        standard_normal((cfg.S,) + tuple(q.mean.shape), q.mean, torch.Generator(device=device).manual_seed(seed))
        lap("ELL: sampling")
        ell = make_estimator(cfg.estimator, model.likelihood)(model.likelihood, Y, q, num_samples=cfg.S,
                                                              scale=model.num_data / X.shape[0], generator=gen)
        lap("ELL: likelihood")
        ent, cross = post.kl_terms(prior, state, gen)
        elbo = ell.value + ent + cross
        lap("KL")
        (-elbo).backward()
        lap("backward")
        opt.step()
        lap("optimizer")
        return float(elbo.detach())

    for b in batches:
        out["elbo"] = one(b, True)
    # the sampling lap drew the step's draws a second time: the likelihood's share is the estimator's
    # time less the draws' (the estimator draws its own)
    times["ELL: likelihood"] = [a - b for a, b in zip(times["ELL: likelihood"], times["ELL: sampling"])]
    out["ms"] = {k: statistics.median(v) for k, v in times.items()}
    with _quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=torch.device(device).type == "cpu") as prof:
            one(batches[0], False)
    nodes = {"kernel": 0.0, "moments": 0.0, "other": 0.0}
    for e in prof.key_averages():
        if e.key.startswith("autograd::engine::evaluate_function: "):
            name = e.key.split(": ", 1)[1]
            ms = e.cpu_time_total / 1e3  # totals include nested calls; the nodes themselves do not nest
            if "RBF" in name:
                nodes["kernel"] += ms
            elif "Moments" in name:
                nodes["moments"] += ms
            else:
                nodes["other"] += ms
    out["backward_nodes"] = nodes
    out["peak_mib"] = peak_step_memory(lambda b: one(b, False), batches[0], device)
    return out


def kernel_part_times(D: int, M: int = 500, B: int = 1000, *, dtype=torch.float64, device="cpu", rounds: int = 15,
                      repeats: int = 3, seed: int = 0) -> dict:
    """Milliseconds of a step's kernel work, forward and backward, for the composite rbf + periodic * rbf
    and for each of its parts alone: K_zz of learned inducing inputs Z ``(1, M, D)``, K_zx against B
    inputs and diag K_xx, then the gradients in every hyper-parameter and Z for fixed upstream
    gradients (``torch.autograd.grad``; no reduction pass added). The kernels run in alternating order
    within each round (``repeats`` calls each), and the medians over ``rounds`` are reported, so that a
    busy machine's noise falls alike on all of them. ``sum of parts`` is rbf + periodic + rbf (the
    composite's three leaves alone); ``composite / sum of parts`` is what the algebra (one elementwise
    sum and one product per matrix, and their backward) adds."""
    g = torch.Generator().manual_seed(seed)
    like = dict(dtype=dtype, device=device)
    X = torch.randn(B, D, generator=g, dtype=torch.float64).to(**like)
    Z = torch.randn(1, M, D, generator=g, dtype=torch.float64).to(**like).requires_grad_(True)
    grads = [torch.randn(1, M, M, generator=g, dtype=torch.float64).to(**like),
             torch.randn(1, M, B, generator=g, dtype=torch.float64).to(**like),
             torch.randn(1, B, generator=g, dtype=torch.float64).to(**like)]
    ls = math.sqrt(D)
    rbf, periodic, rbf2 = (RBF(D, 1, lengthscale=ls), Periodic(D, 1, lengthscale=ls, period=1.0),
                           RBF(D, 1, lengthscale=ls))
    kernels = {"rbf": rbf, "periodic": periodic, "periodic * rbf": periodic * rbf2, "rbf + periodic * rbf": rbf + periodic * rbf2}
    for k in kernels.values():
        k.to(**like)

    def work(k):
        outs = [k(Z, Z), k(Z, X), k.diag(X)]
        torch.autograd.grad(outs, [Z, *k.parameters()], grad_outputs=grads)

    times: dict[str, list[float]] = {name: [] for name in kernels}
    for name in kernels:  # warm-up
        work(kernels[name])
    for r in range(rounds):
        order = list(kernels) if r % 2 == 0 else list(reversed(kernels))
        for name in order:
            _sync(device)
            t = time.perf_counter()
            for _ in range(repeats):
                work(kernels[name])
            _sync(device)
            times[name].append(1e3 * (time.perf_counter() - t) / repeats)
    ms = {name: statistics.median(v) for name, v in times.items()}
    parts = 2 * ms["rbf"] + ms["periodic"]
    return {"ms": ms, "sum of parts": parts, "composite / sum of parts": ms["rbf + periodic * rbf"] / parts,
            "product / (periodic + rbf)": ms["periodic * rbf"] / (ms["periodic"] + ms["rbf"]),
            "M": M, "B": B, "D": D, "rounds": rounds, "repeats": repeats}


def format_kernel_parts(res: dict) -> str:
    lines = [f"kernel forward + backward (K_zz of learned Z, K_zx, diag K_xx) at M={res['M']}, B={res['B']}, "
             f"D={res['D']}; median ms over {res['rounds']} alternating rounds of {res['repeats']} calls:"]
    lines += [f"  {name:<24}{v:>9.2f}" for name, v in res["ms"].items()]
    lines.append(f"  {'sum of parts (2 rbf + periodic)':<33}{res['sum of parts']:>9.2f}")
    lines.append(f"  composite / sum of parts    {res['composite / sum of parts']:.3f}")
    lines.append(f"  product / (periodic + rbf)  {res['product / (periodic + rbf)']:.3f}")
    return "\n".join(lines)


def format_phases(prof: dict, label: str) -> str:
    ms = prof["ms"]
    total = sum(ms.values())
    lines = [f"per-phase profile of the savigp step ({label}); ms per step, median over steps:",
             f"  {'phase':<22}{'ms':>10}{'share':>9}"]
    lines += [f"  {k:<22}{v:>10.1f}{100 * v / total:>8.1f}%" for k, v in ms.items()]
    lines.append(f"  {'total':<22}{total:>10.1f}")
    lines.append("  backward by autograd node (one profiled step, ms): " + ", ".join(
        f"{k} {v:.1f}" for k, v in prof["backward_nodes"].items()))
    lines.append(f"  peak memory of a step: {prof['peak_mib']:.1f} MiB allocated by torch; process peak RSS "
                 f"{peak_rss_mib():.0f} MiB")
    return "\n".join(lines)


def peak_rss_mib() -> float:
    """The process's peak resident memory (MiB; Linux reports ru_maxrss in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Result:
    config: Config
    ms: dict = field(default_factory=dict)  # library -> median wall-clock ms/step
    ms_iqr: dict = field(default_factory=dict)  # library -> (q25, q75)
    cpu_ms: dict = field(default_factory=dict)  # library -> median process CPU ms/step (all threads)
    mem_mib: dict = field(default_factory=dict)
    prof: dict = field(default_factory=dict)  # library -> profile_steps(...)
    error: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)  # phase_profile(...) of savigp's step
    pieces: list = field(default_factory=list)  # dense_pieces(...) of the dense step

    def row(self, peak_gflops: float) -> dict:
        c = self.config
        ours, theirs = self.ms.get("savigp"), self.ms.get("gpytorch")
        flops = floor_flops(c)
        r = {"likelihood": c.lik, "Q": c.Q, "M": c.M, "B": c.B, "S": c.S if c.lik != "gaussian" else "",
             "K": c.K, "G": c.G or "", "posterior": c.posterior, "kernel": c.kernel, "estimator": c.estimator,
             "sweep": c.sweep,
             "savigp_ms": _r(ours), "gpytorch_ms": _r(theirs),
             "ratio": _r(ours / theirs if ours and theirs else None, 3),
             "savigp_cpu_ms": _r(self.cpu_ms.get("savigp")), "gpytorch_cpu_ms": _r(self.cpu_ms.get("gpytorch")),
             "cpu_ratio": _r(self.cpu_ms["savigp"] / self.cpu_ms["gpytorch"]
                             if self.cpu_ms.get("savigp") and self.cpu_ms.get("gpytorch") else None, 3),
             "floor_ms": _r(1e3 * flops / (peak_gflops * 1e9)),
             "savigp_gflops": _r(flops / (ours * 1e-3) / 1e9 if ours else None),
             "gpytorch_gflops": _r(flops / (theirs * 1e-3) / 1e9 if theirs else None),
             "savigp_floor_x": _r(ours / (1e3 * flops / (peak_gflops * 1e9)) if ours else None, 3),
             "dense_ms": _r(self.ms.get("dense")),
             "savigp_dense_x": _r(ours / self.ms["dense"] if ours and self.ms.get("dense") else None, 3),
             "dense_floor_x": _r(self.ms["dense"] / (1e3 * flops / (peak_gflops * 1e9)) if self.ms.get("dense") else None, 3),
             "savigp_mem_mib": _r(self.mem_mib.get("savigp")), "gpytorch_mem_mib": _r(self.mem_mib.get("gpytorch")),
             "note": "; ".join(f"{k}: {v}" for k, v in self.error.items())}
        for lib in ("savigp", "gpytorch"):
            for key in PROFILED:
                r[f"{lib}_{key}"] = _r(self.prof.get(lib, {}).get(key))
        return r


def _r(x, digits: int = 4):
    """``x`` to ``digits`` significant digits ("" for None)."""
    return "" if x is None else float(f"{float(x):.{digits}g}")


def run_config(cfg: Config, data: Data, *, warmup: int, rounds: int, steps: int, seed: int,
               libraries: tuple[str, ...], measure_memory: bool = True, gpytorch_bernoulli: str = "mc",
               dense: bool = True, cuda_graphs: bool = True, profile_steps_n: int = 3,
               phases: bool = False) -> Result:
    res = Result(cfg)
    Z = data.inducing(cfg.M, seed)
    runners: dict[str, Callable] = {}
    for lib in libraries:
        if lib == "gpytorch" and not (HAVE_GPYTORCH and cfg.gpytorch_ok):
            continue
        try:
            if lib == "savigp":
                runners[lib] = SavigpStep(cfg, data, Z, seed=seed, cuda_graphs=cuda_graphs)
            else:
                runners[lib] = GPyTorchStep(cfg, data, Z, seed=seed, bernoulli=gpytorch_bernoulli)
        except Exception as exc:  # report, keep going
            res.error[lib] = f"{type(exc).__name__}: {exc}"[:200]
    if dense and "savigp" in runners and DenseStep.applies(cfg):
        runners["dense"] = DenseStep(cfg, data, Z, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)

    def batch():
        return torch.randint(0, data.N, (cfg.B,), generator=g).to(data.device)

    if torch.device(data.device).type == "cuda":  # savigp captures its CUDA graph after its own warm-up steps
        warmup = max(warmup, WARMUP_STEPS + 2)
    times: dict[str, list[float]] = {k: [] for k in runners}
    cpu: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(warmup):
        b = batch()
        for lib, run in runners.items():
            run(b)
    _sync(data.device)
    for r in range(rounds):
        batches = [batch() for _ in range(steps)]
        order = list(runners.items()) if r % 2 == 0 else list(reversed(runners.items()))
        for lib, run in order:
            _sync(data.device)
            t, c = time.perf_counter(), time.process_time()
            for b in batches:
                run(b)
            _sync(data.device)
            times[lib].append(1e3 * (time.perf_counter() - t) / steps)
            cpu[lib].append(1e3 * (time.process_time() - c) / steps)
    for lib, ts in times.items():
        if ts:
            res.ms[lib] = statistics.median(ts)
            q = np.percentile(ts, [25, 75])
            res.ms_iqr[lib] = (float(q[0]), float(q[1]))
            res.cpu_ms[lib] = statistics.median(cpu[lib])
    for lib, run in runners.items():
        if profile_steps_n and lib != "dense":
            try:
                res.prof[lib] = profile_steps(run, [batch() for _ in range(profile_steps_n)], data.device)
            except Exception as exc:  # pragma: no cover - profiler quirks
                res.error[f"{lib} profile"] = f"{type(exc).__name__}: {exc}"[:120]
    if measure_memory:
        for lib, run in runners.items():
            if lib == "dense":
                continue
            try:
                res.mem_mib[lib] = peak_step_memory(run, batch(), data.device)
            except Exception as exc:  # pragma: no cover - profiler quirks
                res.error[f"{lib} memory"] = f"{type(exc).__name__}: {exc}"[:120]
    if phases and "savigp" in runners:
        res.phases = phase_profile(runners["savigp"], [batch() for _ in range(max(3, rounds // 2))], seed=seed)
    if phases and "dense" in runners:
        res.pieces = dense_pieces(runners["dense"], data.device, repeats=max(5, rounds))
    return res


# ---------------------------------------------------------------------------------------- output
PROFILED = ("busy_ms", "kernels", "syncs", "reads", "ops")
COLUMNS = ["likelihood", "Q", "M", "B", "S", "K", "G", "posterior", "kernel", "estimator", "savigp_ms", "gpytorch_ms", "ratio",
           "savigp_cpu_ms", "gpytorch_cpu_ms", "cpu_ratio", "floor_ms", "savigp_floor_x", "dense_ms", "savigp_dense_x", "dense_floor_x", "savigp_gflops",
           "gpytorch_gflops", "savigp_mem_mib", "gpytorch_mem_mib"] + [
           f"{lib}_{k}" for lib in ("savigp", "gpytorch") for k in PROFILED] + ["sweep", "note"]
SHOWN = ["likelihood", "Q", "M", "B", "S", "K", "G", "posterior", "kernel", "savigp_ms", "gpytorch_ms", "ratio", "cpu_ratio", "floor_ms",
         "savigp_floor_x", "dense_ms", "savigp_dense_x", "dense_floor_x", "savigp_gflops", "savigp_mem_mib",
         "gpytorch_mem_mib", "savigp_busy_ms", "gpytorch_busy_ms", "savigp_kernels", "gpytorch_kernels",
         "savigp_syncs", "gpytorch_syncs", "savigp_reads", "gpytorch_reads", "savigp_ops", "gpytorch_ops"]


def format_table(rows: list[dict], cols=SHOWN) -> str:
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(cols)]
    line = "  ".join(c.rjust(w) for c, w in zip(cols, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
    return "\n".join(out)


def markdown_table(rows: list[dict], cols=SHOWN) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def environment(args, peak: float) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
           "device": args.device, "dtype": args.dtype, "N": args.num_data, "D": args.input_dim,
           "matmul_peak_gflops": round(peak, 1), "machine": platform.processor() or platform.machine(),
           "gpytorch_bernoulli": args.gpytorch_bernoulli, "savigp_compile": bool(args.compile),
           "savigp_cuda_graphs": args.cuda_graphs,
           "cpu_allocator_tuned": bool(args.allocator_tuned)}
    if HAVE_GPYTORCH:
        import gpytorch

        env["gpytorch"] = gpytorch.__version__
    if args.device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return env


def write_outputs(out: Path, rows: list[dict], env: dict, command: str) -> None:
    write_csv_atomic(out / "benchmark.csv", rows, COLUMNS)
    md = ["# savigp vs GPyTorch: milliseconds per training step", "",
          f"Command: `{command}`", "",
          "Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), "",
          "Median wall-clock ms per step over alternating rounds after warm-up; `ratio` = savigp / GPyTorch in the "
          "same run; `cpu_ratio` = the same with process CPU time (all threads), less sensitive to other processes "
          "on a shared machine; "
          "`floor_ms` = Q (M^3 + 6 M^2 B) flops at the measured matmul peak; `savigp_floor_x` = savigp_ms / floor_ms; "
          "`dense_ms` = savigp's dense linear algebra for the step alone (Cholesky, triangular solves and products, "
          "K = 1 full; `DenseStep`), timed in the same alternating rounds; `savigp_dense_x` = savigp_ms / "
          "dense_ms (what the kernel, likelihood, elementwise and framework work add); `dense_floor_x` = dense_ms / "
          "floor_ms (how far the BLAS and LAPACK calls themselves run from the matmul peak); "
          "memory = peak MiB torch allocated during one step; per step from torch.profiler: `*_ops` ATen operator "
          "calls, `*_reads` host reads of a tensor value (`aten::_local_scalar_dense`), and on CUDA `*_busy_ms` the "
          "time the GPU is busy (kernels, copies, memsets), `*_kernels` device kernels, `*_syncs` stream/event "
          "synchronizations. Bernoulli: logistic link, savigp's score estimator "
          "with S samples against GPyTorch's Monte Carlo ELL with S samples (unless `--gpytorch-bernoulli "
          "quadrature`: GPyTorch's probit BernoulliLikelihood with Gauss-Hermite quadrature); rows labelled "
          "`probit` (mnist-b's step): the probit link for both, savigp's Gauss-Hermite estimator against "
          "GPyTorch's BernoulliLikelihood. GPyTorch has no mixture posterior (K = 2 rows are savigp only).", "",
          markdown_table(rows), ""]
    notes = [r for r in rows if r.get("note")]
    if notes:
        md += ["Notes:", ""] + [f"- {r['likelihood']} M={r['M']} B={r['B']}: {r['note']}" for r in notes] + [""]
    write_text_atomic(out / "benchmark.md", "\n".join(md))
    try:
        plot(rows, out / "benchmark.png")
    except Exception as exc:  # matplotlib missing or headless trouble: the tables still stand
        print(f"(no plot: {type(exc).__name__}: {exc})")


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    def num(x):
        return float(x) if x not in ("", None) else float("nan")

    panels = [("M", "M (B = 1000)"), ("B", "B (M = 500)"), ("S", "S (M = 500, B = 1000)"),
              ("K", "posterior (M = 500)"), ("Q", "Q (softmax)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (key, title) in zip(axes, panels):
        ax.set_title(f"time vs {title}", fontsize=9)
        ax.set_ylabel("ms / step")
        if key == "K":
            sel = [r for r in rows if r["likelihood"] == "bernoulli" and r["M"] == 500 and r["B"] == 1000
                   and r["S"] == 100]
            labels = [f"K={r['K']} {r['posterior']}" for r in sel]
            ax.bar(range(len(sel)), [num(r["savigp_ms"]) for r in sel], label="savigp")
            ax.bar(range(len(sel)), [num(r["gpytorch_ms"]) for r in sel], alpha=0.5, label="gpytorch")
            ax.set_xticks(range(len(sel)), labels, rotation=30, fontsize=7)
            ax.legend(fontsize=7)
            continue
        for lik, marker in (("gaussian", "o"), ("bernoulli", "s"), ("softmax", "^")):
            sel = [r for r in rows if r["likelihood"] == lik and r["K"] == 1 and r["posterior"] == "full"]
            if key == "M":
                sel = [r for r in sel if r["B"] == 1000 and r["Q"] == 1 and r["S"] in (100, "")]
            elif key == "B":
                sel = [r for r in sel if r["M"] == 500 and r["Q"] == 1 and r["S"] in (100, "")]
            elif key == "S":
                sel = [r for r in sel if r["M"] == 500 and r["B"] == 1000 and lik == "bernoulli"]
            elif key == "Q":
                sel = [r for r in sel if (r["M"] == 100 and r["B"] == 1000 and r["S"] in (100, "")
                                          and (lik == "softmax" or r["Q"] == 1))]
            sel = sorted({r[key]: r for r in sel}.values(), key=lambda r: r[key])
            if not sel:
                continue
            xs = [r[key] for r in sel]
            ax.plot(xs, [num(r["savigp_ms"]) for r in sel], marker=marker, label=f"savigp {lik}")
            ys = [num(r["gpytorch_ms"]) for r in sel]
            if not all(math.isnan(y) for y in ys):
                ax.plot(xs, ys, marker=marker, linestyle="--", label=f"gpytorch {lik}")
            if key in ("M", "B"):
                ax.plot(xs, [num(r["floor_ms"]) for r in sel], linestyle=":", color="gray")
        ax.set_xlabel(key)
        if key in ("M", "B", "S"):
            ax.set_xscale("log")
            ax.set_yscale("log")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    save_figure(fig, path)


# ---------------------------------------------------------------------------------------- main
def main(argv: Optional[list[str]] = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a few configurations (< ~1 min on 2 CPU threads)")
    p.add_argument("--smallest", action="store_true", help="only the smallest configuration (for tests)")
    p.add_argument("--targets", action="store_true", help="only the issue's acceptance configurations")
    p.add_argument("--mnist", action="store_true",
                   help="only the MNIST steps (D=784, B=1000, isotropic): experiments/mnist.py's cpu setting "
                        "(Q=10, S=10, M=1000, one kernel and learned Z shared by the latent functions, diagonal "
                        "q(u)), the paper's structure (Q=10, S=10, M=500 fixed Z, a kernel per latent function, "
                        "full q(u)) and mnist-b's cpu setting (Q=1, M=2400 fixed Z, full q(u), probit with "
                        "Gauss-Hermite quadrature), with their per-phase profiles")
    p.add_argument("--phases", action="store_true",
                   help="print the per-phase profile of savigp's step for every configuration (always for MNIST), "
                        "and its dense linear algebra timed call by call (K = 1 full posteriors)")
    p.add_argument("--composite", action="store_true",
                   help="only the composite kernel's rows (rbf + periodic * rbf against GPyTorch's ScaleKernel(RBF) + "
                        "ScaleKernel(Periodic * RBF), M=500 B=1000, Gaussian and Bernoulli) beside the RBF's")
    p.add_argument("--kernel-parts", action="store_true",
                   help="only time the composite kernel's forward and backward against each of its parts alone "
                        "(M=500, B=1000) and print the ratio to the sum of the parts; no training steps")
    p.add_argument("--gpu-targets", action="store_true",
                   help="only the GPU issue's configurations (M=1000 B=10k S=100 Bernoulli; decoupled head M=500 "
                        "G=20000 B=10k): run with --device cuda and on the CPU")
    add_out_argument(p, "results/benchmark", "output folder (CSV, Markdown, PNG)")
    add_device_arguments(p, default_dtype="float64")
    add_threads_argument(p, 2, "torch.set_num_threads (CPU)")
    p.add_argument("--num-data", type=int, default=50_000)
    p.add_argument("--input-dim", type=int, default=8)
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per library (default 3, quick 2)")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds per library (default 7, quick 5)")
    p.add_argument("--steps", type=int, default=None, help="steps per timed round (default 2, quick 1)")
    p.add_argument("--libraries", default="savigp,gpytorch", help="comma-separated: savigp,gpytorch")
    p.add_argument("--only", default=None, help="run only configurations whose label contains this text")
    p.add_argument("--no-memory", action="store_true", help="skip the per-step peak memory measurement")
    p.add_argument("--gpytorch-bernoulli", default="mc", choices=["mc", "quadrature"],
                   help="GPyTorch's Bernoulli ELL: logistic link with S Monte Carlo samples (default, as savigp), "
                        "or its own BernoulliLikelihood (probit, Gauss-Hermite quadrature)")
    p.add_argument("--allocator", choices=["tuned", "default"], default="tuned",
                   help="tuned (default): savigp.tune_cpu_allocator(), as savigp.fit does on the CPU; it is "
                        "process-wide, so both libraries' steps run with it. default: glibc's own settings")
    p.add_argument("--compile", action="store_true",
                   help="savigp: torch.compile the step's elementwise chains: the score estimator's and the marginal variances' (savigp.runtime.compilation.set_compile, SAVIGP_COMPILE=1)")
    p.add_argument("--no-dense", action="store_true",
                   help="skip timing the step's dense linear algebra alone (the dense_ms column)")
    p.add_argument("--cuda-graphs", choices=["auto", "off"], default="auto",
                   help="savigp on CUDA: replay its step from a CUDA graph (auto, as savigp.fit) or run it eagerly")
    p.add_argument("--no-profile", action="store_true",
                   help="skip the torch.profiler columns (ops, host reads; GPU busy time, kernels, syncs on CUDA)")
    p.add_argument("--profile-steps", type=int, default=3, help="steps profiled per library (default 3)")
    add_seed_argument(p, 0)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    allocator_tuned = False
    if args.allocator == "tuned" and not args.device.startswith("cuda"):
        from savigp import tune_cpu_allocator

        allocator_tuned = tune_cpu_allocator()
    args.allocator_tuned = allocator_tuned
    if args.compile:
        from savigp.runtime.compilation import set_compile

        set_compile(True)
    dtype = getattr(torch, args.dtype)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    if args.kernel_parts:
        M, B = (20, 30) if args.smallest else (500, 1000)
        res = kernel_part_times(args.input_dim, M, B, dtype=dtype, device=args.device,
                                rounds=3 if args.smallest else (args.rounds or 15), seed=args.seed)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.device}, {args.dtype}")
        print(format_kernel_parts(res))
        return [res]
    if args.smallest:
        configs = [smallest_config()]
        args.num_data = min(args.num_data, 500)
    elif args.targets:
        configs = target_configs()
    elif args.gpu_targets:
        configs = gpu_target_configs()
    elif args.mnist:
        configs = [mnist_config(), mnist_per_latent_config(), mnist_binary_config()]
    elif args.composite:
        configs = composite_configs()
    else:
        configs = quick_configs() if args.quick else full_configs()
    if args.only:
        configs = [c for c in configs if args.only in c.label]
    quick = args.quick or args.smallest
    warmup = args.warmup if args.warmup is not None else (1 if args.smallest else 2 if quick else 3)
    rounds = args.rounds if args.rounds is not None else (3 if args.smallest else 5 if quick else 7)
    steps = args.steps if args.steps is not None else (1 if quick else 2)
    libraries = tuple(x.strip() for x in args.libraries.split(",") if x.strip())
    if "gpytorch" in libraries and not HAVE_GPYTORCH:
        print("GPyTorch is not importable: savigp only (pip install gpytorch, the 'benchmark' extra)")
        libraries = tuple(x for x in libraries if x != "gpytorch")

    datasets: dict[int, Data] = {}

    def data_for(cfg: Config) -> Data:
        D = cfg.D or args.input_dim
        if D not in datasets:
            datasets[D] = Data(args.num_data, D, 10, args.seed, dtype, args.device)
        return datasets[D]

    peak = matmul_peak(dtype, args.device, sizes=(256,) if args.smallest else (1000, 2000))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.device}, {args.dtype}; "
          f"matmul peak {peak:.1f} GFLOP/s; N={args.num_data}, D={args.input_dim}; "
          f"warmup={warmup} rounds={rounds} steps/round={steps}")
    results = []
    t0 = time.perf_counter()
    for cfg in configs:
        t = time.perf_counter()
        res = run_config(cfg, data_for(cfg), warmup=warmup, rounds=rounds, steps=steps, seed=args.seed, libraries=libraries,
                         measure_memory=not args.no_memory, gpytorch_bernoulli=args.gpytorch_bernoulli,
                         dense=not args.no_dense, cuda_graphs=args.cuda_graphs == "auto",
                         profile_steps_n=0 if args.no_profile else args.profile_steps,
                         phases=args.phases or cfg.sweep == "mnist")
        results.append(res)
        if not args.smallest:  # the peak drifts with machine load: keep the best seen
            peak = max(peak, matmul_peak(dtype, args.device, sizes=(1000,), repeats=2))
        ms = ", ".join(f"{k} {v:.1f} ms" for k, v in res.ms.items())
        print(f"  {cfg.label}: {ms}  ({time.perf_counter() - t:.1f} s)" + (f"  [{res.error}]" if res.error else ""),
              flush=True)
        if res.phases:
            print(format_phases(res.phases, cfg.label), flush=True)
        if res.pieces:
            print(format_pieces(res.pieces, cfg.label, peak, 1e3 * floor_flops(cfg) / (peak * 1e9)), flush=True)
    rows = [r.row(peak) for r in results]
    print()
    print(format_table(rows))
    print(f"\nmatmul peak {peak:.1f} GFLOP/s ({args.dtype}); total {time.perf_counter() - t0:.0f} s")
    env = environment(args, peak)
    command = " ".join(["python -m experiments.benchmark"] + (argv if argv is not None else sys.argv[1:]))
    write_outputs(Path(args.out), rows, env, command)
    print(f"wrote {args.out}/benchmark.csv, benchmark.md, benchmark.png")
    return rows


if __name__ == "__main__":
    main()
