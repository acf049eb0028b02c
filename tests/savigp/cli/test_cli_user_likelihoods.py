"""User likelihoods end to end through the command line, from user files written here: counts with
a learned dispersion and a mean function, a probit and an ordinal classifier (cut-points learned),
a hand-written multi-class softmax (differentiable), a ``Likelihood`` subclass as
``file.py:Class``; non-finite values (exit 3, file lines, f values, the floor); the options'
errors; pictures. Mostly in-process (``main``) to pay the torch import once."""
from __future__ import annotations

import hashlib
import json
import math
import sys

import numpy as np
import pytest
import torch

from savigp.cli import EXIT_BAD_INPUT, EXIT_NON_FINITE, main
from savigp.io.csv_data import write_csv
from savigp.model_files import load_model
from savigp.model_files.user_code import function_binding

FAST = ["--num-inducing", "8", "--samples", "10", "--threads", "1"]

NB = '''
import numpy as np
from scipy.special import gammaln


def log_lik(y, f, r):
    """Negative binomial counts with mean exp(f) and dispersion r."""
    mu = np.exp(f[..., 0])
    y = y[:, 0]
    return gammaln(y + r) - gammaln(r) - gammaln(y + 1) + r * np.log(r / (r + mu)) + y * np.log(mu / (r + mu))


def mean(f, r):
    mu = np.exp(f)
    return mu, mu + mu ** 2 / r


def mean_only(f):
    return np.exp(f[..., 0])
'''

CLASSIFIERS = '''
import numpy as np
import torch
from scipy import stats


def probit(y, f):
    """Labels -1 / +1."""
    return stats.norm.logcdf(np.sign(y[:, 0]) * f[..., 0])


def ordinal(y, f, c0, gaps):
    """Labels 0..3; the naive log of a CDF difference (underflows to -inf for far-out f)."""
    cuts = np.concatenate([[-np.inf, c0], c0 + np.cumsum(gaps), [np.inf]])
    k = y[:, 0].astype(int)
    with np.errstate(divide="ignore"):
        return np.log(stats.norm.cdf(cuts[k + 1] - f[..., 0]) - stats.norm.cdf(cuts[k] - f[..., 0]))


def softmax(y, f):
    """Three classes, written by hand in torch."""
    return torch.gather(f, -1, y.long().expand(f.shape[:-1] + (1,))).squeeze(-1) - torch.logsumexp(f, -1)


def broken(y, f):
    out = -0.5 * (y[:, 0] - f[..., 0]) ** 2
    return np.where(y[:, 0] > 12, np.nan, out)


def one_latent(y, f):
    return -0.5 * (y[:, 0] - f[..., 0]) ** 2
'''

