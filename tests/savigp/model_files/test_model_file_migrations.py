"""Model files of every earlier layout load through :mod:`savigp.model_files.migrations`, and only
there: the model (:mod:`savigp.model`) carries no upgrade hook.

Format versions 1 and 2 are loaded in tests/savigp/cli/test_cli.py (a version-1 ``"diag"`` file)
and tests/savigp/model_files/test_model_files.py (version 2); a file written before ``config.model.entropy``
in tests/savigp/posteriors/test_mixture_entropy.py. Here: the steps are complete and in order, and the two
state-dict layouts that changed without a version (the diagonal mixture over u's former
coordinates, the warped likelihood's slope bound) load as the models that wrote them.
"""
import pytest
import torch

import savigp
from likelihoods import Gaussian, WarpedGaussian
from savigp.model_files import READABLE_VERSIONS, VERSION, load_model, migrations
from savigp.posteriors import DiagonalMixture, UDiagonalMixture


def _rewrite(path, edit):
    blob = torch.load(str(path), weights_only=True)
    edit(blob)
    blob.pop("content_sha256", None)  # (edited: as a file written before the content digest)
    torch.save(blob, str(path))


def test_every_earlier_version_has_one_step_and_they_run_in_order():
    assert sorted(migrations.CONFIG_STEPS) == list(range(1, VERSION)) and READABLE_VERSIONS[-1] == VERSION
    # version 1 named the whitened diagonal mixture "diag" ("mog", "diagonal"): "diag-whitened" in
    # versions 2-3, "diag" again from version 4; the command's recorded options follow the model
    config = {"version": 1, "model": {"posterior": "mog"}, "model_options": {"posterior": "diagonal"},
              "training": {"options": {"posterior": "diag"}}}
    migrations.upgrade_config(config)
    assert config == {"version": VERSION, "model": {"posterior": "diag", "entropy": "bound"},
                      "model_options": {"posterior": "diag"}, "training": {"options": {"posterior": "diag"}}}
    # versions 2-3: "diag" is the paper's mixture over u, "diag-u" from version 4
    for version in (2, 3):
        later = {"version": version, "model": {"posterior": "diag", "entropy": "mc"},
                 "training": {"options": {"posterior": "diag"}, "stage1": {"posterior": "full"}}}
        migrations.upgrade_config(later)
        assert later == {"version": VERSION, "model": {"posterior": "diag-u", "entropy": "mc"},
                         "training": {"options": {"posterior": "diag-u"}, "stage1": {"posterior": "full"}}}
        whitened = {"version": version, "model": {"posterior": "diag-whitened", "entropy": "mc"}}
        migrations.upgrade_config(whitened)
        assert whitened["model"]["posterior"] == "diag"
    current = {"version": VERSION, "model": {"posterior": "diag", "entropy": "mc"}}
    migrations.upgrade_config(current)  # a file of this version keeps its name
    assert current["model"]["posterior"] == "diag"


@pytest.mark.parametrize("written_as, family, cls", [("diag", "diag-u", UDiagonalMixture),
                                                     ("diag-whitened", "diag", DiagonalMixture)])
