"""A composite kernel on a device in float32 against the CPU in float64 (issue 56, step 4).

``rbf(0) + periodic(0, period=1) * rbf(0)`` on 400 points of a seasonal series (10 cycles and a slow
trend, noise 0.2), fitted ``--iterations`` Adam steps from the same seed on ``--device`` in float32
and on the CPU in float64; printed: each run's seconds and full-data ELBO, the learned period, and the
largest difference of the parts' posterior means (:func:`savigp.predict_parts`) and of the predictive
means between the two, in the targets' units. Float32 and float64 follow different rounding, so
the two runs part ways slowly; the check is that the device run is a working fit of the same model
(ELBO within 5 nats, the period within 0.5 % of the CPU's), not bit-equality.

    python -m experiments.gpu_parts_check --device cuda     # on a GPU
    python -m experiments.gpu_parts_check --device cpu      # the same code path on the CPU (float32)
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def _data(n: int = 400):
    g = torch.Generator().manual_seed(0)
    t = torch.linspace(0, 10, n, dtype=torch.float64)[:, None]
    y = torch.sin(2 * torch.pi * t) + 0.3 * t - 1.5 + 0.2 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    return t, y


def _fit(device: str, dtype: torch.dtype, iterations: int) -> dict:
    import warnings

    import savigp
    from likelihoods import Gaussian
    from savigp.kernels import Periodic
    from savigp.training.convergence import full_data_elbo

    t, y = _data()
    model = savigp.SAVIGP(t, y, Gaussian(0.5), kernel="rbf(0) + periodic(0, period=1) * rbf(0)", num_inducing=50,
                          seed=0).to(device=device, dtype=dtype)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        savigp.fit(model, iterations=iterations, progress=False, seed=0, final_elbo=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    grid = torch.linspace(0, 10, 200, dtype=torch.float64)[:, None].to(device=device, dtype=dtype)
    parts = savigp.predict_parts(model, grid)
    mean = model.predict(grid).mean
    period = [float(m.period().detach().reshape(-1)[0]) for m in model.kernel.modules() if isinstance(m, Periodic)][0]
    elbo, _ = full_data_elbo(model, estimator="closed-form")
    return {"device": device, "dtype": str(dtype), "seconds": seconds, "elbo": elbo, "period": period,
            "names": parts.names[0], "parts_mean": parts.mean[0].detach().double().cpu(),
            "mean": mean.detach().double().cpu()}


def main(argv=None) -> int:
    from experiments._common import add_cli_options

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_cli_options(p, "--device", "--iterations", defaults={"--device": "cuda", "--iterations": 1000})
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here (use --device cpu to run the same code path)")
    dev = _fit(args.device, torch.float32, args.iterations)
    ref = _fit("cpu", torch.float64, args.iterations)
    out = {"device": dev["device"], "card": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
           "iterations": args.iterations, "seconds_device_float32": round(dev["seconds"], 2),
           "seconds_cpu_float64": round(ref["seconds"], 2), "elbo_device_float32": round(dev["elbo"], 3),
           "elbo_cpu_float64": round(ref["elbo"], 3), "period_device": round(dev["period"], 5),
           "period_cpu": round(ref["period"], 5), "parts": dev["names"],
           "parts_mean_max_abs_diff": float((dev["parts_mean"] - ref["parts_mean"]).abs().max()),
           "predictive_mean_max_abs_diff": float((dev["mean"] - ref["mean"]).abs().max())}
    print(json.dumps(out, indent=1))
    ok = abs(out["elbo_device_float32"] - out["elbo_cpu_float64"]) < 5.0 and abs(dev["period"] / ref["period"] - 1) < 0.005
    print("composite kernel on the device: " + ("as on the CPU (ELBO within 5 nats, period within 0.5 %)" if ok else
                                               "DIFFERS from the CPU"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
