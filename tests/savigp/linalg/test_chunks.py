"""Chunk sizes from a memory budget (savigp.linalg.chunks) and the chunked computations that use them."""
import torch

import savigp
from savigp.linalg import chunks as _chunks
from savigp.estimators import score as score_module
from savigp.mean_heads.orthogonal_basis import kernel_matvec
from savigp.estimators.score import _score_means, _score_means_dispatch
from savigp.kernels.stationary import RBF
from likelihoods import Gaussian


def test_chunk_size_from_a_budget():
    assert _chunks.chunk_size(1000, 8, budget=800) == 100
    assert _chunks.chunk_size(1000, 8, budget=8 * 10 ** 6) == 1000  # never more than the total
    assert _chunks.chunk_size(1000, 10 ** 9, budget=800) == 1  # never fewer than one row
    assert _chunks.chunk_size(50, 1, "cpu") == 50
    assert _chunks.memory_budget("cpu") == 64 << 20
    # the CPU budget is the block size the decoupled head always used on the CPU: 2^23 float64 entries
    assert _chunks.memory_budget("cpu") // 8 == 2 ** 23


def test_the_cuda_budget_follows_the_free_memory_and_its_refresh_rules(monkeypatch):
    """memory_budget on CUDA with torch.cuda's memory query and the clock replaced (no device is
    needed): a tenth of the free memory, floored at the CPU budget, per device index, re-read after
    _REFRESH_S seconds and never while a CUDA graph is being captured. Each rule fails for a
    mutant of it (the floor removed, the cache ignored, the refresh or the capture guard dropped)."""
    free = {0: 40 * 2 ** 30, 1: 2 ** 20}  # bytes free per device; device 1: 1 MiB
    clock, capturing, calls = [100.0], [False], []

    def mem_get_info(index):
        calls.append(index)
        return free[index], 80 * 2 ** 30

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(_chunks.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(_chunks, "_cache", {})
    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)

    assert _chunks.memory_budget(cuda0) == int(0.1 * 40 * 2 ** 30) and calls == [0]
    # at M = 500, G = 20000 columns of float32 the decoupled head's product is one block on such a card
    assert _chunks.memory_budget(cuda0) // 4 > 500 * 20000 * 10
    assert _chunks.memory_budget(cuda1) == _chunks.CPU_BUDGET_BYTES and calls == [0, 1]  # floored, own entry
    free[0] = 20 * 2 ** 30
    clock[0] += 0.5 * _chunks._REFRESH_S
    assert _chunks.memory_budget(cuda0) == int(0.1 * 40 * 2 ** 30) and calls == [0, 1]  # cached
    clock[0] += _chunks._REFRESH_S
    capturing[0] = True
    assert _chunks.memory_budget(cuda0) == int(0.1 * 40 * 2 ** 30) and calls == [0, 1]  # not during capture
    capturing[0] = False
    assert _chunks.memory_budget(cuda0) == int(0.1 * 20 * 2 ** 30) and calls == [0, 1, 0]  # re-read


def _spy_chunk_sizes(monkeypatch) -> list:
    """Record (total, rows) of every _chunks.chunk_size call."""
    seen, real = [], _chunks.chunk_size

    def spy(total, *args, **kwargs):
        rows = real(total, *args, **kwargs)
        seen.append((int(total), rows))
        return rows

    monkeypatch.setattr(_chunks, "chunk_size", spy)
    return seen


def test_a_small_budget_blocks_the_work_without_changing_it(monkeypatch):
    """Each user of the budget really works in blocks under a small one (the blocks are counted:
    a mutant that ignores the budget fails) and gets the unblocked values and gradients."""
    g = torch.Generator().manual_seed(0)
    kernel = RBF(2, 2, lengthscale=[0.7, 1.3])
    kernel_calls = []

    def counted(x1, x2):
        kernel_calls.append(x2.shape[-2])
        return kernel(x1, x2)

    X1, X2 = torch.randn(30, 2, generator=g), torch.randn(2, 50, 2, generator=g)
    a = torch.randn(2, 50, generator=g, requires_grad=True)
    full = kernel_matvec(counted, X1, X2, a)
    (gfull,) = torch.autograd.grad(full.square().sum(), a)
    assert kernel_calls == [50]
    kernel_calls.clear()
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 8 * 2 * 30 * 7)  # blocks of 7 columns
    blocked = kernel_matvec(counted, X1, X2, a)
    assert kernel_calls == [7] * 7 + [1]  # the forward pass (the backward pass recomputes each block)
    (gblocked,) = torch.autograd.grad(blocked.square().sum(), a)
    assert torch.allclose(blocked, full, rtol=1e-12, atol=1e-12)
    assert torch.allclose(gblocked, gfull, rtol=1e-12, atol=1e-12)

    S, K, B, Q = 9, 2, 40, 3
    eps = torch.randn(S, K, B, Q, generator=g)
    vals = torch.randn(S, K, B, 1, generator=g)
    ref = _score_means(vals, eps, True)
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 12 * S * K * Q * 8 * 6)  # chunks of 6 points
    seen, blocks = _spy_chunk_sizes(monkeypatch), []

    def counted_means(g_, eps_, control):
        blocks.append(eps_.shape[2])
        return _score_means(g_, eps_, control)

    monkeypatch.setattr(score_module, "_score_means", counted_means)
    out = _score_means_dispatch(vals, eps, True)
    assert seen == [(B, 6)] and blocks == [6] * 6 + [4]
    assert all(torch.allclose(o, r, rtol=1e-12, atol=1e-12) for o, r in zip(out, ref))

    X = torch.rand(40, 1, generator=g) * 6
    model = savigp.SAVIGP(X, torch.sin(X), Gaussian(0.1), num_inducing=6)
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 1 << 30)
    seen.clear()
    m1, v1, _ = model.predict_latent(X)
    lpd1 = model.log_predictive_density(X, torch.sin(X), num_samples=50)
    assert seen and all(rows == 40 for _, rows in seen)  # one chunk everywhere
    # latent moments take their rows from the device budget; log predictive densities from memory_budget
    monkeypatch.setattr(_chunks, "CPU_BUDGET_BYTES", 4 * 1 * (6 + 1) * 8 * 3)  # 3 rows of 4 Q (M + K) doubles
    seen.clear()
    m2, v2, _ = model.predict_latent(X)
    assert seen == [(40, 3)]
    seen.clear()
    lpd2 = model.log_predictive_density(X, torch.sin(X), num_samples=50, memory_budget=4 * 8 * 50 * 4 * 7)
    assert (40, 7) in seen, seen  # rows of 7 (4 bytes x 8 x S x (Q + P + 2) each)
    assert torch.allclose(m1, m2, rtol=0, atol=1e-12) and torch.allclose(v1, v2, rtol=0, atol=1e-12)
    assert torch.allclose(lpd1, lpd2, rtol=0, atol=1e-12)
