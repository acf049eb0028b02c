"""savigp.tune_cpu_allocator and fit's ``tune_allocator`` switch, each in a fresh process (the
setting is process-wide); and a smoke run of ``python -m experiments.allocator_effect``. Speed is measured by
that script, never asserted here."""
from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from conftest import ROOT  # noqa: E402  (the repository root)
GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

_FIT = """
import json, torch, savigp
from savigp.runtime.allocator import cpu_allocator_tuned
from likelihoods import Gaussian
X = torch.linspace(0, 1, 30, dtype=torch.float64)[:, None]
model = savigp.SAVIGP(X, torch.sin(6 * X), Gaussian(0.1), num_inducing=5)
before = cpu_allocator_tuned()
savigp.fit(model, iterations=2, progress=False, tune_allocator={tune})
print(json.dumps({{"before": before, "after": cpu_allocator_tuned(), "again": savigp.tune_cpu_allocator()}}))
"""


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fit_tunes_the_allocator_once_unless_told_not_to():
    on = _run(_FIT.format(tune=True))
    assert on["before"] is None
    assert on["after"] is GLIBC and on["again"] is GLIBC  # idempotent: the second call reports the first
    off = _run(_FIT.format(tune=False))
    assert off["before"] is None and off["after"] is None


@pytest.mark.experiments
@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_allocator_effect_script_runs():
    out = subprocess.run([sys.executable, "-m", "experiments.allocator_effect", "--M", "20", "--B", "50",
                          "--S", "5", "--steps", "3", "--warmup", "1", "--pairs", "1", "--threads", "1"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    lines = [line for line in out.splitlines() if "median" in line]
    assert len(lines) == 2 and all(float(line.split("median ")[1].split(" ms")[0]) > 0 for line in lines)
