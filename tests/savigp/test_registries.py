"""One registry per list of choices (:mod:`savigp._choices`): a kernel, a posterior family, a
mean head and an estimator registered at run time -- their own class and one registry entry,
nothing else -- are built by the model, offered and accepted by ``savigp train``, written to a model
file and loaded back with the same predictions (the estimator: called by the model's step and
passing the estimator kit)."""
import json
import math
import re

import numpy as np
import pytest
import torch

import savigp
from likelihoods import Gaussian
from savigp import _choices
from savigp.cli import main
from savigp.cli.parser import build_parser
from savigp.estimators import ESTIMATORS, ELLEstimate, Estimator, checked_log_prob, monte_carlo_stderr
from savigp.io.csv_data import write_csv
from savigp.kernels.stationary import KERNELS, Stationary
from savigp.mean_heads.base import MeanHead
from savigp.mean_heads.heads import MEAN_HEADS, HybridMeanHead, make_mean_head
from savigp.model_files.schema import CONFIG_SCHEMA, SchemaError
from savigp.posteriors import POSTERIORS, DiagonalMixture, UDiagonalMixture, make_posterior


class RationalQuadratic1(Stationary):
    """k = s (1 + r^2 / 2)^-1: the rational quadratic with alpha = 1 (Rasmussen & Williams 2006,
    eq. (4.19))."""

    def profile(self, r2):
        return 1.0 / (1.0 + 0.5 * r2)


class NarrowDiagonal(DiagonalMixture):
    """The whitened diagonal mixture started at a tenth of the prior's standard deviation."""

    kind = "diag-narrow"

    def __init__(self, num_latent, num_inducing, num_components=None, **options):
        super().__init__(num_latent, num_inducing, num_components, init_scale=0.1, **options)


class FixedInputsHybrid(HybridMeanHead):
    """The HYBRID mean head with its basis inputs gamma fixed (a buffer)."""

    def __init__(self, X, num_latent, size, seed=0, **options):
        super().__init__(X, num_latent, size, seed=seed, **dict(options, learn_inputs=False))


class AntitheticReparameterization(Estimator):
    """The reparameterization estimator with antithetic pairs f = b +- sqrt(s2) eps, S / 2 draws of
    eps: unbiased (each pair's mean is), and its error cancels to first order in eps (Owen 2013,
    §8.2). Factorized marginals only."""

    needs_differentiable_likelihood = True

    def factorized(self, likelihood, y, marginals, *, num_samples, scale, generator):
        half = max(1, int(num_samples) // 2)
        eps = torch.randn((half,) + marginals.shape, generator=generator, dtype=marginals.mean.dtype)
        sd = marginals.var.sqrt()
        values = checked_log_prob(likelihood, y, torch.cat([marginals.mean + sd * eps, marginals.mean - sd * eps]))
        pairs = 0.5 * (values[:half] + values[half:])  # (S / 2, K, B), independent
        per = pairs.mean(0)
        w = marginals.weights()
        return ELLEstimate(scale * (w[:, None] * per).sum(), per.detach(), monte_carlo_stderr(pairs, w, scale))


@pytest.fixture
def registered():
    """The three registered for one test, removed afterwards."""
    KERNELS.register("rq1", RationalQuadratic1)
    POSTERIORS.register("diag-narrow", NarrowDiagonal)
    MEAN_HEADS.register("hybrid-fixed", FixedInputsHybrid)
    ESTIMATORS.register("reparam-antithetic", AntitheticReparameterization)
    yield
    KERNELS.unregister("rq1")
    POSTERIORS.unregister("diag-narrow")
    MEAN_HEADS.unregister("hybrid-fixed")
    ESTIMATORS.unregister("reparam-antithetic")


def _data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    return X, np.sin(X[:, :1]) + 0.1 * rng.normal(size=(n, 1))


def test_the_registries_are_the_models_the_commands_and_the_schemas_lists():
    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices["train"]._actions if a.dest == "kernel")
    assert train.choices is None and all(name in train.help for name in KERNELS)  # (--kernel takes expressions)
    # a family is appended (the order is the docs' and the messages'); the registry-driven tests check a new one
    assert KERNELS.names()[:10] == ("rbf", "matern12", "matern32", "matern52", "rq", "periodic", "linear", "constant",
                                    "white", "additive-matern")
    assert POSTERIORS.names() == ("full", "diag", "diag-u", "joint")
    assert MEAN_HEADS.names() == ("orthogonal", "decoupled", "hybrid")
    assert ESTIMATORS.names() == ("auto", "score", "score-nocv", "reparam", "quadrature", "closed-form")
    estimator = next(a for a in parser._subparsers._group_actions[0].choices["train"]._actions if a.dest == "estimator")
    assert estimator.choices is ESTIMATORS
    # "diag" is diagonal in whitened coordinates (the peers' convention), "diag-u" the paper's family over u;
    # the former name of the whitened one and the paper's name are aliases, not listed names
    assert type(make_posterior("diag", 1, 3)) is DiagonalMixture and type(make_posterior("diag-u", 1, 3)) is UDiagonalMixture
    assert make_posterior("mog", 1, 3).kind == "diag-u" and make_posterior("diag-whitened", 1, 3).kind == "diag"
    assert "mog" not in POSTERIORS and "diag-whitened" not in POSTERIORS
    with pytest.raises(ValueError, match="posterior must be one of full, diag, diag-u, joint, got 'nope'"):
        make_posterior("nope", 1, 3)
    with pytest.raises(ValueError, match="registered already"):
        KERNELS.register("rbf", RationalQuadratic1)
    with pytest.raises(ValueError, match="a kernel name is"):
        KERNELS.register("bad name", RationalQuadratic1)