SUBCLASS = '''
import torch
from torch import nn
from likelihoods import Likelihood


class Laplace(Likelihood):
    """Laplace noise with a learned scale; constructor argument scale."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.log_scale = nn.Parameter(torch.tensor(float(scale)).log())

    def log_prob(self, y, f):
        b = self.log_scale.exp()
        return -(y[:, 0] - f[..., 0]).abs() / b - torch.log(2 * b)

    def conditional_moments(self, f):
        b = self.log_scale.exp()
        return f[..., :1], (2 * b * b).expand_as(f[..., :1])
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("user")
    (d / "nb.py").write_text(NB)
    (d / "clf.py").write_text(CLASSIFIERS)
    (d / "sub.py").write_text(SUBCLASS)
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 80)
    f = 1.5 + np.sin(2 * x)
    counts = rng.poisson(rng.gamma(4.0, np.exp(f) / 4.0))
    write_csv(str(d / "counts.csv"), ["x", "n"], np.column_stack([x, counts]))
    X2 = rng.standard_normal((60, 2))
    pm = np.where(X2[:, 0] + X2[:, 1] + 0.3 * rng.standard_normal(60) > 0, 1.0, -1.0)
    write_csv(str(d / "pm.csv"), ["a", "b", "label"], np.column_stack([X2, pm]))
    lat = 2 * np.sin(x)
    grade = np.digitize(lat + rng.standard_normal(80), [-1.0, 0.0, 1.0])
    write_csv(str(d / "grades.csv"), ["x", "g"], np.column_stack([x, grade]))
    three = np.argmax(X2 @ np.array([[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]]), 1)
    write_csv(str(d / "three.csv"), ["a", "b", "c"], np.column_stack([X2, three]))
    write_csv(str(d / "reg.csv"), ["x", "y"], np.column_stack([x, np.sin(2 * x) + 0.1 * rng.standard_normal(80)]))
    return d


def _run(capsys, *args):
    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_counts_with_learned_dispersion_and_mean_function(files, capsys):
    d = files
    model = d / "nb.pt"
    code, out, err = _run(capsys, "train", d / "counts.csv", "--targets", "n", "--likelihood", d / "nb.py:log_lik",
                          "--lik-param", "r=1.0:positive", "--mean-function", d / "nb.py:mean", "--iterations", "40",
                          "--lr", "0.1", "--out", model, *FAST)
    assert code == 0, err
    assert "estimator: score (values of the likelihood only" in err and "estimator score" in out
    cfg = torch.load(model, weights_only=True)
    kw = cfg["config"]["likelihood"]["kwargs"]
    assert kw["params"] == {"r": 1.0} and kw["constraints"] == {"r": "positive"}
    # the mean function is code: recorded apart from kwargs, with its SHA-256, run only with consent
    ref = cfg["config"]["likelihood"]["code_kwargs"]["mean_fn"]
    assert "mean_import_path" not in kw and ref["import_path"] == f"{d}/nb.py:mean" and len(ref["sha256"]) == 64
    saved, _ = load_model(str(model), likelihood=str(d / "nb.py"))  # the file alone: the recorded names
    r = saved.model.likelihood.parameter_values()["r"]
    assert r > 1.5  # learned from 1 (truth 4); the file holds the learned value
    code, out, err = _run(capsys, "evaluate", model, d / "counts.csv", "--json", "--likelihood", d / "nb.py:log_lik")
    assert code == 0, err
    assert set(json.loads(out)) == {"n", "nlpd", "sse", "mse", "mae"}
    code, out, err = _run(capsys, "predict", model, d / "counts.csv", "--trust-code")
    assert code == 0 and out.splitlines()[0] == "mean_n,var_n"
    assert "latent predictions only" not in err
    # the same predictions from Python, documented as the same fields
    pred = saved.predict(np.loadtxt(d / "counts.csv", delimiter=",", skiprows=1)[:, :1])
    got = np.loadtxt(out.splitlines()[1:], delimiter=",")
    assert np.array_equal(got[:, 0], pred.numpy()["mean"][:, 0]) and np.array_equal(got[:, 1], pred["variance"][:, 0].numpy())
    # a mean function without the variance: a mean column, no variance column (never NaN)
    code, out, err = _run(capsys, "train", d / "counts.csv", "--targets", "n", "--likelihood", d / "nb.py:log_lik",
                          "--lik-param", "r=4.0:fixed", "--mean-function", d / "nb.py:mean_only", "--iterations", "5",
                          "--out", d / "nb2.pt", "--quiet", *FAST)
    assert code == 0 and "trained 5 step(s)" in out, err  # --quiet keeps the summary
    code, out, err = _run(capsys, "predict", d / "nb2.pt", d / "counts.csv", "--latent", "--trust-code")
    assert out.splitlines()[0] == "mean_n,latent_mean_0,latent_var_0" and "nan" not in out
    # no mean function at all: latent columns only, and predict says so (issue 28)
    code, out, err = _run(capsys, "train", d / "counts.csv", "--targets", "n", "--likelihood", d / "nb.py:log_lik",
                          "--lik-param", "r=4.0:fixed", "--iterations", "2", "--out", d / "nb3.pt", "--quiet", *FAST)
    assert code == 0, err
    code, out, err = _run(capsys, "predict", d / "nb3.pt", d / "counts.csv", "--likelihood", d / "nb.py:log_lik")
    assert code == 0 and out.splitlines()[0] == "latent_mean_0,latent_var_0"
    assert "latent predictions only: the likelihood gives no predictive mean; pass --mean-function" in err, err


def test_probit_and_ordinal_classifiers_from_a_user_file(files, capsys):
    d = files
    code, out, err = _run(capsys, "train", d / "pm.csv", "--targets", "label", "--likelihood", d / "clf.py:probit",
                          "--task", "classification", "--iterations", "40", "--lr", "0.05", "--out", d / "p.pt", *FAST)
    assert code == 0, err
    code, out, err = _run(capsys, "predict", d / "p.pt", d / "pm.csv", "--likelihood", d / "clf.py:probit")
    rows = out.splitlines()
    assert rows[0] == "prob_-1,prob_1,predicted_label", err  # no mean of unordered labels
    P = np.loadtxt(rows[1:], delimiter=",")
    assert np.allclose(P[:, 0] + P[:, 1], 1) and set(P[:, 2]) <= {-1.0, 1.0}
    code, out, err = _run(capsys, "evaluate", d / "p.pt", d / "pm.csv", "--json", "--likelihood", d / "clf.py")
    m = json.loads(out)
    assert set(m) == {"n", "error_rate", "nlp"} and m["error_rate"] < 0.25 and m["nlp"] < math.log(2)

    # ordinal: 4 labels, learned cut-points; its naive log(Phi - Phi) needs the floor
    args = ["train", d / "grades.csv", "--targets", "g", "--likelihood", d / "clf.py:ordinal", "--task",
            "classification", "--num-classes", "4", "--lik-param", "c0=-0.5", "--lik-param", "gaps=0.5,0.5:positive",
            "--lik-option", "ordered=True", "--iterations", "60", "--lr", "0.05", "--out", d / "o.pt", *FAST]
    code, out, err = _run(capsys, *args, "--min-log-prob", "-200")
    assert code == 0, err
    saved, _ = load_model(str(d / "o.pt"), trust_code=True)
    lik = saved.model.likelihood
    assert lik.classes == [0.0, 1.0, 2.0, 3.0] and lik.min_log_prob == -200.0
    assert not torch.equal(lik.raw_params["gaps"], torch.as_tensor([0.5, 0.5]))  # learned
    code, out, err = _run(capsys, "evaluate", d / "o.pt", d / "grades.csv", "--json", "--trust-code")
    assert json.loads(out)["nlp"] < math.log(4)
    # ordered labels: the mean and variance of the grade are written beside the probabilities
    assert lik.ordered
    code, out, err = _run(capsys, "predict", d / "o.pt", d / "grades.csv", "--trust-code")
    assert out.splitlines()[0] == "mean_g,var_g,prob_0,prob_1,prob_2,prob_3,predicted_g", err


def test_differentiable_softmax_and_a_likelihood_subclass(files, capsys):
    d = files
    code, out, err = _run(capsys, "train", d / "three.csv", "--targets", "c", "--likelihood", d / "clf.py:softmax",
                          "--num-latent", "3", "--task", "classification", "--lik-option", "differentiable=True",
                          "--iterations", "30", "--lr", "0.05", "--out", d / "s.pt", *FAST)
    assert code == 0, err
    assert "estimator: reparam" in err and "estimator reparam" in out
    code, out, err = _run(capsys, "predict", d / "s.pt", d / "three.csv", "--likelihood", d / "clf.py:softmax")
    assert out.splitlines()[0] == "prob_0,prob_1,prob_2,predicted_c"  # unordered classes: no mean of the label
    # a numpy function declared differentiable: refused with the reason
    code, out, err = _run(capsys, "train", d / "pm.csv", "--targets", "label", "--likelihood", d / "clf.py:probit",
                          "--lik-option", "differentiable=True", "--iterations", "2", "--out", d / "x.pt", *FAST)
    assert code == EXIT_BAD_INPUT and "declared differentiable=True" in err and "A numpy function" in err

    code, out, err = _run(capsys, "train", d / "reg.csv", "--targets", "y", "--likelihood", d / "sub.py:Laplace",
                          "--lik-option", "scale=0.5", "--iterations", "30", "--lr", "0.05", "--out", d / "l.pt", *FAST)
    assert code == 0, err
    assert "estimator: reparam" in err
    cfg = torch.load(d / "l.pt", weights_only=True)["config"]["likelihood"]
    assert cfg == {"name": "user-class", "class": "Laplace", "import_path": f"{d}/sub.py:Laplace",
                   "sha256": hashlib.sha256((d / "sub.py").read_bytes()).hexdigest(), "kwargs": {"scale": 0.5},
                   "function_sha256": function_binding((d / "sub.py").read_bytes(), "Laplace")}
    code, out, err = _run(capsys, "evaluate", d / "l.pt", d / "reg.csv", "--json")
    assert code == 2 and "never runs code it names" in err  # a class is code: run only with consent
    code, out, err = _run(capsys, "evaluate", d / "l.pt", d / "reg.csv", "--json", "--likelihood", d / "sub.py")
    assert code == 0 and json.loads(out)["sse"] < 0.5


def test_non_finite_values_exit_3_with_file_lines_and_f_values(files, capsys):
    d = files
    code, out, err = _run(capsys, "train", d / "counts.csv", "--targets", "n", "--likelihood", d / "clf.py:broken",
                          "--iterations", "3", "--out", d / "b.pt", *FAST)
    first = 2 + int(np.argmax(np.loadtxt(d / "counts.csv", delimiter=",", skiprows=1)[:, 1] > 12))
    assert code == EXIT_NON_FINITE
    assert f"user likelihood 'broken' ({d}/clf.py, line " in err and f"counts.csv line {first}: y = [" in err
    assert "f = [" in err and "-> nan" in err and err.count("\n") == 2  # the estimator line, then one error line
    # the naive ordinal without a floor: -inf, and the message suggests the option
    code, out, err = _run(capsys, "train", d / "grades.csv", "--targets", "g", "--likelihood", d / "clf.py:ordinal",
                          "--task", "classification", "--lik-param", "c0=8", "--lik-param", "gaps=0.5,0.5:positive",
                          "--iterations", "2", "--out", d / "b.pt", *FAST)
    assert code == EXIT_NON_FINITE and "-> -inf" in err and "--min-log-prob" in err


def test_user_likelihood_option_errors(files, capsys):
    d = files
    base = ["train", d / "reg.csv", "--targets", "y", "--iterations", "2", "--out", d / "e.pt", *FAST]
    cases = [
        (["--likelihood", d / "clf.py:one_latent", "--standardize-targets"], "does not apply to a user likelihood"),
        (["--likelihood", d / "clf.py:one_latent", "--lik-option", "r=5"], "--lik-param r=VALUE (learned)"),
        (["--likelihood", d / "clf.py:one_latent", "--lik-param", "r=x"], "'x' is not a number"),
        (["--likelihood", "gaussian", "--task", "classification"], "--task does not apply to --likelihood gaussian"),
        (["--likelihood", d / "sub.py:Laplace", "--lik-param", "r=1"], "--lik-param does not apply"),
        (["--likelihood", d / "clf.py:one_latent", "--mean-function", d / "nb.py:nope"], "defines no function 'nope'"),
        (["--likelihood", d / "clf.py:one_latent", "--num-classes", "3"], "--num-classes applies to a user function "
                                                                          "with --task classification"),
        (["--likelihood", d / "clf.py:one_latent", "--lik-param", "r=1"], "has no parameter 'r' (its parameters after (y, f): none)"),
    ]
    for extra, needle in cases:
        code, out, err = _run(capsys, *base, *extra)
        assert code == EXIT_BAD_INPUT and needle in err and err.count("error:") == 1, (extra, err)
    code, out, err = _run(capsys, *base, "--likelihood", d / "clf.py:one_latent", "--num-latent", "3")
    assert code == 0 and "warning: latent function(s) [1, 2] of Q = 3 do not change" in err
    # the KeyError: 'num_classes' for --lik-option task=classification
    code, out, err = _run(capsys, "train", d / "pm.csv", "--targets", "label", "--likelihood", d / "clf.py:probit",
                          "--lik-option", "task=classification", "--iterations", "2", "--out", d / "t.pt", *FAST)
    assert code == 0, err
    assert torch.load(d / "t.pt", weights_only=True)["config"]["class_labels"] == [-1.0, 1.0]


def test_label_set_errors_are_the_likelihoods_checks_in_one_line(files, capsys):
    """--task classification: the label set (--num-classes, else the target column's values) and the
    one label column are checked once, by the likelihood's rule (likelihoods.callable.label_set),
    and reported in one line with exit 2."""
    d = files
    write_csv(str(d / "one_label.csv"), ["a", "label"], np.column_stack([np.arange(12.0), np.ones(12)]))
    base = ["train", "--likelihood", d / "clf.py:probit", "--task", "classification", "--iterations", "1",
            "--out", d / "lab.pt", *FAST]
    cases = [
        ([d / "pm.csv", "--targets", "label", "--num-classes", "1"], "num_classes must be an integer >= 2, got 1"),
        ([d / "one_label.csv", "--targets", "label"], "hold only the label(s) [1.0]"),
        ([d / "pm.csv", "--targets", "a,label"], "takes one column of labels (output_dim=1), got output_dim=2"),
    ]
    for extra, needle in cases:
        code, out, err = _run(capsys, *base[:1], *extra, *base[1:])
        assert code == EXIT_BAD_INPUT and needle in err and err.count("\n") == 1, (extra, err)
    assert not (d / "lab.pt").exists()


def test_plots_from_train_and_predict(files, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    d = files
    code, out, err = _run(capsys, "train", d / "pm.csv", "--targets", "label", "--likelihood", d / "clf.py:probit",
                          "--task", "classification", "--iterations", "20", "--out", d / "pp.pt", "--plot",
                          d / "elbo.png", *FAST)
    assert code == 0, err
    code, out, err = _run(capsys, "predict", d / "pp.pt", d / "pm.csv", "--out", d / "pp.csv", "--plot", d / "fit2.png",
                          "--samples", "20", "--trust-code")
    assert code == 0, err
    code, out, err = _run(capsys, "train", d / "reg.csv", "--targets", "y", "--likelihood", d / "sub.py:Laplace",
                          "--iterations", "10", "--out", d / "l1.pt", *FAST)
    assert code == 0, err
    code, out, err = _run(capsys, "predict", d / "l1.pt", d / "reg.csv", "--out", d / "p1.csv", "--plot",
                          d / "fit1.png", "--samples", "20", "--likelihood", d / "sub.py:Laplace")
    assert code == 0, err
    for name in ("elbo.png", "fit2.png", "fit1.png"):
        assert (d / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # without matplotlib: one line naming the extra, before any work
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = _run(capsys, "predict", d / "pp.pt", d / "pm.csv", "--plot", d / "x.png")
    assert code == EXIT_BAD_INPUT and "pip install 'savigp[plots]'" in err and err.count("\n") == 1
    assert not (d / "x.png").exists()


def test_resume_with_a_mean_function_and_a_checkpoint_of_an_older_version(files, capsys):
    """``--resume`` runs the command line's --likelihood and --mean-function; options a checkpoint
    written before they existed does not record compare against their defaults (not refused),
    while a recorded option that differs still is."""
    d = files
    model = d / "resume.pt"
    args = ["train", d / "counts.csv", "--targets", "n", "--likelihood", d / "nb.py:log_lik", "--lik-param",
            "r=2.0:fixed", "--mean-function", d / "nb.py:mean", "--out", model, "--quiet", *FAST]
    code, out, err = _run(capsys, *args, "--iterations", "3")
    assert code == 0, err
    p = torch.load(model, weights_only=True)
    options = p["config"]["training"]["options"]
    for key in ("mean_basis", "task", "min_log_prob", "kernel"):  # as an older savigp wrote it
        options.pop(key)
    p.pop("content_sha256", None)  # (edited: as a file written before the content digest)
    torch.save(p, model)
    code, out, err = _run(capsys, *args, "--iterations", "5", "--resume")
    assert code == 0 and "trained 5 step(s) (2 in this run" in out, err
    # a missing option compares with its default: another value is refused
    torch.save(p, model)
    code, out, err = _run(capsys, *args, "--iterations", "5", "--resume", "--kernel", "matern32")
    assert code == EXIT_BAD_INPUT and "--kernel is 'matern32' here but" in err and "'rbf'" in err, err
    # the mean function is part of what is resumed: leaving it out is refused, not silently dropped
    code, out, err = _run(capsys, *[a for a in args if a not in ("--mean-function", d / "nb.py:mean")],
                          "--iterations", "5", "--resume")
    assert code == EXIT_BAD_INPUT and "--mean-function" in err, err


LOGNORMAL = '''
import numpy as np


