"""Smoke test of experiments/benchmark.py: its smallest configuration runs and reports sane numbers.

Speed itself is measured by the benchmark, never asserted here.
"""
from __future__ import annotations

import csv
import math

import pytest
import torch

from experiments import _common


def _positive(x) -> bool:
    return x != "" and math.isfinite(float(x)) and float(x) > 0


@pytest.fixture(scope="module")
def bench():
    from experiments import benchmark

    return benchmark


def test_smallest_configuration_savigp_only(bench, tmp_path):
    rows = bench.main(["--smallest", "--libraries", "savigp", "--out", str(tmp_path)])
    assert len(rows) == 1
    row = rows[0]
    for key in ("savigp_ms", "savigp_cpu_ms", "floor_ms", "savigp_floor_x", "dense_ms", "savigp_dense_x", "dense_floor_x",
                "savigp_gflops", "savigp_mem_mib", "savigp_ops"):
        assert _positive(row[key]), (key, row[key])
    assert row["gpytorch_ms"] == "" and row["ratio"] == ""
    assert row["savigp_reads"] != "" and row["savigp_busy_ms"] == ""  # GPU columns only on CUDA
    with open(tmp_path / "benchmark.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 1 and _positive(table[0]["savigp_ms"])
    md = (tmp_path / "benchmark.md").read_text()
    assert "savigp_ms" in md and "| bernoulli |" in md


def test_smallest_configuration_against_gpytorch(bench, tmp_path):
    pytest.importorskip("gpytorch")
    rows = bench.main(["--smallest", "--out", str(tmp_path), "--no-memory"])
    row = rows[0]
    for key in ("savigp_ms", "gpytorch_ms", "ratio", "cpu_ratio", "gpytorch_gflops"):
        assert _positive(row[key]), (key, row[key])


def test_flop_floor_formula(bench):
    cfg = bench.Config("bernoulli", M=500, B=1000, Q=2)
    assert bench.floor_flops(cfg) == 2 * (500 ** 3 + 6 * 500 ** 2 * 1000)


@pytest.mark.parametrize("B", [8, 64])
def test_dense_step_runs_in_both_forms(bench, B):
    """DenseStep times whichever form the engine picks for M and B: M = 20 takes the A form at
    B = 8 and the P form at B = 64 (the smoke configuration above only reaches the P form)."""
    import torch
    from savigp.posteriors import use_middle_form

    assert use_middle_form(20, B) == (B == 64)
    cfg = bench.Config("bernoulli", M=20, B=B)
    data = bench.Data(100, 3, 2, 0, torch.float64, "cpu")
    step = bench.DenseStep(cfg, data, data.inducing(20, 0))
    assert math.isfinite(step(None))
    # timed call by call: the same calls, each with its useful flops (P form: 16/3 M^3 + 4 M^2 B;
    # A form: 7/3 M^3 + 6 M^2 B), and the call-by-call table names each of them
    pieces = bench.dense_pieces(step, "cpu", repeats=2)
    M = 20
    want = (16 / 3 * M ** 3 + 4 * M * M * B) if B == 64 else (7 / 3 * M ** 3 + 6 * M * M * B)
    assert math.isclose(sum(p["gflop"] for p in pieces) * 1e9, want, rel_tol=1e-12)
    assert len(pieces) == (9 if B == 64 else 8) and all(p["ms"] >= 0 for p in pieces)
    table = bench.format_pieces(pieces, cfg.label, peak_gflops=10.0, floor_ms=1.0)
    assert all(p["piece"] in table for p in pieces) and "Cholesky of K_zz" in table


def test_phase_profile_is_the_models_step(bench):
    """The per-phase profile of the MNIST-like step (softmax, isotropic kernel, fixed shared inducing
    inputs, reparameterization) calls the pieces of the model's ELBO: with a zero learning rate its
    ELBO equals ``model.elbo`` on the same batch and draws; every phase and the memory are reported."""
    import torch

    cfg = bench.Config("softmax", 10, 32, S=5, Q=3, D=6, ard=False, learn_inducing=False, est="reparam",
                       sweep="mnist")
    data = bench.Data(200, 6, 10, 0, torch.float64, "cpu")
    step = bench.SavigpStep(cfg, data, data.inducing(cfg.M, 0), lr=0.0)
    assert tuple(step.model.kernel_inducing().shape) == (1, 10, 6)
    batch = torch.arange(32)
    prof = bench.phase_profile(step, [batch], seed=3)
    want = step.model.elbo(batch, num_samples=5, estimator="reparam", generator=torch.Generator().manual_seed(3))
    assert math.isclose(prof["elbo"], float(want.elbo), rel_tol=1e-10)
    assert set(prof["ms"]) == set(bench.PHASES) and all(math.isfinite(v) for v in prof["ms"].values())
    assert set(prof["backward_nodes"]) == {"kernel", "moments", "other"} and prof["peak_mib"] > 0
    assert "moments (solves)" in bench.format_phases(prof, cfg.label)


def test_the_mnist_configuration_is_the_mnist_scripts_cpu_setting(bench):
    """``benchmark.py --mnist`` and ``--targets`` time the step ``experiments/mnist.py`` trains by
    default on the CPU (its ``cpu`` setting for MNIST), not a stale copy of it."""
    from conftest import load_experiment

    cpu = load_experiment("mnist").SETTINGS["cpu"]
    cfg = bench.mnist_config()
    assert cfg.lik == "softmax" and cfg.Q == 10 and cfg.D == 784 and not cfg.ard
    assert cfg.M == cpu["num_inducing"]["multiclass"] and cfg.B == cpu["batch_size"]
    assert cfg.S == cpu["samples"]["multiclass"] and cfg.posterior == cpu["posterior"]["multiclass"]
    assert cfg.shared == (cpu["kernel"]["multiclass"] == "shared")
    assert cfg.learn_inducing == cpu["learn_inducing"]["multiclass"]
    assert cfg in bench.target_configs() and cfg.gpytorch_ok


def test_the_mnist_b_configuration_is_the_mnist_scripts_cpu_setting(bench):
    """``benchmark.py --mnist`` also times mnist-b's step as ``experiments/mnist.py --task binary``
    trains it by default on the CPU; a small copy of it runs in both libraries with the probit
    likelihood (savigp: Gauss-Hermite ELL; GPyTorch: its BernoulliLikelihood)."""
    from conftest import load_experiment

    cpu = load_experiment("mnist").SETTINGS["cpu"]
    cfg = bench.mnist_binary_config()
    assert cfg.lik == "bernoulli" and cfg.Q == 1 and cfg.D == 784 and not cfg.ard
    assert cfg.M == cpu["num_inducing"]["binary"] and cfg.B == cpu["batch_size"]
    assert cfg.posterior == cpu["posterior"]["binary"] and cfg.learn_inducing == cpu["learn_inducing"]["binary"]
    assert cfg.link == cpu["link"]["binary"] and cfg.est == cpu["estimator"]["binary"]
    assert cfg.gpytorch_ok and "probit" in cfg.label
    small = bench.Config("bernoulli", 12, 40, S=5, D=6, ard=False, learn_inducing=False, est="quadrature",
                         link="probit", sweep="mnist")
    data = bench.Data(200, 6, 10, 0, torch.float64, "cpu")
    Z = data.inducing(12, 0)
    step = bench.SavigpStep(small, data, Z)
    assert type(step.model.likelihood).__name__ == "Probit"
    gp = bench.GPyTorchStep(small, data, Z) if bench.HAVE_GPYTORCH else None
    batch = torch.arange(40)
    for _ in range(2):
        step(batch)
        if gp is not None:
            gp(batch)
    if gp is not None:
        assert type(gp.lik).__name__ == "BernoulliLikelihood"


def test_a_shared_kernel_step_in_both_libraries(bench):
    """The shared-kernel configuration: savigp's model has one kernel and ``(1, M, D)`` inducing
    inputs, its phase profile is the model's ELBO, GPyTorch's model has an unbatched kernel and Z
    and a mean-field q(u) batched over Q; the flop floor is one factorization and the solves once."""
    import torch

    cfg = bench.Config("softmax", 10, 32, S=5, Q=3, D=6, posterior="diag", ard=False, learn_inducing=True,
                       est="reparam", shared=True, sweep="mnist")
    assert "shared" in cfg.label
    data = bench.Data(200, 6, 10, 0, torch.float64, "cpu")
    Z = data.inducing(cfg.M, 0)
    step = bench.SavigpStep(cfg, data, Z, lr=0.0)
    assert step.model.shared_kernel and tuple(step.model.inducing.shape) == (1, 10, 6)
    batch = torch.arange(32)
    prof = bench.phase_profile(step, [batch], seed=3)
    want = step.model.elbo(batch, num_samples=5, estimator="reparam", generator=torch.Generator().manual_seed(3))
    assert math.isclose(prof["elbo"], float(want.elbo), rel_tol=1e-10)
    assert bench.floor_flops(cfg) == 10 ** 3 / 3 + 3 * 10 ** 2 * 32 + 2 * 10 * 6 * (32 + 10) * 2
    fixed = bench.Config("softmax", 10, 32, S=5, Q=3, D=6, posterior="diag", learn_inducing=False, shared=True)
    assert bench.floor_flops(fixed) == 10 ** 3 / 3 + 3 * 10 ** 2 * 32 + 2 * 10 * 32 * 6
    assert not bench.DenseStep.applies(cfg)
    pytest.importorskip("gpytorch")
    import gpytorch

    theirs = bench.GPyTorchStep(cfg, data, Z)
    assert theirs.model.covar_module.batch_shape == torch.Size([])
    assert tuple(theirs.model.variational_strategy.base_variational_strategy.inducing_points.shape) == (10, 6)
    dist = theirs.model.variational_strategy.base_variational_strategy._variational_distribution
    assert isinstance(dist, gpytorch.variational.MeanFieldVariationalDistribution)
    assert dist.batch_shape == torch.Size([3])
    theirs(batch)


def test_smallest_configuration_prints_its_phases(bench, tmp_path, capsys):
    bench.main(["--smallest", "--libraries", "savigp", "--no-memory", "--no-profile", "--no-dense", "--phases",
                "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "per-phase profile" in out and "backward by autograd node" in out and "peak memory" in out
    assert "call by call" not in out  # --no-dense: no dense step to time


def test_phases_print_the_dense_calls_one_by_one(bench, tmp_path, capsys):
    bench.main(["--smallest", "--libraries", "savigp", "--no-memory", "--no-profile", "--phases",
                "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "dense linear algebra of the step call by call" in out and "Cholesky of K_zz" in out


def test_the_composite_rows_compare_the_same_kernel_in_both_libraries(bench, tmp_path):
    """``--composite``: savigp's rbf + periodic * rbf and GPyTorch's ScaleKernel(RBF) + ScaleKernel(Periodic * RBF)
    start as the same kernel (1e-10) and a small copy of the row runs in both libraries; ``--kernel-parts``
    reports the composite's and each part's time."""
    gpytorch = pytest.importorskip("gpytorch")
    cfg = bench.Config("gaussian", 12, 40, kernel="composite", sweep="kernel")
    assert "composite" in cfg.label and any(c.kernel == "composite" for c in bench.composite_configs())
    x = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ours = bench.savigp_kernel(cfg, 3, 1.7)
    theirs = _common.gpytorch_kernel("composite", 3, True, torch.Size([]), 1.7).double()
    with gpytorch.settings.lazily_evaluate_kernels(False), torch.no_grad():
        torch.testing.assert_close(ours(x, x[:4])[0], theirs(x, x[:4]).to_dense(), rtol=0, atol=1e-10)
    data = bench.Data(200, 3, 10, 0, torch.float64, "cpu")
    res = bench.run_config(cfg, data, warmup=1, rounds=1, steps=1, seed=0, libraries=("savigp", "gpytorch"),
                           measure_memory=False, profile_steps_n=0)
    assert not res.error and set(res.ms) >= {"savigp", "gpytorch"}, res.error
    assert res.row(10.0)["kernel"] == "composite"
    parts = bench.main(["--kernel-parts", "--smallest", "--input-dim", "3", "--out", str(tmp_path)])[0]
    assert set(parts["ms"]) == {"rbf", "periodic", "periodic * rbf", "rbf + periodic * rbf"}
    assert all(_positive(v) for v in parts["ms"].values()) and _positive(parts["composite / sum of parts"])