def test_a_registered_kernel_family_and_head_work_through_the_model_and_its_file(tmp_path, registered):
    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), "rq1", num_inducing=6, posterior="diag-narrow", num_components=2,
                          mean_basis_size=4, mean_basis="hybrid-fixed", seed=1)
    assert isinstance(model.kernel, RationalQuadratic1) and isinstance(model.posterior, NarrowDiagonal)
    assert isinstance(model.mean_head, FixedInputsHybrid) and not isinstance(model.mean_head.gamma, torch.nn.Parameter)
    with torch.no_grad():  # the kernel's closed form
        x = torch.as_tensor(X[:4])
        ls, var = model.kernel.lengthscales()[0], model.kernel.variance()[0]
        r2 = (((x[:, None, :] - x[None, :, :]) / ls) ** 2).sum(-1)
        torch.testing.assert_close(model.kernel(x, x)[0], var / (1 + 0.5 * r2), rtol=1e-12, atol=1e-12)
    assert float(model.posterior.scale().detach().max()) == pytest.approx(0.1, rel=1e-6)  # softplus + floor
    savigp.fit(model, iterations=3, num_samples=8, progress=False)
    history = savigp.fit(model, iterations=2, num_samples=8, estimator="reparam-antithetic", progress=False)
    assert history.estimator == "reparam-antithetic" and all(math.isfinite(e) for e in history.elbo)
    assert model.config["posterior"] == "diag-narrow" and model.config["mean_basis"] == "hybrid-fixed"
    path = tmp_path / "m.pt"
    savigp.save(model, path)
    loaded = savigp.load(path).model
    Xt = torch.linspace(-1, 1, 5, dtype=torch.float64)[:, None].expand(5, 2)
    torch.testing.assert_close(loaded.predict(Xt).latent_mean, model.predict(Xt).latent_mean, rtol=0, atol=0)
    torch.testing.assert_close(loaded.predict(Xt).latent_var, model.predict(Xt).latent_var, rtol=0, atol=0)