def test_a_version_3_diagonal_file_loads_as_the_family_that_wrote_it(tmp_path, written_as, family, cls):
    """A file written by savigp before version 4 with ``posterior="diag"`` holds the mixture over
    u (``"diag-u"`` now), one with ``"diag-whitened"`` the whitened one (``"diag"`` now): loaded,
    each is that family, with the same predictions and ELBO; read as the new name's family instead,
    the same parameters would give another model (the test would fail without the step)."""
    g = torch.Generator().manual_seed(11)
    X = torch.randn(20, 2, generator=g, dtype=torch.float64)
    y = torch.sin(X[:, :1]) + 0.1 * torch.randn(20, 1, generator=g, dtype=torch.float64)
    model = savigp.SAVIGP(X, y, Gaussian(0.1), dense=True, posterior=family, num_components=2)
    with torch.no_grad():
        for p in model.posterior.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    path = tmp_path / "v3.pt"
    savigp.save(model, path)

    def version_3(blob):  # the configuration as savigp wrote it then
        blob["config"]["version"] = 3
        blob["config"]["model"]["posterior"] = written_as

    _rewrite(path, version_3)
    other = load_model(str(path), X=X, Y=y)[0]
    assert type(other.model.posterior) is cls and other.config["model"]["posterior"] == family
    Xs = torch.randn(7, 2, generator=g, dtype=torch.float64)
    (ma, va), (mb, vb) = model.marginals(Xs), other.model.marginals(Xs)
    assert torch.equal(ma, mb) and torch.equal(va, vb)
    with torch.no_grad():
        assert float(model.elbo().elbo) == float(other.model.elbo().elbo)
    # the same state read as the other family predicts otherwise
    wrong = savigp.SAVIGP(X, y, Gaussian(0.1), dense=True, posterior="diag" if family == "diag-u" else "diag-u",
                          num_components=2)
    wrong.load_state_dict(model.state_dict(), strict=False)  # (only the u family has a parametrization buffer)
    assert not torch.allclose(wrong.marginals(Xs)[1], vb, rtol=1e-3)


def test_a_file_in_the_former_u_space_coordinates_loads_as_the_same_posterior(tmp_path):
    g = torch.Generator().manual_seed(4)
    X = torch.randn(25, 2, generator=g, dtype=torch.float64)
    y = torch.randn(25, 1, generator=g, dtype=torch.float64)
    model = savigp.SAVIGP(X, y, Gaussian(0.2), num_inducing=6, posterior="diag-u", num_components=2)
    with torch.no_grad():
        for p in model.posterior.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        u = model.posterior.u_parameters(Lzz=model.prior_factor())
    path = tmp_path / "former.pt"
    savigp.save(model, path)

    def former(blob):  # the file before the parametrization buffer (version 3, "diag"): m and softplus^-1(s)
        blob["config"]["version"], blob["config"]["model"]["posterior"] = 3, "diag"
        state = blob["state_dict"]
        del state["posterior.parametrization"]
        state["posterior.mean"] = u.mean.clone()
        state["posterior.raw_scale"] = torch.log(torch.expm1(u.sd))

    _rewrite(path, former)
    other = load_model(str(path), X=X, Y=y)[0].model  # with the training data, for the ELBO
    assert isinstance(other.posterior, UDiagonalMixture) and int(other.posterior.parametrization) == 1
    Xs = torch.randn(9, 2, generator=g, dtype=torch.float64)
    (ma, va), (mb, vb) = model.marginals(Xs), other.marginals(Xs)
    assert torch.allclose(ma, mb, rtol=1e-9, atol=1e-10) and torch.allclose(va, vb, rtol=1e-8, atol=1e-10)
    with torch.no_grad():
        assert float(model.elbo().elbo) == pytest.approx(float(other.elbo().elbo), rel=1e-9)
    # the model itself knows no former layout: its own load_state_dict refuses the old state
    old = torch.load(str(path), weights_only=True)["state_dict"]
    with pytest.raises(RuntimeError, match="parametrization"):
        savigp.SAVIGP(X, y, Gaussian(0.2), num_inducing=6, posterior="diag-u", num_components=2).load_state_dict(old)


@pytest.mark.parametrize("max_slope", [None, 3.0])
def test_a_warped_file_written_before_the_slope_bound_keeps_the_bound_its_arguments_give(tmp_path, max_slope):
    X = torch.linspace(-1, 1, 12, dtype=torch.float64)[:, None]
    Y = torch.sin(2 * X)
    model = savigp.SAVIGP(X, Y, WarpedGaussian(num_tanh=2, max_slope=max_slope), num_inducing=4)
    path = tmp_path / "warped.pt"
    savigp.save(model, path)
    _rewrite(path, lambda blob: blob["state_dict"].pop("likelihood.slope_bound"))
    loaded = savigp.load(path).model.likelihood
    assert loaded._bound == max_slope
    assert float(loaded.slope_bound) == (float("inf") if max_slope is None else max_slope)
