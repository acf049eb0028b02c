"""The report rendered by a real headless browser (Chromium; skipped where none is installed): the
page loads offline from its one file and every figure decodes (the DOM after loading reports each
image's natural width). The screenshots of docs/report.md are taken by
``python -m experiments.report_screenshots``."""
import shutil
import subprocess

import pytest
import torch

import savigp
from likelihoods import Gaussian

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install chromium)")

#: a script only the test adds: it writes each image's natural width into the DOM once loaded
PROBE = ("<script>window.addEventListener('load', () => { document.body.setAttribute('data-widths', "
         "Array.from(document.images).map(i => i.naturalWidth).join(',')); });</script>")


def _browser(*args, timeout=60):
    return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
                          capture_output=True, text=True, timeout=timeout, check=True)


def test_chromium_renders_every_figure_of_the_page(tmp_path):
    g = torch.Generator().manual_seed(0)
    X = torch.linspace(0, 5, 40, dtype=torch.float64)[:, None]
    Y = torch.sin(2 * X) + 0.2 * torch.randn(40, 1, generator=g, dtype=torch.float64)
    model = savigp.SAVIGP(X, Y, Gaussian(), num_inducing=10)
    history = savigp.fit(model, iterations=10, optimizer="lbfgs", progress=False)
    text = savigp.report(model, X.numpy(), Y.numpy(), history=history, num_samples=200)
    page = tmp_path / "report.html"
    page.write_text(text.replace("</body>", PROBE + "</body>"))
    dom = _browser("--dump-dom", "--virtual-time-budget=5000", page.as_uri()).stdout
    widths = [int(w) for w in dom.split('data-widths="', 1)[1].split('"', 1)[0].split(",")]
    assert len(widths) == text.count("<img ") == 4 and min(widths) > 500
