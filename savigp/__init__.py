"""savigp: scalable variational inference for latent Gaussian-process models with black-box
likelihoods (SAVIGP, Bonilla, Krauth & Dezfouli, JMLR 2019), in PyTorch.

    from savigp import SAVIGP, fit, evaluate
    model = SAVIGP(X, Y, likelihood, num_inducing=50)
    fit(model, iterations=2000, batch_size=256, lr=0.01)
    print(evaluate(model, X_test, Y_test))
    savigp.save(model, "model.pt"); saved = savigp.load("model.pt")
"""
import importlib
import sys
import types

#: each public name -> the submodule that defines it, imported on first use (PEP 562): ``import
#: savigp`` (and so the ``savigp`` command's ``--help`` and argument errors) does not import torch
_LAZY = {
    "ESTIMATORS": "expected_log_lik", "RBF": "kernels", "Kernel": "kernels", "KernelList": "kernels",
    "Matern32": "kernels", "Matern52": "kernels", "evaluate": "metrics", "SAVIGP": "model", "ELBOTerms": "model",
    "Prediction": "model", "DiagonalMixture": "posteriors", "FullGaussian": "posteriors", "FullMixture": "posteriors",
    "MixturePosterior": "posteriors", "UDiagonalMixture": "posteriors", "TrainingDiverged": "training",
    "TrainingHistory": "training", "fit": "training", "OrthogonalMeanHead": "mean_bases",
    "DecoupledMeanHead": "mean_bases", "HybridMeanHead": "mean_bases", "AdditiveMatern": "fourier_features",
    "FourierFeatureKernel": "fourier_features", "odvff_model": "fourier_features", "fit_orthnat": "natural_gradients",
    "CholeskyError": "_linalg", "robust_cholesky": "_linalg", "tune_cpu_allocator": "_allocator",
    "load": "model_files", "save": "model_files", "warm_start": "warm_start", "ConvergenceWarning": "training",
    "choose_components": "training.components", "grow": "training.components",
    "ComponentSearch": "training.components",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        if name != "warm_start":
            globals()[name] = value
        return value
    try:  # a submodule not imported yet (``savigp.kernels`` after ``import savigp``)
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """``savigp.warm_start`` is the function even once the submodule of that name is imported (the
    import system then binds the submodule to the package's attribute; that binding is ignored).
    Binding a function (``monkeypatch.setattr(savigp, "warm_start", fake)``) replaces it as usual."""

    _warm_start_override = None

    @property
    def warm_start(self):
        override = type(self)._warm_start_override
        return override if override is not None else __getattr__("warm_start")

    @warm_start.setter
    def warm_start(self, value):
        if not isinstance(value, types.ModuleType):
            type(self)._warm_start_override = value

    @warm_start.deleter
    def warm_start(self):
        type(self)._warm_start_override = None


sys.modules[__name__].__class__ = _Package

__all__ = [
    "SAVIGP", "fit", "evaluate", "choose_components", "grow", "ComponentSearch", "ELBOTerms", "Prediction", "TrainingHistory", "TrainingDiverged",
    "CholeskyError", "robust_cholesky", "Kernel", "RBF", "Matern32", "Matern52", "KernelList", "MixturePosterior",
    "FullGaussian", "DiagonalMixture", "UDiagonalMixture", "FullMixture", "ESTIMATORS", "OrthogonalMeanHead",
    "DecoupledMeanHead", "HybridMeanHead", "AdditiveMatern", "FourierFeatureKernel", "odvff_model",
    "fit_orthnat", "tune_cpu_allocator", "save", "load", "warm_start", "ConvergenceWarning",
]
__version__ = "0.1.0"
