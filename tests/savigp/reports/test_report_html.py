"""``savigp.report``'s page, parsed (html.parser): every section, figure (an embedded base64 PNG)
and number is there, on a small Gaussian model and a small Poisson model; nothing external; the
kernel search's table and the training trace when there are any; the parts' shares equal the
variance of predict_parts' means."""
import base64
import html as html_lib
import re
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

import savigp
from likelihoods import Gaussian, Poisson

N = 60


class _Page(HTMLParser):
    """The sections' ids, the images' sources, the text, every tag and attribute."""

    def __init__(self, text: str):
        super().__init__()
        self.sections, self.images, self.tags, self.attrs, self.chunks = [], [], [], [], []
        self.feed(text)
        self.text = " ".join(self.chunks)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        if tag == "img":
            self.images.append(attrs["src"])

    def handle_data(self, data):
        self.chunks.append(data)


def _data(seed: int):
    g = torch.Generator().manual_seed(seed)
    X = torch.sort(torch.rand(N, 1, generator=g, dtype=torch.float64) * 6, dim=0).values
    return X, g


def _fit(X, Y, likelihood, kernel):
    model = savigp.SAVIGP(X, Y, likelihood, num_inducing=15, kernel=kernel)
    history = savigp.fit(model, iterations=15, optimizer="lbfgs", progress=False)
    return model, history


@pytest.fixture(scope="module")
def gaussian():
    torch.set_default_dtype(torch.float64)
    X, g = _data(0)
    Y = torch.sin(2 * torch.pi * X) + 0.3 * X + 0.2 * torch.randn(N, 1, generator=g, dtype=torch.float64)
    model, history = _fit(X, Y, Gaussian(), "periodic(period=1) * rbf(lengthscale=5) + linear")
    return model, history, X.numpy(), Y.numpy()


@pytest.fixture(scope="module")
def poisson():
    torch.set_default_dtype(torch.float64)
    X, g = _data(1)
    Y = torch.poisson(torch.exp(1 + torch.sin(X)), generator=g)
    model, history = _fit(X, Y, Poisson(), "rbf")
    return model, history, X.numpy(), Y.numpy()


def _png_images(page):
    out = []
    for src in page.images:
        assert src.startswith("data:image/png;base64,"), src[:40]
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
        out.append(data)
    return out


def _self_contained(text: str, page) -> None:
    assert "<script" not in text and "http://" not in text and "https://" not in text
    assert all(not (k in ("src", "href") and not v.startswith("data:")) for k, v in page.attrs)


def test_a_gaussian_models_page_has_every_section_figure_and_number(gaussian, tmp_path):
    model, history, X, Y = gaussian
    path = tmp_path / "report.html"
    text = savigp.report(model, X, Y, X_test=X[:20], Y_test=Y[:20], history=history, path=str(path),
                         num_samples=300, input_names=["time"], target_names=["y"])
    assert path.read_text() == text
    page = _Page(text)
    _self_contained(text, page)
    assert page.sections == ["model", "parts", "fit", "checks", "training"]  # no search: none kept
    assert len(_png_images(page)) == 2 + 3  # a figure per kernel part, fit, residuals, ELBO trace
    words = page.text
    assert "Gaussian noise with sd" in words
    assert re.search(r"a cycle in time with a period of 1(\.\d+)? \(time\) whose shape changes over about [\d.]+ \(time\)",
                     words), words[:800]
    assert "a linear trend in time" in words
    parts = savigp.predict_parts(model, X, columns=["time"])
    mean = parts.mean[0].numpy()
    for j, name in enumerate(parts.names[0]):
        share = 100 * mean[:, j].var() / mean.sum(1).var()
        assert f"{name}: " in words and f"{share:.1f}% of the latent variance" in words
    for level in ("50%", "80%", "95%"):
        assert len(re.findall(rf"(training|test) {level} [\d.]+%", words)) == 2
    assert re.search(r"KS p-value", words) and "Randomized quantile residuals" in words
    assert f"{len(history.elbo)} steps; last ELBO {history.elbo[-1]:.6g}. Verdict: " in words
    assert "share of zeros" not in words  # continuous targets: no simulated statistics