def test_the_command_offers_and_trains_the_registered_names(tmp_path, registered, capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "rq1" in out and "diag-narrow" in out and "hybrid-fixed" in out and "reparam-antithetic" in out
    X, Y = _data(40, seed=2)
    data, path = str(tmp_path / "d.csv"), str(tmp_path / "m.pt")
    write_csv(data, ["x1", "x2", "y"], np.column_stack([X, Y]))
    assert main(["train", data, "--targets", "y", "--kernel", "rq1", "--posterior", "diag-narrow", "--components", "2",
                 "--mean-basis-size", "3", "--mean-basis", "hybrid-fixed", "--num-inducing", "5",
                 "--iterations", "3", "--quiet", "--out", path]) == 0
    capsys.readouterr()
    config = torch.load(path, weights_only=True)["config"]
    assert (config["model_options"]["kernel"]["kernel"], config["model"]["posterior"], config["model"]["mean_basis"]) == \
        ("rq1", "diag-narrow", "hybrid-fixed")
    assert main(["evaluate", path, data, "--json"]) == 0
    assert math.isfinite(json.loads(capsys.readouterr().out)["nlpd"])


def _classes(n=36, seed=4):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    return X, (np.digitize(X[:, 0], [-0.7, 0.7]))[:, None].astype(float)  # three classes along x1


def test_a_registered_family_takes_a_shared_kernel_by_its_capability(tmp_path, registered, capsys):
    """A kernel shared by the latent functions is taken by any family that declares shared_kernel (the
    registered whitened diagonal mixture inherits it): built by the model, fitted, written to a model
    file and loaded with the same predictions, and trained by the command; a family that declares it
    False is refused, and the message lists the registered families that take one."""
    from likelihoods import Softmax
    from savigp.posteriors import FullMixture

    X, Y = _classes()
    model = savigp.SAVIGP(X, Y, Softmax(3), "rbf", shared_kernel=True, posterior="diag-narrow", num_components=2,
                          num_inducing=5, seed=2)
    assert model.shared_kernel and model.kernel.num_latent == 1 and model.inducing.shape == (1, 5, 2)
    savigp.fit(model, iterations=3, num_samples=8, progress=False)
    path = tmp_path / "shared.pt"
    savigp.save(model, path)
    loaded = savigp.load(path).model
    assert loaded.shared_kernel and isinstance(loaded.posterior, NarrowDiagonal)
    Xt = torch.linspace(-1, 1, 5, dtype=torch.float64)[:, None].expand(5, 2)
    torch.testing.assert_close(loaded.predict(Xt).probabilities, model.predict(Xt).probabilities, rtol=0, atol=0)
    data, out = str(tmp_path / "c.csv"), str(tmp_path / "c.pt")
    write_csv(data, ["x1", "x2", "label"], np.column_stack([X, Y]))
    assert main(["train", data, "--targets", "label", "--likelihood", "softmax", "--num-classes", "3", "--shared-kernel",
                 "--posterior", "diag-narrow", "--num-inducing", "4", "--iterations", "3", "--quiet", "--out", out]) == 0
    capsys.readouterr()
    config = torch.load(out, weights_only=True)["config"]
    assert config["model"]["posterior"] == "diag-narrow" and config["model"]["shared_kernel"]

    class PrivateFull(FullMixture):
        kind = "full-private"
        shared_kernel = False

    POSTERIORS.register("full-private", PrivateFull)
    try:
        with pytest.raises(ValueError, match="works with posterior 'full' or 'diag' or 'diag-narrow' and no mean basis; "
                                             "got posterior='full-private'"):
            savigp.SAVIGP(X, Y, Softmax(3), "rbf", shared_kernel=True, posterior="full-private", num_components=2,
                          num_inducing=5)
    finally:
        POSTERIORS.unregister("full-private")


def test_the_schema_reads_the_registry_when_it_checks():
    config = {"kernel": "rq1"}
    from savigp.model_files.schema import MODEL_OPTION_FIELDS

    with pytest.raises(SchemaError, match=re.escape(f"must be one of {', '.join(map(repr, KERNELS))}, got 'rq1'")):
        MODEL_OPTION_FIELDS["kernel"].check(config["kernel"], "config.model_options.kernel")
    KERNELS.register("rq1", RationalQuadratic1)
    try:
        MODEL_OPTION_FIELDS["kernel"].check("rq1", "config.model_options.kernel")
    finally:
        KERNELS.unregister("rq1")
    assert CONFIG_SCHEMA is not None and _choices.KERNELS is KERNELS


def test_a_head_is_attached_to_the_posterior_once():
    X, _ = _data()
    post = make_posterior("full", 1, 4)
    with torch.no_grad():
        post.mean.fill_(1.0)
    make_mean_head("hybrid", torch.as_tensor(X), 1, 3, posterior=post)
    assert float(post.mean.detach().abs().min()) == 1.0 and post.mean.requires_grad  # hybrid keeps the coupled mean
    make_mean_head("decoupled", torch.as_tensor(X), 1, 3, posterior=post)
    assert float(post.mean.abs().max()) == 0.0 and not post.mean.requires_grad  # decoupled fixes it at 0
    with pytest.raises(ValueError, match="mean_basis must be one of orthogonal, decoupled, hybrid, got 'x'"):
        make_mean_head("x", torch.as_tensor(X), 1, 3)


def test_the_schema_asks_the_family_how_many_components_it_takes(tmp_path):
    from savigp.model_files import ModelFileError

    X, Y = _data(20)
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=4, posterior="joint")
    path = tmp_path / "joint.pt"
    savigp.save(model, path)
    blob = torch.load(str(path), weights_only=True)
    blob["config"]["model"]["num_components"] = 2
    blob.pop("content_sha256", None)  # (edited: as a file written before the content digest)
    torch.save(blob, str(path))
    with pytest.raises(ModelFileError, match="num_components must be at most 1 for the 'joint' posterior, got 2"):
        savigp.load(path)


