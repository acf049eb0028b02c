"""savigp: scalable variational inference for latent Gaussian-process models with black-box
likelihoods (SAVIGP, Bonilla, Krauth & Dezfouli, JMLR 2019), in PyTorch.

    from savigp import SAVIGP, fit, evaluate
    model = SAVIGP(X, Y, likelihood, num_inducing=50)
    fit(model, iterations=2000, batch_size=256, lr=0.01)
    print(evaluate(model, X_test, Y_test))
    savigp.save(model, "model.pt"); saved = savigp.load("model.pt")
"""
import importlib

#: each public name -> the submodule that defines it, imported on first use (PEP 562): ``import
#: savigp`` (and so the ``savigp`` command's ``--help`` and argument errors) does not import torch
_LAZY = {
    "ESTIMATORS": "estimators", "RBF": "kernels", "Kernel": "kernels", "KernelList": "kernels",
    "Matern32": "kernels", "Matern52": "kernels", "evaluate": "metrics", "SAVIGP": "model", "ELBOTerms": "model",
    "Prediction": "model", "DiagonalMixture": "posteriors", "FullGaussian": "posteriors", "FullMixture": "posteriors",
    "MixturePosterior": "posteriors", "UDiagonalMixture": "posteriors", "TrainingDiverged": "training",
    "TrainingHistory": "training", "fit": "selection.front", "FitPlan": "training", "OrthogonalMeanHead": "mean_heads",
    "DecoupledMeanHead": "mean_heads", "HybridMeanHead": "mean_heads", "AdditiveMatern": "kernels.fourier_features",
    "FourierFeatureKernel": "kernels.fourier_features", "odvff_model": "odvff", "fit_orthnat": "training.natural_gradients",
    "CholeskyError": "linalg.cholesky", "robust_cholesky": "linalg.cholesky", "tune_cpu_allocator": "runtime.allocator",
    "load": "model_files", "save": "model_files", "warm_start": "training.warm_start", "ConvergenceWarning": "training",
    "choose_components": "selection.components", "grow": "selection.components",
    "ComponentSearch": "selection.components", "search_kernels": "selection.kernel_search",
    "KernelSearchResult": "selection.kernel_search", "Matern12": "kernels", "RationalQuadratic": "kernels",
    "Periodic": "kernels", "Linear": "kernels", "Constant": "kernels", "White": "kernels", "Scale": "kernels",
    "Sum": "kernels", "Product": "kernels", "predict_parts": "parts", "PartsPrediction": "parts",
    "report": "reports",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
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


__all__ = [
    "SAVIGP", "fit", "FitPlan", "evaluate", "choose_components", "grow", "ComponentSearch", "ELBOTerms", "Prediction", "TrainingHistory", "TrainingDiverged",
    "CholeskyError", "robust_cholesky", "Kernel", "RBF", "Matern32", "Matern52", "KernelList", "MixturePosterior",
    "FullGaussian", "DiagonalMixture", "UDiagonalMixture", "FullMixture", "ESTIMATORS", "OrthogonalMeanHead",
    "DecoupledMeanHead", "HybridMeanHead", "AdditiveMatern", "FourierFeatureKernel", "odvff_model",
    "fit_orthnat", "tune_cpu_allocator", "save", "load", "warm_start", "ConvergenceWarning",
    "search_kernels", "KernelSearchResult", "Matern12", "RationalQuadratic", "Periodic", "Linear", "Constant",
    "White", "Scale", "Sum", "Product", "predict_parts", "PartsPrediction", "report",
]
__version__ = "0.1.0"
