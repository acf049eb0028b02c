"""Likelihoods for savigp: the protocol (:class:`Likelihood`) and the shipped families."""
from .base import Likelihood
from .gaussian import Gaussian
from .logistic import Logistic
from .softmax import Softmax
from .poisson import Poisson
from .warped import WarpedGaussian
from .student_t import StudentT
from .gprn import GPRN
from .seismic import Seismic
from .multi_gaussian import MultiGaussian
from .probit import Probit
from .callable import CallableLikelihood

__all__ = [
    "Likelihood",
    "CallableLikelihood",
    "Gaussian",
    "Logistic",
    "Probit",
    "Softmax",
    "Poisson",
    "WarpedGaussian",
    "MultiGaussian",
    "GPRN",
    "Seismic",
    "StudentT",
]