def test_the_memory_check_asks_the_family_its_cost(registered):
    """savigp.cost reads a family's covariance numbers from the family (Posterior.cost_terms), not
    from a list of names: the built-in ones as before, and a registered family with its own."""
    from savigp.cost import model_cost

    sizes = dict(D=3, Q=2, M=50, K=2, N=1000, batch=100, samples=10, training=True)
    full, diag, joint = (model_cost(posterior=p, **sizes) for p in ("full", "diag", "joint"))
    K, Q, M, B = 2, 2, 50, 100
    assert full.bytes - diag.bytes == 8 * (4 * (K * Q * M * M - K * Q * M) + K * B * Q * M)
    assert full.step_flops - diag.step_flops == K * Q * M ** 3
    assert joint.bytes - diag.bytes == 8 * 4 * ((Q * M) ** 2 - K * Q * M) and joint.step_flops == diag.step_flops

    class DenseNarrow(NarrowDiagonal):
        @classmethod
        def cost_terms(cls, num_components, num_latent, num_inducing, batch):
            return 10 ** 9, 0, 0.0

    POSTERIORS.register("dense-narrow", DenseNarrow)
    try:
        assert model_cost(posterior="dense-narrow", **sizes).main == "the posterior covariances"
    finally:
        POSTERIORS.unregister("dense-narrow")


def test_a_registered_estimator_is_the_one_the_step_calls_and_passes_the_kit(registered):
    """The model builds the registered estimator by its name and calls it once per ELBO evaluation
    with the batch's LatentMarginals; the estimator kit finds it unbiased against the Gaussian's
    closed form; "closed-form" on the same model agrees with it within its standard errors."""
    from savigp.testing.estimators import check_estimator

    calls = []
    original = AntitheticReparameterization.factorized

    def counted(self, likelihood, y, marginals, **kwargs):
        calls.append(marginals.shape)
        return original(self, likelihood, y, marginals, **kwargs)

    X, Y = _data()
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, num_components=2, seed=1)
    AntitheticReparameterization.factorized = counted
    try:
        terms = model.elbo(torch.arange(10), num_samples=2000, estimator="reparam-antithetic",
                           generator=torch.Generator().manual_seed(0))
    finally:
        AntitheticReparameterization.factorized = original
    assert calls == [(2, 10, 1)]
    exact = model.elbo(torch.arange(10), estimator="closed-form")
    assert abs(float(terms.ell) - float(exact.ell)) < 4 * float(terms.ell_stderr)
    assert check_estimator("reparam-antithetic").failures == []
    with pytest.raises(ValueError, match="estimator must be one of auto, score, score-nocv, reparam, quadrature, "
                                         "closed-form, reparam-antithetic, got 'nope'"):
        model.elbo(estimator="nope")


def test_a_registered_factorized_family_gets_the_two_stage_fit_by_its_declared_capability(registered):
    """``savigp train``'s default for a family declaring ``diagonal`` (a factorized q(u)): its
    hyper-parameters from a full Gaussian first (``--hypers two-stage``); by the capability, not a list
    of names, so a family registered at run time gets it as diag and diag-u do."""
    from savigp.cli.plan import TrainPlan
    from savigp.cli.two_stage import resolve_hypers

    def plan(posterior):
        argv = ["train", "d.csv", "--targets", "y", "--out", "m.pt", "--posterior", posterior]
        return TrainPlan.from_args(build_parser().parse_args(argv))

    assert resolve_hypers(plan("diag-narrow")) == "two-stage"
    assert resolve_hypers(plan("diag")) == "two-stage" and resolve_hypers(plan("full")) is None


