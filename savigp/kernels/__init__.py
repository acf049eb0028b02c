"""Covariance functions, batched over the Q latent functions: ``kernel(X1, X2) -> (Q, N1, N2)``,
``kernel.diag(X) -> (Q, N)``.

* :mod:`savigp.kernels.stationary`: :class:`Kernel` (the protocol), :class:`Stationary` (a kernel
  of the scaled distance), :class:`RBF`, :class:`Matern32`, :class:`Matern52` and
  :class:`KernelList` (a family per latent function);
* :mod:`savigp.kernels.fourier_features`: :class:`AdditiveMatern` and its variational Fourier
  features (Hensman et al. 2018), :func:`odvff_model`.

:data:`KERNELS` names them for ``SAVIGP(kernel=...)``, ``savigp train --kernel`` and model files; a
new kernel is a module here and one ``KERNELS`` entry (docs/architecture.md).
"""
from .._choices import KERNELS
from .stationary import RBF, Kernel, KernelList, Matern32, Matern52, Stationary

__all__ = ["KERNELS", "Kernel", "Stationary", "RBF", "Matern32", "Matern52", "KernelList"]
