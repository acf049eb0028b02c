"""The likelihood registry (``likelihoods.registry``): command-line names and options declared by
the classes themselves.

``TODAY_*`` are the tables ``savigp/cli.py`` hard-coded at commit 0d83cb4 (LIKELIHOODS,
STANDARDIZABLE, LIKELIHOOD_OPTIONS); the registry must hold exactly that content. The order of a
name list inside one option cannot be kept (the old tables were not in one consistent order), so
those lists are compared as sets; the order of :func:`names` is the old ``LIKELIHOODS`` order.
"""
from __future__ import annotations

import pytest

import likelihoods
from likelihoods import Gaussian, Likelihood, registry

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
TODAY_STANDARDIZABLE = ("gaussian", "student-t", "warped", "multi-gaussian", "gprn")
TODAY_LIKELIHOOD_OPTIONS = {
    "num_latent": ("callable",),
    "num_classes": ("softmax", "callable"),
    "task": ("callable",),
    "mean_function": ("callable",),
    "lik_param": ("callable",),
    "min_log_prob": ("callable",),
    "one_hot": ("softmax",),
    "num_outputs": ("multi-gaussian", "gprn"),
    "num_nodes": ("gprn",),
    "num_layers": ("seismic",),
    "num_tanh": ("warped",),
    "df": ("student-t",),
    "bin_width": ("poisson",),
    "noise_variance": ("gaussian", "multi-gaussian", "gprn", "warped"),
}


@pytest.fixture
def scratch_registry(monkeypatch):
    """Classes defined in a test register into a copy that is dropped afterwards."""
    monkeypatch.setattr(registry, "_CLASSES", dict(registry._CLASSES))


def test_names_are_the_old_table_in_its_order():
    assert registry.names() == list(TODAY_LIKELIHOODS)


@pytest.mark.parametrize("name", list(TODAY_LIKELIHOODS))
def test_get_returns_the_class_of_the_old_table(name):
    cls_name, module = TODAY_LIKELIHOODS[name]
    cls = registry.get(name)
    assert cls is getattr(likelihoods, cls_name)
    assert cls.__module__ == f"likelihoods.{module}"
    assert cls.cli_name == name


def test_options_equal_the_old_table():
    got = registry.options()
    assert set(got) == set(TODAY_LIKELIHOOD_OPTIONS)
    for opt, applies in TODAY_LIKELIHOOD_OPTIONS.items():
        assert len(got[opt]) == len(set(got[opt])), opt
        assert set(got[opt]) == set(applies), opt


def test_standardizable_equals_the_old_table():
    got = registry.standardizable()
    assert isinstance(got, tuple)
    assert sorted(got) == sorted(TODAY_STANDARDIZABLE)


def test_callable_declares_its_options_but_is_no_builtin_name():
    assert registry.get("callable") is likelihoods.CallableLikelihood
    assert "callable" not in registry.names()
    assert "callable" not in registry.standardizable()


def test_unknown_name_is_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"'laplace'.*known: gaussian, logistic"):
        registry.get("laplace")
    with pytest.raises(ValueError, match="known"):
        registry.get(None)


def test_a_user_subclass_that_defines_cli_name_registers(scratch_registry):
    class Laplace(Likelihood):
        cli_name = "laplace-test"
        cli_options = ("noise_variance", "scale")
        standardizable = True

    assert registry.names()[-1] == "laplace-test"
    assert registry.get("laplace-test") is Laplace
    assert registry.options()["scale"] == ("laplace-test",)
    assert registry.options()["noise_variance"][-1] == "laplace-test"
    assert "laplace-test" in registry.standardizable()


def test_inheriting_cli_name_does_not_register(scratch_registry):
    class NoisyGaussian(Gaussian):
        pass

    class Unnamed(Likelihood):
        pass

    assert registry.get("gaussian") is Gaussian
    assert registry.names() == list(TODAY_LIKELIHOODS)


def test_a_taken_name_is_refused_and_a_redefinition_replaces(scratch_registry):
    with pytest.raises(ValueError, match=r"cli_name 'gaussian' is already taken by likelihoods\.gaussian\.Gaussian"):
        class Impostor(Likelihood):
            cli_name = "gaussian"

    def define():
        class Again(Likelihood):
            cli_name = "again-test"
        return Again

    first, second = define(), define()  # same module and qualified name: a redefinition
    assert first is not second and registry.get("again-test") is second


@pytest.mark.parametrize("attrs, match", [
    ({"cli_name": "has space"}, "without spaces"),
    ({"cli_name": "pkg:fn"}, "without spaces or ':'"),
    ({"cli_name": ""}, "non-empty"),
    ({"cli_name": "ok-test", "cli_options": "noise_variance"}, "tuple of option names"),
    ({"cli_name": "ok-test", "cli_options": ("noise-variance",)}, "argparse"),
])
def test_bad_declarations_are_refused_naming_the_class(scratch_registry, attrs, match):
    with pytest.raises(ValueError, match=match) as info:
        type("BadDecl", (Likelihood,), dict(attrs))
    assert "BadDecl" in str(info.value)


def test_likelihoods_import_nothing_from_savigp():
    """The lower layer: no module of ``likelihoods/`` imports ``savigp`` (read from the source)."""
    import ast
    from pathlib import Path

    for path in sorted(Path(likelihoods.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""] if node.level == 0 else []
            else:
                continue
            assert not any(m == "savigp" or m.startswith("savigp.") for m in mods), (path.name, mods)
