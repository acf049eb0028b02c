"""Kernels in model files (savigp/model_files/kernel_record.py, format 5): the spec of every kind of
kernel saved and loaded with bit-identical predictions (composites, active_dims, KernelList, a kernel
shared by Q > 1 latent functions, Fourier features / ODVFF), files of format 4 (a name and its
``kernel_ard``) loading as the specs they meant, and a tampered spec refused in one line naming the
field before anything is built."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import likelihoods
import savigp
from savigp.cli import main
from savigp.io.csv_data import write_csv
from savigp.kernels import RBF, KernelList, Linear, Periodic
from savigp.kernels.fourier_features import FourierFeatureKernel
from savigp.odvff import odvff_model
from savigp.model_files import ModelFileError, load_model


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 3, (n, 2))
    f = np.sin(2 * X[:, :1]) + 0.3 * X[:, 1:]
    return X, f + 0.1 * rng.standard_normal((n, 1))


def _rewrite(path, edit):
    """Edit a model file's payload; its content digest recomputed (or, for content nested deeper than
    the digest encodes, dropped: such a file loads unverified), so that the schema, not the
    integrity check, is what answers."""
    from savigp.model_files.file_format import content_digest

    p = torch.load(str(path), weights_only=True)
    edit(p)
    try:
        p["content_sha256"] = content_digest(p)
    except TypeError:
        del p["content_sha256"]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))  # (pickling values nested thousands deep; reading them needs no recursion)
    try:
        torch.save(p, str(path))
    finally:
        sys.setrecursionlimit(limit)


def _models():
    X, Y = _data()
    Y2 = np.hstack([Y, -Y])
    gauss, two = likelihoods.Gaussian, lambda: likelihoods.MultiGaussian(2)
    return {
        "sum-product-scale": savigp.SAVIGP(X, Y, gauss(), "scale(rbf(1) + periodic(0, period=1.5) * matern32(0)) + white",
                                           num_inducing=6),
        "periodic-active-dims-fixed-linear": savigp.SAVIGP(
            X, Y, gauss(), Periodic(2, 1, active_dims=[1], ard=False) + Linear(2, 1, offset=1.0, learn=False),
            num_inducing=6),
        "list": savigp.SAVIGP(X, Y2, two(), KernelList([RBF(2, 1, ard=False), Periodic(2, 1, active_dims=[0]) * RBF(2, 1)]),
                              num_inducing=5),
        "shared-Q2": savigp.SAVIGP(X, Y2, two(), "rq(0) * linear(1) + constant", shared_kernel=True, num_inducing=5),
        "odvff": odvff_model(X, Y, gauss(), nu=2.5, num_frequencies=3, mean_basis_size=4),
        "additive-matern": savigp.SAVIGP(X, Y, gauss(), "additive-matern(nu=0.5) + rbf", num_inducing=5,
                                         posterior="diag", num_components=2),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_a_kernel_of_every_kind_round_trips_bit_identically(tmp_path, name):
    model = _models()[name]
    savigp.fit(model, iterations=4, num_samples=4, progress=False, final_elbo=False)
    path = tmp_path / "m.pt"
    savigp.save(model, str(path))
    saved = savigp.load(str(path))
    options = saved.config["model_options"]
    assert isinstance(options["kernel"], dict) and "kernel_ard" not in options
    assert (options.get("fourier_features") is not None) == (name == "odvff")
    assert type(saved.model.kernel) is type(model.kernel)
    a, b = model.state_dict(), saved.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    Xt = np.random.default_rng(1).uniform(-1, 4, (9, 2))  # inside and outside the data (and ODVFF's interval)
    p, q = model.predict(Xt, num_samples=20), saved.predict(Xt, num_samples=20)
    for field in ("latent_mean", "latent_var", "mean", "variance"):
        assert torch.equal(getattr(p, field), getattr(q, field)), field
    if name == "odvff":
        assert isinstance(saved.model.kernel, FourierFeatureKernel) and saved.model.kernel.nu == 2.5
        assert torch.equal(saved.model.kernel.lower, model.kernel.lower)


@pytest.mark.parametrize("ard", [None, False, True])
def test_a_format_4_file_loads_as_the_spec_it_meant(tmp_path, ard):
    """Format 4 wrote a registered name and, from some version on, ``kernel_ard``; a file without
    it was ARD. Rewritten to that layout, a file loads with the same kernel and predictions."""
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, likelihoods.Gaussian(), RBF(2, 1, ard=ard is not False), num_inducing=5)
    path = tmp_path / "v4.pt"
    savigp.save(model, str(path))

    def to_v4(p):
        p["config"]["version"] = 4
        options = p["config"]["model_options"]
        options["kernel"] = "rbf"
        if ard is not None:
            options["kernel_ard"] = ard
    _rewrite(path, to_v4)
    saved = savigp.load(str(path))
    assert saved.config["version"] == savigp.model_files.VERSION == 5
    assert saved.config["model_options"]["kernel"] == {"kernel": "rbf", **({} if ard is None else {"ard": ard})}
    assert saved.model.kernel.ard is (ard is not False)
    Xt = X[:6]
    assert torch.equal(model.predict(Xt).latent_mean, saved.predict(Xt).latent_mean)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A composite-kernel model file, an ODVFF one and a CSV file of their data."""
    t = tmp_path_factory.mktemp("kernels")
    X, Y = _data()
    write_csv(str(t / "d.csv"), ["x1", "x2", "y"], np.column_stack([X, Y]))
    savigp.save(savigp.SAVIGP(X, Y, likelihoods.Gaussian(), "rbf(0) + periodic(1) * rbf(1)", num_inducing=5),
                str(t / "composite.pt"))
    savigp.save(odvff_model(X, Y, likelihoods.Gaussian(), num_frequencies=2, mean_basis_size=3), str(t / "odvff.pt"))
    return t


