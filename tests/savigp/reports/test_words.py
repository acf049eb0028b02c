"""The model in words: each additive term described from its fitted values, length-scales and
periods in the data's units (times the inputs' sd where they were standardized), amplitudes in the
targets' units (times their sd); the likelihood with its fitted parameters."""
import pytest

from likelihoods import Gaussian
from savigp.kernels.expression import parse_kernel
from savigp.kernels.spec import build_kernel
from savigp.kernels.terms import additive_terms
from savigp.reports.words import describe_likelihood, describe_term

EXPRESSION = ("rbf(t, lengthscale=2, variance=4) + periodic(t, period=0.5, lengthscale=1, variance=0.25) * "
              "rbf(t, lengthscale=3) + linear(u) + white(variance=0.04) + linear(u) * rbf(t, lengthscale=1.5) "
              "+ matern12(u, lengthscale=0.5)")


@pytest.fixture(scope="module")
def terms():
    return additive_terms(build_kernel(parse_kernel(EXPRESSION, columns=["t", "u"]), 2, 1), 0)


def test_each_term_in_words_in_the_inputs_units(terms):
    words = [describe_term(t, ["t", "u"]) for t in terms]
    assert words[0] == "a smooth trend in t, varying over about 2 (t) (prior sd 2)"
    assert words[1] == "a cycle in t with a period of 0.5 (t) whose shape changes over about 3 (t) (prior sd 0.5)"
    assert words[2].startswith("a linear trend in u (prior sd ")
    assert words[3] == "independent noise with sd 0.2"
    assert words[4].startswith("a trend in u whose slope changes over about 1.5 (t)")
    assert words[5] == "a rough trend in u, varying over about 0.5 (u) (prior sd 1)"


def test_standardized_inputs_and_targets_are_read_back_in_the_datas_units(terms):
    words = [describe_term(t, ["t", "u"], input_std=[10.0, 4.0], target_std=3.0) for t in terms]
    assert words[0] == "a smooth trend in t, varying over about 20 (t) (prior sd 6)"
    assert words[1] == "a cycle in t with a period of 5 (t) whose shape changes over about 30 (t) (prior sd 1.5)"
    assert words[3] == "independent noise with sd 0.6"
    assert words[5] == "a rough trend in u, varying over about 2 (u) (prior sd 3)"


def test_the_likelihood_in_words_with_its_fitted_noise():
    assert describe_likelihood(Gaussian(variance=0.09), target_std=2.0) == \
        "Gaussian noise with sd 0.6 around the latent function"
    assert describe_likelihood(Gaussian(variance=0.09), unit="ppm") == \
        "Gaussian noise with sd 0.3 (ppm) around the latent function"


def test_a_term_of_several_columns_gives_each_columns_length_scale():
    spec = parse_kernel("rbf + rbf(a, lengthscale=2) * rbf(b, lengthscale=5)", columns=["a", "b"])
    spec["sum"][0]["lengthscale"] = [1.5, 4.0]  # an ARD length-scale per column
    kernel = build_kernel(spec, 2, 1)
    words = [describe_term(t, ["a", "b"], input_std=[1.0, 10.0]) for t in additive_terms(kernel, 0)]
    assert words[0].startswith("a smooth trend in a, b, varying over about 1.5 (a) and 40 (b) ")
    assert words[1].startswith("an interaction of a and b, varying over about 2 (a) and about 50 (b) ")
