"""``savigp.report`` of a classifier on two input columns with a part on each (``rbf(0) + rbf(1)``):
a figure per part, drawn against that part's own column (the x values handed to the figure are the
column's, and the alt text and caption name it); the fit is the classifier's accuracy, Brier score
and reliability on the training and test rows with a map of the predicted probability over the two
columns; the residuals are drawn against both columns."""
import re
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

import savigp
from likelihoods import Logistic
from savigp.reports import figures

N = 80


class _Figures(HTMLParser):
    """Each figure's alt text and caption, and the page's text."""

    def __init__(self, text: str):
        super().__init__()
        self.alts, self.captions, self.chunks, self._in_caption = [], [], [], False
        self.feed(text)
        self.text = " ".join(self.chunks)

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.alts.append(dict(attrs)["alt"])
        self._in_caption = tag == "figcaption"

    def handle_endtag(self, tag):
        self._in_caption = False

    def handle_data(self, data):
        self.chunks.append(data)
        if self._in_caption:
            self.captions.append(data)


@pytest.fixture(scope="module")
def classifier():
    torch.set_default_dtype(torch.float64)
    g = torch.Generator().manual_seed(3)
    X = torch.stack([torch.rand(N, generator=g, dtype=torch.float64) * 4,
                     10 + torch.rand(N, generator=g, dtype=torch.float64) * 20], dim=1)
    logit = 2 * torch.sin(X[:, 0]) + 0.2 * (X[:, 1] - 20)
    Y = (torch.rand(N, generator=g, dtype=torch.float64) < torch.sigmoid(logit)).to(torch.float64)[:, None]
    model = savigp.SAVIGP(X, Y, Logistic(), num_inducing=15, kernel="rbf(0) + rbf(1)")
    savigp.fit(model, iterations=10, optimizer="lbfgs", progress=False)
    return model, X.numpy(), Y.numpy()


def test_each_part_of_a_two_column_classifier_is_drawn_against_its_own_column(classifier, monkeypatch):
    model, X, Y = classifier
    drawn = []
    original = figures.parts_png

    def recording(xs, names, *args, **kwargs):
        drawn.append((list(names), [np.asarray(x) for x in xs]))
        return original(xs, names, *args, **kwargs)

    monkeypatch.setattr(figures, "parts_png", recording)
    text = savigp.report(model, X, Y, X_test=X[:30], Y_test=Y[:30], num_samples=200,
                         input_names=["size", "age"], target_names=["sick"])
    page = _Figures(text)
    parts = savigp.predict_parts(model, X, columns=["size", "age"])
    for name, column, d in (("rbf(size)", "size", 0), ("rbf(age)", "age", 1)):
        assert name in parts.names[0]
        assert f"part {name} against {column}" in page.alts, page.alts
        assert any(c.startswith(f"{name}: ") and c.endswith(f"against {column}.") for c in page.captions)
        (xs,) = [xs for names, xs in drawn if names == [name]]
        np.testing.assert_array_equal(xs[0], X[:, d])
    # the classifier's fit: accuracy and Brier score on both data sets, and a reliability diagram
    assert re.search(r"training 80 [\d.]+% [\d.]+", page.text) and re.search(r"test 30 [\d.]+% [\d.]+", page.text)
    assert "reliability of the predicted probabilities" in page.alts and "predicted interval" not in page.text
    assert any("against size, age (dashed" in c for c in page.captions)
    assert "probability of the positive class of sick over size and age" in page.alts
    # the parts' words say where each part is lowest and highest, in its own column's values
    mean = parts.mean[0].numpy()
    j = parts.names[0].index("rbf(age)")
    assert f"highest ({mean[:, j].max():.3g}) at age {X[np.argmax(mean[:, j]), 1]:.4g}" in page.text
