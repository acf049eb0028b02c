"""The command line's likelihood vocabulary (:mod:`savigp.cli.likelihood_options`): the names of
:data:`savigp._choices.LIKELIHOODS` and the ``train`` options each takes, kept in savigp
(``likelihoods/`` declares nothing of the command line).

``TODAY_*`` are the tables ``savigp/cli.py`` hard-coded at commit 0d83cb4 (LIKELIHOODS,
STANDARDIZABLE, LIKELIHOOD_OPTIONS), with probit added after it; the vocabulary must hold exactly
that content, in that order (the order of the names listed in a refusal).
"""
from __future__ import annotations

import pytest

import likelihoods
from likelihoods import Likelihood
from savigp._choices import LIKELIHOODS
from savigp.cli import likelihood_options as vocab
from savigp.cli import register_likelihood

TODAY_LIKELIHOODS = {
    "gaussian": ("Gaussian", "gaussian"),
    "logistic": ("Logistic", "logistic"),
    "softmax": ("Softmax", "softmax"),
    "poisson": ("Poisson", "poisson"),
    "warped": ("WarpedGaussian", "warped"),
    "student-t": ("StudentT", "student_t"),
    "gprn": ("GPRN", "gprn"),
    "seismic": ("Seismic", "seismic"),
    "multi-gaussian": ("MultiGaussian", "multi_gaussian"),
    "probit": ("Probit", "probit"),  # added after 0d83cb4: a new built-in goes at the end of the order
}
TODAY_STANDARDIZABLE = ("gaussian", "warped", "student-t", "gprn", "multi-gaussian")
TODAY_LIKELIHOOD_OPTIONS = {
    "noise_variance": ("gaussian", "warped", "gprn", "multi-gaussian"),
    "num_classes": ("softmax", "callable"),
    "one_hot": ("softmax",),
    "bin_width": ("poisson",),
    "num_tanh": ("warped",),
    "df": ("student-t",),
    "num_outputs": ("gprn", "multi-gaussian"),
    "num_nodes": ("gprn",),
    "num_layers": ("seismic",),
    "num_latent": ("callable",),
    "task": ("callable",),
    "mean_function": ("callable",),
    "lik_param": ("callable",),
    "min_log_prob": ("callable",),
}


class Laplace(Likelihood):
    def _log_prob(self, y, f):
        return -(y[..., 0] - f[..., 0]).abs()


@pytest.fixture
def laplace():
    yield register_likelihood("laplace-test", Laplace, options=("noise_variance", "scale"), standardizable=True)
    vocab.unregister_likelihood("laplace-test")


def test_names_are_the_old_table_in_its_order():
    assert vocab.available_likelihoods() == list(TODAY_LIKELIHOODS)


@pytest.mark.parametrize("name", list(TODAY_LIKELIHOODS))
def test_a_name_builds_the_class_of_the_old_table(name):
    cls_name, module = TODAY_LIKELIHOODS[name]
    cls = LIKELIHOODS[name]
    assert cls is getattr(likelihoods, cls_name) and cls.__module__ == f"likelihoods.{module}"
    assert vocab.is_builtin(name)


def test_options_and_standardizable_equal_the_old_tables():
    assert vocab.option_users() == TODAY_LIKELIHOOD_OPTIONS
    assert vocab.standardizable() == TODAY_STANDARDIZABLE


def test_a_user_function_has_options_but_no_name():
    assert "callable" not in LIKELIHOODS and not vocab.is_builtin("callable")
    assert "callable" not in vocab.standardizable()
    with pytest.raises(ValueError, match="stands for a user function"):
        register_likelihood("callable", Laplace)


def test_a_registered_class_is_named_takes_its_options_and_goes(laplace):
    assert vocab.available_likelihoods()[-1] == "laplace-test" and LIKELIHOODS["laplace-test"] is Laplace
    assert vocab.option_users()["scale"] == ("laplace-test",)
    assert vocab.option_users()["noise_variance"] == TODAY_LIKELIHOOD_OPTIONS["noise_variance"] + ("laplace-test",)
    assert vocab.option_users()["num_classes"] == ("softmax", "callable")  # (a user function last)
    assert vocab.standardizable()[-1] == "laplace-test" and LIKELIHOODS.name_of(Laplace) == "laplace-test"
    with pytest.raises(ValueError, match="registered already"):
        register_likelihood("laplace-test", Laplace)
    assert register_likelihood("laplace-test", Laplace, options=(), replace=True) is Laplace
    assert "scale" not in vocab.option_users() and "laplace-test" not in vocab.standardizable()


def test_subclassing_registers_nothing():
    class NoisyGaussian(likelihoods.Gaussian):
        pass

    assert vocab.available_likelihoods() == list(TODAY_LIKELIHOODS)
    assert LIKELIHOODS.name_of(NoisyGaussian) is None


@pytest.mark.parametrize("name, options, match", [
    ("has space", (), "letters, digits"),
    ("pkg:fn", (), "letters, digits"),
    ("", (), "letters, digits"),
    ("ok-test", "noise_variance", "option names"),
    ("ok-test", ("noise-variance",), "argparse destinations"),
])
def test_bad_registrations_are_refused(name, options, match):
    with pytest.raises(ValueError, match=match):
        register_likelihood(name, Laplace, options=options)
    assert "ok-test" not in LIKELIHOODS