def _options(p):
    return p["config"]["model_options"]


def _deep(levels):
    spec = {"kernel": "rbf"}
    for _ in range(levels):
        spec = {"scale": spec}
    return spec


def _nested_list(levels):
    value = [1.0]
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("source, edit, needle", [
    ("composite", lambda p: _options(p).update(kernel={"mixture": [{"kernel": "rbf"}]}),
     "config.model_options.kernel: expected one of 'kernel', 'sum', 'product', 'scale', 'list'"),
    ("composite", lambda p: _options(p)["kernel"]["sum"].__setitem__(0, {"kernel": "os.system"}),
     "config.model_options.kernel.sum[0]: unknown kernel 'os.system'"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][1]["product"][0].update(command="rm -rf"),
     "config.model_options.kernel.sum[1].product[0]: periodic takes no option 'command'"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][0].update(active_dims=[2]),
     "config.model_options.kernel.sum[0]: active_dims [2] must be distinct columns in [0, 2)"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][0].update(lengthscale="import os"),
     "config.model_options.kernel.sum[0]: rbf's lengthscale must be a bool, a finite number or a list"),
    ("composite", lambda p: _options(p).update(kernel=_deep(40)), "more than 256 nodes or 32 levels"),
    ("composite", lambda p: _options(p).update(kernel={"sum": [{"kernel": "white"}] * 300}), "more than 256 nodes"),
    ("composite", lambda p: _options(p).update(kernel={"list": [{"num_latent": 2, "kernel": {"kernel": "rbf"}}]}),
     "config.model_options.kernel: the list's parts have 2 latent functions, the model 1"),
    ("composite", lambda p: _options(p).update(kernel=7), "config.model_options.kernel must be a kernel name or a kernel spec"),
    # numbers a float64 cannot hold (an int of 400 digits: OverflowError before), booleans that are not
    ("composite", lambda p: _options(p)["kernel"]["sum"][0].update(lengthscale=int("1" * 400)),
     "config.model_options.kernel.sum[0]: rbf's lengthscale must be a bool, a finite number or a list"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][0].update(lengthscale=[1.0, -int("9" * 400)]),
     "config.model_options.kernel.sum[0]: rbf's lengthscale must be a bool, a finite number or a list"),
    ("composite", lambda p: _options(p).update(prior_mean=10 ** 400), "config.model_options.prior_mean must be finite"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][0].update(ard=7),
     "config.model_options.kernel.sum[0]: rbf's ard must be true or false, got 7"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][0].update(lengthscale=True),
     "config.model_options.kernel.sum[0]: rbf's lengthscale must be a number, got true"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][0].update(active_dims=[10 ** 400]),
     "config.model_options.kernel.sum[0]: rbf's active_dims must be a bool, a finite number or a list"),
    ("composite", lambda p: _options(p).update(kernel=_deep(3000)), "more than 256 nodes or 32 levels"),
    ("composite", lambda p: _options(p).update(kernel=_deep(6000)), "its pickle stacks more than 10000 values"),
    # a value nested thousands deep where a message quotes it (before: RecursionError in repr)
    ("composite", lambda p: _options(p).update(kernel=_nested_list(5000)),
     "config.model_options.kernel must be a kernel name or a kernel spec (a dict), got list [[[[...]]]]"),
    ("composite", lambda p: p["config"]["model"].update(input_dim=_nested_list(5000)),
     "config.model.input_dim must be an integer, got list [[[[...]]]]"),
    ("composite", lambda p: _options(p)["kernel"]["sum"][1].update(product=_nested_list(5000)),
     "config.model_options.kernel.sum[1]: 'product' takes a list of two or more parts"),
    ("composite", lambda p: _options(p).update(kernel_ard=False), "config.model_options.kernel_ard is not allowed"),
    ("composite", lambda p: _options(p).update(fourier_features=2),
     "config.model_options.fourier_features: Fourier features need the kernel 'additive-matern' alone"),
    ("odvff", lambda p: _options(p).update(fourier_features=5),
     "config.model_options.fourier_features is 5: the model needs M = D (2F + 1) = 22 fixed inducing features"),
    ("odvff", lambda p: _options(p)["kernel"].update(nu="1.5"), "additive-matern's nu must be a bool, a finite number"),
    ("odvff", lambda p: p["state_dict"]["kernel.upper"].copy_(p["state_dict"]["kernel.lower"] - 1),
     "['kernel.upper']: the interval needs finite lower < upper per input"),
])
def test_a_tampered_kernel_is_refused_in_one_line(files, tmp_path, capsys, source, edit, needle):
    bad = tmp_path / "bad.pt"
    bad.write_bytes((files / f"{source}.pt").read_bytes())
    _rewrite(bad, edit)
    with pytest.raises(ModelFileError) as err:
        load_model(str(bad))
    msg = str(err.value)
    assert msg.startswith(str(bad)) and needle in msg and len(msg.splitlines()) == 1, msg
    capsys.readouterr()
    assert main(["predict", str(bad), str(files / "d.csv"), "--inputs", "x1,x2", "--quiet"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and needle in out.err and len(out.err.strip().splitlines()) == 1, out.err


def test_a_kernel_of_many_parts_counts_against_the_memory_limit(files, tmp_path):
    """Building a kernel allocates its parameters before the state dict is loaded into them: a file
    whose spec names many parts is refused by the memory estimate, not built (the same file loads
    under a larger limit as far as the state dict, which then does not fit)."""
    bad = tmp_path / "many.pt"
    bad.write_bytes((files / "composite.pt").read_bytes())
    _rewrite(bad, lambda p: _options(p).update(kernel={"sum": [{"kernel": "rbf"}] * 200}))
    with pytest.raises(ModelFileError, match=r"mostly the kernel's parameters"):
        load_model(str(bad), max_bytes=8000)  # 200 parts x 3 x Q = 1 x D = 2 doubles = 9600 bytes
    with pytest.raises(ModelFileError, match="the parameters do not fit the model the file describes"):
        load_model(str(bad), max_bytes=10 ** 6)
