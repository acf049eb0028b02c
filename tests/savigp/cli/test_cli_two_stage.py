"""``savigp train --posterior diag|diag-u``: the two-stage fit by default, ``--hypers joint``,
what the model file records, ``--resume`` and ``--max-components`` with it, its refusals, and the
warning that ``diag-u`` on a dense Gaussian model has narrower intervals (savigp/cli/two_stage.py).

Every run calls ``main()`` in-process; the problem is 40 points in 1-D with a Gaussian likelihood
(closed-form expected log-likelihood: deterministic ELBOs and gradients), trained by Adam for a few
steps, so each run takes well under a second.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from savigp.cli import TEST_SIGINT_ENV, main
from savigp.io.csv_data import write_csv
from savigp.model_files import load_model

QUIET = ["--threads", "1", "--quiet"]
N = 40


def _train(*args) -> int:
    return main(["train", *map(str, args), *QUIET])


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``d.csv`` (x, y = sin 2x + noise) and ``fg.pt``: the dense full Gaussian of :data:`COMMON`."""
    t = tmp_path_factory.mktemp("two_stage")
    gen = np.random.default_rng(5)
    X = np.sort(gen.uniform(-3, 3, size=(N, 1)), axis=0)
    write_csv(str(t / "d.csv"), ["x", "y"], np.column_stack([X, np.sin(2 * X) + 0.2 * gen.standard_normal((N, 1))]))
    common = [t / "d.csv", "--targets", "y", "--dense", "--iterations", "12", "--lr", "0.05"]
    assert _train(*common, "--out", t / "fg.pt") == 0
    return {"dir": t, "common": common, "fg": t / "fg.pt"}


def test_default_for_a_factorized_family_is_the_two_stage_fit(files, capsys):
    """``--posterior diag-u --components 2`` without ``--hypers``: stage 1 is the full Gaussian of the
    same options (its kernel, noise and final ELBO are those of ``--posterior full``, bit for bit),
    stage 2 learns q(u) only; the file records both; the result is the recipe ``--warm-start fg.pt
    --learn posterior`` (to rounding: 3e-8 measured, the source's moments computed from a loaded
    rather than a live model); stderr says so in two lines, also with --quiet, and warns of nothing
    but, for ``diag-u`` (dense, Gaussian), its narrower intervals (one line naming ``--posterior diag``)."""
    t, common = files["dir"], files["common"]
    capsys.readouterr()
    for posterior in ("diag-u", "diag"):
        out = t / f"{posterior}.pt"
        assert _train(*common, "--posterior", posterior, "--components", "2", "--out", out) == 0
        err = capsys.readouterr().err
        warnings = [line for line in err.splitlines() if "warning" in line]
        assert "stage 1 of 2: full Gaussian, 12 step(s)" in err, err
        assert len(warnings) == (posterior == "diag-u"), err
        assert all("narrower than the full Gaussian's" in w and "--posterior diag " in w for w in warnings), err
        saved, fg = load_model(str(out))[0], load_model(str(files["fg"]))[0]
        for name in ("kernel", "likelihood"):
            assert _equal(getattr(saved.model, name).state_dict(), getattr(fg.model, name).state_dict()), name
        training = saved.config["training"]
        assert training["hypers"] == "two-stage" and training["options"]["learn"] is None
        assert training["stage1"]["posterior"] == "full" and training["stage1"]["steps"] == 12
        assert training["stage1"]["elbo"] == fg.config["elbo"]
        assert fg.config["training"]["hypers"] is None  # (the question does not arise for a full Gaussian)
    assert _train(*common, "--posterior", "diag-u", "--components", "2", "--warm-start", files["fg"], "--learn",
                  "posterior", "--out", t / "manual.pt") == 0
    a, b = load_model(str(t / "diag-u.pt"))[0].model.state_dict(), load_model(str(t / "manual.pt"))[0].model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=0, atol=1e-6), (k, (a[k] - b[k]).abs().max())


def test_hypers_joint_learns_everything_and_keeps_the_warning(files, capsys):
    """``--hypers joint`` is the paper's fit: the kernel moves away from the full Gaussian's, the file
    records "joint", and the dense model's one-line warning names the default (``diag-u`` on this
    dense Gaussian model: a second line on its narrower intervals)."""
    t, common = files["dir"], files["common"]
    capsys.readouterr()
    out = t / "joint.pt"
    assert _train(*common, "--posterior", "diag-u", "--components", "2", "--hypers", "joint", "--out", out) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("savigp train: warning: ") for line in err), err
    assert "drop --hypers joint" in err[0] and "--posterior diag " in err[1], err
    saved, fg = load_model(str(out))[0], load_model(str(files["fg"]))[0]
    assert saved.config["training"]["hypers"] == "joint" and "stage1" not in saved.config["training"]
    assert not _equal(saved.model.kernel.state_dict(), fg.model.kernel.state_dict())