def log_lik(y, f, s):
    """Log-normal survival times, median exp(f), log-scale s, in numpy."""
    z = (np.log(y[:, 0]) - f[..., 0]) / s
    return -np.log(y[:, 0]) - np.log(s) - 0.5 * np.log(2 * np.pi) - 0.5 * z ** 2
'''


def test_a_numpy_likelihood_with_a_learned_scale_trains_with_the_defaults(files, capsys):
    """Issue 54: --lik-param s=1:positive on numpy code that reads s failed with "Can't call
    numpy() on Tensor that requires grad"; it is now run as numpy and s is learned. Without
    --prior-mean the prior mean starts at the log-times' best constant (about 5, far from 0), and
    a note says so."""
    d = files
    (d / "lognormal.py").write_text(LOGNORMAL)
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, 60)
    log_t = 5 + np.sin(x) + 0.5 * rng.standard_normal(60)
    write_csv(str(d / "times.csv"), ["x", "t"], np.column_stack([x, np.exp(log_t)]))
    code, out, err = _run(capsys, "train", d / "times.csv", "--targets", "t", "--likelihood", d / "lognormal.py:log_lik",
                          "--lik-param", "s=1:positive", "--iterations", "30", "--lr", "0.05", "--out", d / "ln.pt",
                          *FAST)
    assert code == 0, err
    assert "without --prior-mean the prior mean starts at the targets' best constant latent value, 5.0" in err, err
    saved, _ = load_model(str(d / "ln.pt"), likelihood=str(d / "lognormal.py"))
    assert float(saved.model.prior_mean[0]) == pytest.approx(log_t.mean(), abs=1e-3)
    assert saved.model.likelihood.parameter_values()["s"] < 1.0  # learned from 1 towards the truth about 0.9


CENSORED = '''
import numpy as np
from scipy import stats


