"""Triangular solves V = L^-1 K_zx (M x M lower L, M x B right-hand side) against alternatives.

The step's largest dense operations are the triangular solves with the K_zz factor (their share
of the GPU-busy time: docs/performance.md). Candidates, each timed on ``--device`` (median of ``--repeats``,
synchronized) and checked against a float64 solve of the same problem:

* ``trsm``: ``savigp.linalg.triangular.solve_lower`` (``torch.linalg.solve_triangular``, what the step uses);
* ``inverse+gemm``: L^-1 once (a triangular solve against I, timed too) then one GEMM L^-1 K_zx --
  worth it when the same factor serves several right-hand sides per step (forward and backward);
* ``inverse+gemm tf32``: the same GEMM with TF32 tensor cores (CUDA float32 only);
* ``gemm only``: the GEMM alone, L^-1 given (the per-solve cost once the inverse is shared).

Accuracy: ``rel_err`` = max |V - V_64| / max |V_64|, with V_64 the float64 solve; K_zz is an RBF
matrix of M points with relative jitter 1e-5 (float32) or 1e-8 (float64), as the model factorizes.

    python -m experiments.trsm_alternatives                                   # CPU, float64
    python -m experiments.trsm_alternatives --device cuda --dtype float32     # the GPU question
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from experiments._common import add_device_arguments, add_threads_argument
from savigp.linalg import triangular as T
from savigp.linalg.cholesky import base_jitter
from savigp.kernels.stationary import RBF


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _time(fn, device, repeats: int) -> float:
    fn()
    _sync(device)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        _sync(device)
        out.append(1e3 * (time.perf_counter() - t))
    return statistics.median(out)


def problem(M: int, B: int, D: int = 8, seed: int = 0):
    """L (M, M) lower factor of a jittered RBF K_zz and K_zx (M, B), float64 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    Z, X = torch.randn(M, D, generator=g, dtype=torch.float64), torch.randn(B, D, generator=g, dtype=torch.float64)
    k = RBF(D, 1, lengthscale=D ** 0.5)
    with torch.no_grad():
        Kzz, Kzx = k(Z, Z)[0], k(Z, X)[0]
    return Kzz, Kzx


def run(M: int, B: int, dtype, device, repeats: int) -> list[dict]:
    Kzz64, Kzx64 = problem(M, B)
    rel = base_jitter(dtype)
    J = Kzz64 + rel * Kzz64.diagonal().mean() * torch.eye(M, dtype=torch.float64)
    L64 = torch.linalg.cholesky(J)
    V64 = torch.linalg.solve_triangular(L64, Kzx64, upper=False)
    L = torch.linalg.cholesky(J.to(dtype=dtype, device=device))
    Kzx = Kzx64.to(dtype=dtype, device=device)
    eye = torch.eye(M, dtype=dtype, device=device)
    Linv = T.solve_lower(L, eye)
    scale = float(V64.abs().max())

    def err(V):
        return float((V.double().cpu() - V64).abs().max()) / scale

    rows = []

    def add(name, fn, V):
        rows.append({"M": M, "B": B, "dtype": str(dtype).replace("torch.", ""), "method": name,
                     "ms": round(_time(fn, device, repeats), 3), "rel_err": f"{err(V):.2e}"})

    add("trsm", lambda: T.solve_lower(L, Kzx), T.solve_lower(L, Kzx))
    add("inverse (trsm against I)", lambda: T.solve_lower(L, eye), Linv @ Kzx)
    add("gemm only (inverse given)", lambda: Linv @ Kzx, Linv @ Kzx)
    add("inverse+gemm", lambda: T.solve_lower(L, eye) @ Kzx, T.solve_lower(L, eye) @ Kzx)
    if torch.device(device).type == "cuda" and dtype == torch.float32:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            add("gemm only, tf32", lambda: Linv @ Kzx, Linv @ Kzx)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_arguments(p)
    p.add_argument("--sizes", default="500x1000,1000x1000,500x10000,1000x10000", help="MxB,... (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=7)
    add_threads_argument(p, 2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    dtype = getattr(torch, args.dtype)
    rows = []
    for size in args.sizes.split(","):
        M, B = (int(v) for v in size.lower().split("x"))
        rows += run(M, B, dtype, args.device, args.repeats)
    cols = ["M", "B", "dtype", "method", "ms", "rel_err"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print(f"torch {torch.__version__}, {args.device}, {args.threads} threads; median of {args.repeats}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths)))
    return rows


if __name__ == "__main__":
    main()