def test_refusals_name_the_option(files, capsys):
    """--hypers where it does not apply, two stages with --warm-start or --nproc: exit 2, one line."""
    t, common = files["dir"], files["common"]
    cases = [(["--posterior", "full", "--hypers", "joint"], "--posterior full has no factorization bias"),
             (["--posterior", "diag-u", "--learn", "posterior", "--hypers", "two-stage"], "--learn posterior does not"),
             (["--posterior", "diag-u", "--hypers", "two-stage", "--warm-start", files["fg"]], "give --learn posterior"),
             (["--posterior", "diag-u", "--nproc", "2"], "give --hypers joint")]
    for extra, text in cases:
        capsys.readouterr()
        assert _train(*common, *extra, "--out", t / "refused.pt") == 2, extra
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("savigp train: error: ") and text in err, err
    assert not (t / "refused.pt").exists()


def test_two_stage_resumes_its_second_stage(files, capsys, monkeypatch):
    """Interrupted in stage 2 (at step 5 of 12), the same command with --resume continues q(u) at the
    full Gaussian's hyper-parameters to the uninterrupted run's parameters bit for bit; a
    jointly learned checkpoint is not resumed as a two-stage fit (one line naming --hypers joint)."""
    t, common = files["dir"], files["common"]
    args = [*common, "--posterior", "diag-u", "--batch-size", "20", "--checkpoint-every", "4"]
    assert _train(*args, "--out", t / "ref.pt") == 0
    monkeypatch.setenv(TEST_SIGINT_ENV, "5")
    assert _train(*args, "--out", t / "cut.pt") == 130
    monkeypatch.delenv(TEST_SIGINT_ENV)
    assert _train(*args, "--out", t / "cut.pt", "--resume") == 0
    ref, cut = load_model(str(t / "ref.pt"))[0], load_model(str(t / "cut.pt"))[0]
    assert cut.config["step"] == 12 and cut.config["training"]["hypers"] == "two-stage"
    assert cut.config["training"]["stage1"] == ref.config["training"]["stage1"]
    assert _equal(cut.model.state_dict(), ref.model.state_dict())
    assert _train(*args, "--hypers", "joint", "--iterations", "4", "--out", t / "j.pt") == 0
    capsys.readouterr()
    assert _train(*args, "--out", t / "j.pt", "--resume") == 2
    err = capsys.readouterr().err.strip()
    assert "was fitted with --hypers joint" in err and "resume with --hypers joint" in err, err


def test_max_components_searches_at_the_full_gaussians_hyper_parameters(files, capsys):
    """``--max-components`` with the two-stage default: the search over K runs in stage 2 (q(u) only),
    so the kept fit has the full Gaussian's kernel whatever K it chose."""
    t, common = files["dir"], files["common"]
    out = t / "kmax.pt"
    assert _train(*common, "--posterior", "diag-u", "--max-components", "2", "--out", out) == 0
    assert "by the full-data ELBO" in capsys.readouterr().out
    saved, fg = load_model(str(out))[0], load_model(str(files["fg"]))[0]
    assert saved.config["training"]["hypers"] == "two-stage"
    assert _equal(saved.model.kernel.state_dict(), fg.model.kernel.state_dict())


def test_stage_one_is_the_full_gaussian_also_over_many_steps(files):
    """Over enough steps for fit's annealing phase (250), stage 1 is still ``--posterior full``'s fit
    bit for bit: both anneal their last 25 steps at a tenth of lr, as :func:`savigp.fit` does (before
    the command and Python shared one schedule, the command's full Gaussian did not anneal, and a
    stage 1 that did differed from it)."""
    t = files["dir"]
    common = [t / "d.csv", "--targets", "y", "--dense", "--iterations", "250", "--lr", "0.05"]
    assert _train(*common, "--out", t / "fg250.pt") == 0
    assert _train(*common, "--posterior", "diag-u", "--out", t / "mog250.pt") == 0
    saved, fg = load_model(str(t / "mog250.pt"))[0], load_model(str(t / "fg250.pt"))[0]
    for name in ("kernel", "likelihood"):
        assert _equal(getattr(saved.model, name).state_dict(), getattr(fg.model, name).state_dict()), name