def log_lik(y, f, s):
    """Right-censored log-normal: y = (days, died), died = 1 a death seen that day, 0 censored then."""
    z = (np.log(y[:, 0]) - f[..., 0]) / s
    event = -np.log(y[:, 0]) - np.log(s) - 0.5 * np.log(2 * np.pi) - 0.5 * z ** 2
    return np.where(y[:, 1] == 1, event, stats.norm.logsf(z))
'''


def test_predict_plots_a_survival_target_as_the_median_time_and_says_so(files, capsys):
    """Issue 54: a two-column target (time, death indicator) drew the latent panel only while the
    note said it drew y's median; now the panel of the median survival time is drawn, and said."""
    pytest.importorskip("matplotlib")
    d = files
    (d / "censored.py").write_text(CENSORED)
    rng = np.random.default_rng(4)
    x = rng.uniform(20, 60, 50)
    t, c = np.round(np.exp(5 + 0.02 * (x - 40) + 0.8 * rng.standard_normal(50))) + 1, np.exp(rng.uniform(4, 7, 50))
    write_csv(str(d / "heart.csv"), ["age", "days", "died"], np.column_stack([x, np.minimum(t, c), t <= c]))
    code, out, err = _run(capsys, "train", d / "heart.csv", "--targets", "days,died", "--inputs", "age", "--likelihood",
                          d / "censored.py:log_lik", "--lik-param", "s=1:positive", "--iterations", "5",
                          "--standardize-inputs", "--out", d / "surv.pt", "--quiet", *FAST)
    assert code == 0, err
    code, out, err = _run(capsys, "predict", d / "surv.pt", d / "heart.csv", "--out", d / "surv.csv", "--plot",
                          d / "surv.png", "--samples", "20", "--likelihood", d / "censored.py:log_lik")
    assert code == 0, err
    assert ("note: the plot draws the median days with its 95% interval, read off the density of days when the event "
            "is seen (died = 1), with the events and the censored rows marked apart") in err, err
    assert (d / "surv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