def test_a_poisson_models_page_compares_simulated_and_observed_statistics(poisson):
    model, _, X, Y = poisson
    text = savigp.report(model, X, Y, num_samples=300)
    page = _Page(text)
    _self_contained(text, page)
    assert page.sections == ["model", "parts", "fit", "checks", "training"]
    assert len(_png_images(page)) == 1 + 2  # the kernel's part, fit, residuals (no trace given)
    words = page.text
    assert "Poisson counts whose log-rate is the latent function" in words
    assert "a smooth trend in x0, varying over about" in words
    assert "No training trace was given" in words
    for stat, observed in (("mean", Y.mean()), ("variance", Y.var()), ("share of zeros", (Y == 0).mean()),
                           ("max", Y.max())):
        assert f"n {stat} {observed:.4g} " in words.replace("y0 ", "n ")
    assert len(re.findall(r"training (50|80|95)% [\d.]+%", words)) == 3 and "test " not in words


def test_the_search_table_and_a_stored_trace_of_a_model_file_are_shown(gaussian, tmp_path):
    model, history, X, Y = gaussian
    savigp.save(model, str(tmp_path / "m.pt"))
    saved = savigp.load(str(tmp_path / "m.pt"))
    text = savigp.report(saved, X, Y, num_samples=200)
    assert "The ELBO per step is not stored in the model file" in _Page(text).text
    saved.config["training"] = {"elbo_trace": [float(v) for v in history.elbo], "kernel_search": {
        "expression": "periodic * rbf + linear", "complete": False, "seconds": 4.5, "table": [
        {"level": 1, "expression": "rbf", "elbo": -80.5, "elbo_stderr": 0.1, "num_hypers": 2, "score": -84.6,
         "seconds": 1.5, "converged": True, "chosen": False},
        {"level": 2, "expression": "periodic * rbf + linear", "elbo": -20.25, "elbo_stderr": 0.1, "num_hypers": 5,
         "score": -30.5, "seconds": 3.0, "converged": True, "chosen": True}]}}
    page = _Page(savigp.report(saved, X, Y, num_samples=200))
    assert page.sections[-1] == "search"
    assert "periodic * rbf + linear -20.25" in page.text and "level expression ELBO" in page.text
    assert "Chosen: periodic * rbf + linear (4 s, stopped by its time budget)." in page.text
    assert "failed" not in page.text  # no candidate failed: no such column
    assert f"{len(history.elbo)} steps; last ELBO" in page.text and len(page.images) == 2 + 3


def test_text_is_escaped_and_bad_shapes_name_both_shapes(gaussian):
    model, _, X, Y = gaussian
    text = savigp.report(model, X, Y, num_samples=100, title="<b>CO2 & friends</b>", input_names=["<t>"])
    assert html_lib.escape("<b>CO2 & friends</b>") in text and "<b>CO2" not in text
    with pytest.raises(ValueError, match=r"Y must have shape \(60, 1\), got \(59, 1\)"):
        savigp.report(model, X, Y[:59])
    with pytest.raises(ValueError, match=r"X must have shape \(N, 1\), got \(60, 2\)"):
        savigp.report(model, np.c_[X, X], Y)
    with pytest.raises(ValueError, match="num_samples must be >= 1, got 0"):
        savigp.report(model, X, Y, num_samples=0)


def test_the_checks_of_a_large_file_use_a_random_subset_of_its_rows(gaussian, monkeypatch):
    from savigp.reports import document

    model, _, X, Y = gaussian
    monkeypatch.setattr(document, "MAX_CHECK_ROWS", 25)
    words = _Page(savigp.report(model, X, Y, X_test=X[:30], Y_test=Y[:30], num_samples=100)).text
    assert "use a random 25 of the 60 training rows. The fit and its checks use a random 25 of the 30 test rows." \
        in words
    assert len(re.findall(r"(training|test) (50|80|95)% [\d.]+% [\d.]+% 25 ", words)) == 6
