"""What a model will cost, estimated from its sizes before anything large is allocated: the one
place where ``savigp train`` (before the model is built) and model files (before one is rebuilt,
:mod:`savigp.model_files.schema`) check the memory a model needs against a stated limit.

Sizes: N data rows, D inputs, P targets, Q latent functions, M inducing inputs per latent
function, K mixture components, B rows per mini-batch, S Monte Carlo samples per row. The
dominant terms (bytes of one number: 8 in float64, 4 in float32):

* the Q kernel matrices K_zz (M x M), their Cholesky factors, a work copy and, in training, their
  gradient: 3 Q M^2 (4 Q M^2 training);
* the posterior covariances: K Q M^2 (``"full"``), (Q M)^2 (``"joint"``), K Q M (diagonal
  families) -- each family says its own (:meth:`savigp.posteriors.Posterior.cost_terms`); in
  training each also has a gradient and two Adam moments (x 4);
* per mini-batch: K_zx and V = L_zz^-1 K_zx with their gradients (3 B Q M, and K B Q M more for a
  full covariance's S_k V), and the Monte Carlo arrays (4 S K B (Q + P));
* the data, float64 (2 N (D + P): the CSV's and the model's copies).

One training step costs about Q M^3 / 3 (factorizing K_zz) + 2 B Q M^2 (the solves for V) + 2 B Q M D
(K_zx) floating-point operations, plus K Q M^3 for full covariances; :class:`Cost` carries both.
The estimates are within a small factor (they count the arrays, not every temporary), which is
what a refusal needs: a run that cannot fit says so at once instead of after minutes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# the default memory limit (bytes) of building, training or using a model; ``SAVIGP_MAX_MODEL_BYTES``
# (bytes) or ``--max-memory`` (GiB) overrides it (:mod:`savigp.settings`)
from ._choices import POSTERIORS
from .settings import DEFAULT_MAX_BYTES, MAX_BYTES_ENV, max_model_bytes  # noqa: F401 (imported from here)


class CostError(ValueError):
    """A model that would need more memory than the limit; the message gives the estimate, its
    main term and the option that raises the limit."""


@dataclass
class Cost:
    """Estimated peak memory (``bytes``) and floating-point operations of one training step
    (``step_flops``; 0 for a model that only predicts), with ``main`` the largest memory term."""

    bytes: int
    step_flops: float
    main: str


def memory_limit(max_bytes: Optional[float] = None) -> int:
    """``max_bytes`` when given, else ``SAVIGP_MAX_MODEL_BYTES``, else :data:`DEFAULT_MAX_BYTES`."""
    if max_bytes is not None:
        return int(max_bytes)
    return max_model_bytes()


def model_cost(*, D: int, Q: int, M: int, K: int = 1, posterior: str = "full", P: int = 1, N: int = 0,
               rows: int = 0, item: int = 8, batch: Optional[int] = None, samples: int = 0,
               training: bool = False) -> Cost:
    """The :class:`Cost` of a model of these sizes (see the module docstring).

    Args:
        rows: the placeholder (or data) inputs a rebuilt model holds, ``rows x D`` float64.
        item: bytes of one number of the model's dtype.
        batch, samples, N: the training run's B (default N), S and N (``training=True``).
    """
    B = int(batch or N)
    covariances, per_batch, family_flops = POSTERIORS[posterior].cost_terms(K, Q, M, B)
    terms = {"the K_zz matrices": (4 if training else 3) * Q * M * M * 8,
             "the posterior covariances": (4 if training else 1) * covariances * item,
             "the inputs": 8 * rows * D}
    flops = 0.0
    if training:
        terms["one mini-batch"] = item * (3 * B * Q * M + per_batch + 4 * samples * K * B * (Q + P))
        terms["the data"] = 16 * N * (D + P)
        flops = Q * M ** 3 / 3 + 2.0 * B * Q * M * M + 2.0 * B * Q * M * D + family_flops
    main = max(terms, key=terms.get)
    return Cost(int(sum(terms.values())), flops, main)


def check_memory(cost: Cost, limit: int, what: str, option: str) -> None:
    """Raise :class:`CostError` when ``cost.bytes`` exceeds ``limit``: ``what`` describes the
    model (its sizes), ``option`` how to raise the limit."""
    if cost.bytes > limit:
        raise CostError(f"{what} would need about {_gib(cost.bytes)} of memory (mostly {cost.main}), more than the "
                        f"limit of {_gib(limit)}; use fewer inducing points{' or a smaller --batch-size' if 'batch' in cost.main else ''}, "
                        f"or raise the limit with {option}")


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:.3g} GiB"