def test_former_names_and_where_the_interval_warning_applies(files, capsys):
    """``--posterior diag-whitened`` (the whitened family's name before format 4) and ``mog`` (the
    paper's) are accepted and recorded under today's names ("diag", "diag-u"), as a resume compares
    them; the narrower-interval warning is ``diag-u``'s on a dense Gaussian model only (not with
    inducing inputs other than the training inputs, not for ``diag``)."""
    from savigp.posteriors import DiagonalMixture, UDiagonalMixture

    t, common = files["dir"], files["common"]
    sparse = [c for c in common if c != "--dense"] + ["--num-inducing", "8"]
    for args, cls, name, warned in (([*common, "--posterior", "diag-whitened"], DiagonalMixture, "diag", False),
                                    ([*common, "--posterior", "mog"], UDiagonalMixture, "diag-u", True),
                                    ([*sparse, "--posterior", "diag-u"], UDiagonalMixture, "diag-u", False)):
        capsys.readouterr()
        assert _train(*args, "--out", t / "named.pt") == 0, args
        err = capsys.readouterr().err
        assert ("narrower than the full Gaussian's" in err) == warned, (args, err)
        saved = load_model(str(t / "named.pt"))[0]
        assert type(saved.model.posterior) is cls and saved.config["model"]["posterior"] == name
        assert saved.config["training"]["options"]["posterior"] == name


def test_a_version_3_checkpoint_of_the_family_over_u_resumes_as_diag_u(files, capsys, monkeypatch):
    """A checkpoint written before format 4 by ``--posterior diag`` (then the family over u) records
    "diag" in its model and in the command's options: read, both say "diag-u", so ``--resume
    --posterior diag-u`` continues it to the uninterrupted run's parameters bit for bit, and
    ``--resume --posterior diag`` (now the whitened family) is refused, naming diag-u."""
    t, common = files["dir"], files["common"]
    args = [*common, "--posterior", "diag-u", "--batch-size", "20", "--checkpoint-every", "4"]
    assert _train(*args, "--out", t / "ref3.pt") == 0
    monkeypatch.setenv(TEST_SIGINT_ENV, "5")
    assert _train(*args, "--out", t / "cut3.pt") == 130
    monkeypatch.delenv(TEST_SIGINT_ENV)
    ckpt = t / "cut3.pt.ckpt"
    blob = torch.load(str(ckpt), weights_only=True)
    blob["config"]["version"] = 3
    blob["config"]["model"]["posterior"] = blob["config"]["training"]["options"]["posterior"] = "diag"
    blob.pop("content_sha256", None)  # (edited: as a file written before the content digest)
    torch.save(blob, str(ckpt))
    capsys.readouterr()
    refused = [a if a != "diag-u" else "diag" for a in args]
    assert _train(*refused, "--out", t / "cut3.pt", "--resume") == 2
    err = capsys.readouterr().err
    assert "--posterior is 'diag' here but" in err and "'diag-u'" in err, err
    assert _train(*args, "--out", t / "cut3.pt", "--resume") == 0
    ref, cut = load_model(str(t / "ref3.pt"))[0], load_model(str(t / "cut3.pt"))[0]
    assert cut.config["step"] == 12 and cut.config["model"]["posterior"] == "diag-u"
    assert _equal(cut.model.state_dict(), ref.model.state_dict())


def test_the_mean_field_warning_reads_the_likelihoods_declaration_not_its_class():
    """Every likelihood that declares itself ``conjugate`` (y = f + noise: a Gaussian posterior) has the
    mean-field optimum on a dense model; the warning tested the class Gaussian, and missed
    multi-gaussian's."""
    import types

    import torch

    import savigp
    from likelihoods import Logistic, MultiGaussian
    from savigp.cli.two_stage import mean_field_warning

    X = torch.linspace(0, 1, 12).unsqueeze(-1)
    plan = types.SimpleNamespace(posterior="diag-u")
    multi = savigp.SAVIGP(X, torch.sin(3 * X), MultiGaussian(1), dense=True, posterior="diag-u")
    assert "narrower than the full Gaussian's" in mean_field_warning(plan, multi)
    logistic = savigp.SAVIGP(X, torch.sign(torch.sin(3 * X)), Logistic(), dense=True, posterior="diag-u")
    assert mean_field_warning(plan, logistic) == ""
