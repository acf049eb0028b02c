"""savigp: scalable variational inference for latent Gaussian-process models with black-box
likelihoods (SAVIGP, Bonilla, Krauth & Dezfouli, JMLR 2019), in PyTorch.

    from savigp import SAVIGP, fit, evaluate
    model = SAVIGP(X, Y, likelihood, num_inducing=50)
    fit(model, iterations=2000, batch_size=256, lr=0.01)
    print(evaluate(model, X_test, Y_test))
    model.save("model.pt"); saved = savigp.load("model.pt")
"""
from .expected_log_lik import ESTIMATORS
from .kernels import RBF, Kernel, KernelList, Matern32, Matern52
from .metrics import evaluate
from .model import SAVIGP, ELBOTerms, Prediction
from .posteriors import DiagonalMixture, FullGaussian, FullMixture, MixturePosterior, UDiagonalMixture
from .training import TrainingDiverged, TrainingHistory, fit
from .training.components import ComponentSearch, choose_components, grow
from .decoupled import OrthogonalMeanHead
from .mean_bases import DecoupledMeanHead, HybridMeanHead
from .fourier_features import AdditiveMatern, FourierFeatureKernel, odvff_model
from .natural_gradients import fit_orthnat
from ._linalg import CholeskyError, robust_cholesky
from ._allocator import tune_cpu_allocator
from .model_files import load
from .warm_start import warm_start

__all__ = [
    "SAVIGP", "fit", "evaluate", "choose_components", "grow", "ComponentSearch", "ELBOTerms", "Prediction", "TrainingHistory", "TrainingDiverged",
    "CholeskyError", "robust_cholesky", "Kernel", "RBF", "Matern32", "Matern52", "KernelList", "MixturePosterior",
    "FullGaussian", "DiagonalMixture", "UDiagonalMixture", "FullMixture", "ESTIMATORS", "OrthogonalMeanHead",
    "DecoupledMeanHead", "HybridMeanHead", "AdditiveMatern", "FourierFeatureKernel", "odvff_model",
    "fit_orthnat", "tune_cpu_allocator", "load", "warm_start",
]
__version__ = "0.1.0"
