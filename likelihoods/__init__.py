"""Likelihoods for savigp: the protocol (:class:`Likelihood`) and the shipped families."""
from .base import Likelihood
from .callable import CallableLikelihood
from .gaussian import Gaussian
from .gprn import GPRN
from .logistic import Logistic
from .multi_gaussian import MultiGaussian
from .poisson import Poisson
from .seismic import Seismic
from .softmax import Softmax
from .student_t import StudentT
from .warped import WarpedGaussian

__all__ = [
    "Likelihood",
    "CallableLikelihood",
    "Gaussian",
    "Logistic",
    "Softmax",
    "Poisson",
    "WarpedGaussian",
    "MultiGaussian",
    "GPRN",
    "Seismic",
    "StudentT",
]
