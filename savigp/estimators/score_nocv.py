"""The score-function estimator without control variates, ``"score-nocv"`` (Bonilla et al. 2019, eq. (25)):
the gradient E_q[log p(y_n | f_n) d/dlambda log q_k(f_n)] from S samples of q, values of log p only. It is
there to measure what the control variates of :mod:`savigp.estimators.score` buy."""
from __future__ import annotations

from .score import ScoreFunction


class ScoreFunctionNoCV(ScoreFunction):
    """``"score-nocv"``: :class:`~savigp.estimators.score.ScoreFunction` with ``control = False``."""

    name = "score-nocv"
    summary = "values of the likelihood only, no control variates"
    control = False
