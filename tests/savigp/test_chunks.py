"""Chunk sizes from a memory budget (savigp._chunks) and the chunked computations that use them."""
import pytest
import torch

import savigp
from savigp import _chunks
from savigp.decoupled import kernel_matvec
from savigp.expected_log_lik import _score_means, _score_means_dispatch
from savigp.kernels import RBF
from likelihoods import Gaussian


def test_chunk_size_from_a_budget():
    assert _chunks.chunk_size(1000, 8, budget=800) == 100
    assert _chunks.chunk_size(1000, 8, budget=8 * 10 ** 6) == 1000  # never more than the total
    assert _chunks.chunk_size(1000, 10 ** 9, budget=800) == 1  # never fewer than one row
    assert _chunks.chunk_size(50, 1, "cpu") == 50
    assert _chunks.memory_budget("cpu") == 64 << 20
    # the CPU budget is the block size the decoupled head always used on the CPU: 2^23 float64 entries
    assert _chunks.memory_budget("cpu") // 8 == 2 ** 23


def test_the_cuda_budget_is_a_fraction_of_the_free_memory(monkeypatch):
    calls = []

    def mem_get_info(index):
        calls.append(index)
        return 40 * 2 ** 30, 80 * 2 ** 30  # 40 GiB free of 80

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(_chunks, "_cache", {})
    budget = _chunks.memory_budget(torch.device("cuda", 0))
    assert budget == int(0.1 * 40 * 2 ** 30)
    assert _chunks.memory_budget(torch.device("cuda", 0)) == budget and calls == [0]  # cached for a second
    # at M = 500, G = 20000 columns of float32 the decoupled head's product is one block on such a card
    assert budget // 4 > 500 * 20000 * 10


def test_a_small_budget_blocks_the_work_without_changing_it(monkeypatch):
    g = torch.Generator().manual_seed(0)
    kernel = RBF(2, 2, lengthscale=[0.7, 1.3])
    X1, X2 = torch.randn(30, 2, generator=g), torch.randn(2, 50, 2, generator=g)
    a = torch.randn(2, 50, generator=g, requires_grad=True)
    full = kernel_matvec(kernel, X1, X2, a)
    (gfull,) = torch.autograd.grad(full.square().sum(), a)
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 8 * 2 * 30 * 7)  # blocks of 7 columns
    blocked = kernel_matvec(kernel, X1, X2, a)
    (gblocked,) = torch.autograd.grad(blocked.square().sum(), a)
    assert torch.allclose(blocked, full, rtol=1e-12, atol=1e-12)
    assert torch.allclose(gblocked, gfull, rtol=1e-12, atol=1e-12)

    S, K, B, Q = 9, 2, 40, 3
    eps = torch.randn(S, K, B, Q, generator=g)
    vals = torch.randn(S, K, B, 1, generator=g)
    ref = _score_means(vals, eps, True)
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 12 * S * K * Q * 8 * 6)  # chunks of 6 points
    assert _chunks.chunk_size(B, 12 * S * K * Q * 8, "cpu") == 6
    out = _score_means_dispatch(vals, eps, True)
    assert all(torch.allclose(o, r, rtol=1e-12, atol=1e-12) for o, r in zip(out, ref))

    X = torch.rand(40, 1, generator=g) * 6
    model = savigp.SAVIGP(X, torch.sin(X), Gaussian(0.1), num_inducing=6)
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 1 << 30)
    m1, v1, _ = model.predict_latent(X)
    lpd1 = model.log_predictive_density(X, torch.sin(X), num_samples=50)
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 4 * 6 * 8 * 3 + 1)  # a few rows per chunk
    m2, v2, _ = model.predict_latent(X)
    lpd2 = model.log_predictive_density(X, torch.sin(X), num_samples=50)
    assert torch.allclose(m1, m2, rtol=0, atol=1e-12) and torch.allclose(v1, v2, rtol=0, atol=1e-12)
    assert torch.allclose(lpd1, lpd2, rtol=0, atol=1e-12)