class RadialFeatureHead(MeanHead):
    """A mean head on the :class:`MeanHead` base alone (no orthogonal basis): r_j(x) = sum_g a_jg
    exp(-||x - c_g||^2 / 2), G centres c ``(G, D)`` (fixed, from the first G rows of X) shared by the
    Q latent functions, weights a ``(Q, G)`` from zero, with the prior a ~ N(0, I) entering the ELBO's
    KL as 1/2 ||a||^2 (a point estimate of a: the KL's term that depends on it)."""

    def __init__(self, X, num_latent, size, seed=0):
        super().__init__()
        X = torch.as_tensor(X)
        self.size = int(size)
        self.register_buffer("centres", X[:self.size].clone())
        self.weights = torch.nn.Parameter(torch.zeros(int(num_latent), self.size, dtype=X.dtype))

    @classmethod
    def state_shapes(cls, *, num_latent, num_inducing, input_dim, size):
        return {"centres": (size, input_dim), "weights": (num_latent, size)}

    def shifted(self, q, X, kernel, Z, prior, Kzx, state=None):
        features = torch.exp(-0.5 * torch.cdist(X, self.centres) ** 2)  # (B, G)
        return q.shifted(features @ self.weights.T)  # (B, Q)

    def kl(self, kernel, Z, Lzz, **unused):
        return 0.5 * (self.weights ** 2).sum()


def test_a_head_on_the_base_alone_works_through_fit_the_command_and_its_file(tmp_path, capsys):
    """A head written on the MeanHead base (no OrthogonalMeanHead, no gamma) and one registry line:
    built by the model, trained by fit and fit_orthnat, written to a model file whose shapes the schema takes from the
    head's declaration (state_shapes) and loaded with bit-identical predictions, trained by the command."""
    from savigp.model_files import ModelFileError

    MEAN_HEADS.register("radial", RadialFeatureHead)
    try:
        X, Y = _data()
        model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, num_components=2, mean_basis_size=4,
                              mean_basis="radial", seed=1)
        assert isinstance(model.head, RadialFeatureHead) and model.head.size == 4
        savigp.fit(model, iterations=5, num_samples=8, progress=False)
        assert float(model.head.weights.detach().abs().max()) > 0  # fit trained the head's parameters
        natural = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=6, mean_basis_size=4, mean_basis="radial", seed=1)
        savigp.fit_orthnat(natural, iterations=3, num_samples=8, progress=False)  # (no natural_parameters: Adam's)
        assert float(natural.head.weights.detach().abs().max()) > 0
        path = tmp_path / "radial.pt"
        savigp.save(model, path)
        loaded = savigp.load(path).model
        assert isinstance(loaded.head, RadialFeatureHead)
        Xt = torch.linspace(-1, 1, 5, dtype=torch.float64)[:, None].expand(5, 2)
        torch.testing.assert_close(loaded.predict(Xt).latent_mean, model.predict(Xt).latent_mean, rtol=0, atol=0)
        torch.testing.assert_close(loaded.predict(Xt).latent_var, model.predict(Xt).latent_var, rtol=0, atol=0)

        blob = torch.load(str(path), weights_only=True)  # a file whose head's weights disagree with G
        blob["state_dict"]["mean_head.weights"] = torch.zeros(1, 3, dtype=torch.float64)
        blob.pop("content_sha256", None)
        torch.save(blob, str(path))
        with pytest.raises(ModelFileError, match=r"config.model says mean_head.weights has shape \(1, 4\) "
                                                 r"\(Q=1, M=6, D=2, K=2, G=4\) but the state dict holds \(1, 3\)"):
            savigp.load(path)

        data, out = str(tmp_path / "d.csv"), str(tmp_path / "m.pt")
        write_csv(data, ["x1", "x2", "y"], np.column_stack([X, Y]))
        assert main(["train", data, "--targets", "y", "--mean-basis-size", "3", "--mean-basis", "radial",
                     "--num-inducing", "5", "--iterations", "3", "--quiet", "--out", out]) == 0
        capsys.readouterr()
        assert torch.load(out, weights_only=True)["config"]["model"]["mean_basis"] == "radial"
        assert main(["evaluate", out, data, "--json"]) == 0
        assert math.isfinite(json.loads(capsys.readouterr().out)["nlpd"])
    finally:
        MEAN_HEADS.unregister("radial")
