"""Shared fixtures and helpers of the test suite (float64 by default, one torch thread), the
repository paths tests import (``from conftest import ROOT, DATA``), and the ``experiments``
marker, given by path to every test under ``tests/experiments/`` so that
``python -m pytest -q tests -m "not experiments"`` runs the library's tests alone."""
import math
from pathlib import Path

import pytest
import torch

import savigp

#: the repository root (wherever a test file sits below tests/)
ROOT = Path(__file__).resolve().parents[1]
#: the shared data folder next to the repository (tests that need it skip when it is absent)
DATA = ROOT.parent / "shared" / "data"
#: tests of the experiment scripts (marked ``experiments``)
EXPERIMENT_TESTS = Path(__file__).resolve().parent / "experiments"

# the test problems are small: one thread is as fast and is immune to oversubscription
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _float64_and_threads():
    # every test starts on one thread: a script run in-process (experiments/benchmark.py defaults to
    # --threads 2) must not leave later tests spinning two threads on a loaded machine
    torch.set_num_threads(1)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def refused_train(capsys, *args) -> str:
    """The one stderr line of ``savigp train ARGS --threads 1 --quiet`` run in-process, which must
    exit with status 2 (a usage error) and say ``savigp train: error: ...`` without a traceback."""
    from savigp.cli import main

    capsys.readouterr()
    assert main(["train", *map(str, args), "--threads", "1", "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("savigp train: error: ") and "Traceback" not in lines[0], lines
    return lines[0]


def exact_gp(X, Y, kernel, noise_var):
    """Exact GP regression (Q = 1): log marginal likelihood and posterior mean/var at X."""
    with torch.no_grad():
        N = X.shape[0]
        K = kernel(X, X)[0]
        L = torch.linalg.cholesky(K + noise_var * torch.eye(N, dtype=K.dtype))
        alpha = torch.cholesky_solve(Y, L)
        logml = -0.5 * (Y * alpha).sum() - torch.log(torch.diagonal(L)).sum() - 0.5 * N * math.log(2 * math.pi)
        mean = (K @ alpha)[:, 0]
        Vs = torch.linalg.solve_triangular(L, K, upper=False)
        var = torch.diagonal(K) - (Vs * Vs).sum(0)
        return float(logml), mean, var


def run_guide(name: str, min_blocks: int) -> dict:
    """Execute the python blocks of ``docs/<name>`` in order in one namespace (the guide runs as it
    stands) and return that namespace; at least ``min_blocks`` blocks must be found."""
    import re

    text = (ROOT / "docs" / name).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= min_blocks, f"docs/{name}: {len(blocks)} python blocks, expected >= {min_blocks}"
    ns: dict = {"__name__": name.removesuffix(".md") + "_guide"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/{name}[block {i}]", "exec"), ns)
    return ns


@pytest.fixture
def regression_data():
    g = torch.Generator().manual_seed(1)
    N = 40
    X = torch.rand(N, 2, generator=g) * 4
    Y = torch.sin(X[:, :1]) + 0.5 * torch.cos(2 * X[:, 1:]) + 0.1 * torch.randn(N, 1, generator=g)
    return X, Y


def cuda_available():
    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def pytest_collection_modifyitems(config, items):
    """Mark every test collected from tests/experiments/ with ``experiments``."""
    for item in items:
        if EXPERIMENT_TESTS in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.experiments)


def sine_data(n=120, d=2, seed=0, q=1):
    """``X (n, d)`` standard normal and ``Y (n, q)``: column j is (j + 1) (sin 2 x_1 + cos(3 x_d) / 2)
    plus noise of standard deviation 0.1 (the mean-head tests' regression problem)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    f = torch.sin(2.0 * X[:, :1]) + 0.5 * torch.cos(3.0 * X[:, -1:])
    Y = torch.cat([f * (j + 1) for j in range(q)], 1) + 0.1 * torch.randn(n, q, generator=g, dtype=torch.float64)
    return X, Y


def minimal_file_config(lik=("gaussian", "Gaussian", {}), example=(0.0,), standardize=None):
    """The configuration a model file needs besides the model's own (``save_model``'s ``config``)."""
    return {"model_options": {"kernel": "rbf", "inducing_init": "kmeans", "seed": 0, "dtype": "float64",
                              "prior_mean": None},
            "likelihood": {"name": lik[0], "class": lik[1], "kwargs": lik[2]},
            "standardize": standardize or {"inputs": None, "targets": None}, "example_target": list(example)}


def moved_posterior_model(posterior, K, seed=0, M=4, N=30, D=2):
    """A MultiGaussian model (Q = 2 outputs, prior means 0.5 and -1, M inducing points) whose
    posterior was moved off its start (the KL and posterior-protocol tests' model)."""
    from likelihoods import MultiGaussian

    Q = 2
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D, generator=g)
    Y = torch.randn(N, Q, generator=g)
    model = savigp.SAVIGP(X, Y, MultiGaussian(Q), num_inducing=M, posterior=posterior, num_components=K,
                          prior_mean=[0.5, -1.0], seed=seed)
    with torch.no_grad():  # a posterior far from its initialization
        for p in model.posterior.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    return model


def load_experiment(name: str):
    """The script ``experiments/<name>.py`` as the module ``experiments.<name>`` (the repository root
    is on the import path: setup.cfg's pytest ``pythonpath``)."""
    import importlib

    return importlib.import_module(f"experiments.{name}")
