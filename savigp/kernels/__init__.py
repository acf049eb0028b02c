"""Covariance functions, batched over the Q latent functions: ``kernel(X1, X2) -> (Q, N1, N2)``,
``kernel.diag(X) -> (Q, N)``, composed with ``+`` and ``*`` as in GPflow.

* :mod:`savigp.kernels.base`: :class:`Kernel` (the protocol: the one call path, ``active_dims``,
  ``structure``, ``+``, ``*``) and :class:`Hyper` (a family's hyper-parameters, declared once);
* :mod:`savigp.kernels.stationary`: :class:`Stationary` (a kernel of the scaled distance),
  :class:`RBF`, :class:`Matern12`, :class:`Matern32`, :class:`Matern52`, :class:`RationalQuadratic`;
* :mod:`savigp.kernels.periodic`: :class:`Periodic` (MacKay's exp-sine-squared);
* :mod:`savigp.kernels.linear`: :class:`Linear` (with an offset); :mod:`savigp.kernels.constant`:
  :class:`Constant`, :class:`White`;
* :mod:`savigp.kernels.base` also holds :class:`Sum` and :class:`Product`; :mod:`savigp.kernels.scale`: :class:`Scale`;
  :mod:`savigp.kernels.kernel_list`: :class:`KernelList` (a kernel per latent function);
* :mod:`savigp.kernels.spec`: kernels as data (model files); :mod:`savigp.kernels.expression`: the
  expressions of ``--kernel`` and ``SAVIGP(kernel="rbf + periodic(0) * rbf(0)")``;
* :mod:`savigp.kernels.fourier_features`: :class:`AdditiveMatern` and its variational Fourier
  features (Hensman et al. 2018) (the ODVFF model that uses them: :func:`savigp.odvff.odvff_model`).

:data:`KERNELS` names the families for ``SAVIGP(kernel=...)``, ``savigp train --kernel`` and model
files; a new kernel is a module here and one ``KERNELS`` entry (docs/architecture.md).
"""
from .._choices import KERNELS
from .base import Hyper, Kernel
from .base import Product, Sum
from .scale import Scale
from .constant import Constant, White
from .expression import format_kernel, parse_kernel
from .kernel_list import KernelList
from .linear import Linear
from .periodic import Periodic
from .spec import build_kernel, kernel_spec
from .stationary import RBF, Matern12, Matern32, Matern52, RationalQuadratic, Stationary

__all__ = ["KERNELS", "Kernel", "Hyper", "Stationary", "RBF", "Matern12", "Matern32", "Matern52", "RationalQuadratic",
           "Periodic", "Linear", "Constant", "White", "Sum", "Product", "Scale", "KernelList",
           "parse_kernel", "format_kernel", "build_kernel", "kernel_spec"]
