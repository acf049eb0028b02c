"""The training trace a report shows: the ELBO per step, from a :class:`savigp.TrainingHistory`
given by the caller or from a model file that keeps one, and its convergence verdict, read by the
trend test of :func:`savigp.training.convergence.still_rising` (the last fifth of the steps:
still rising when the slope's z-score and its rise per data point are both large)."""
from __future__ import annotations

from typing import Optional

#: where a model file may keep its ELBO per step (``config[...]``), first found first
TRACE_KEYS = (("training", "elbo_trace"), ("metadata", "elbo_trace"))


def stored_trace(config: Optional[dict]) -> Optional[list]:
    """The ELBO per step a model file's configuration keeps (a list of numbers), or None."""
    for outer, inner in TRACE_KEYS:
        value = ((config or {}).get(outer) or {}).get(inner)
        if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
            return [float(v) for v in value]
    return None


def convergence_verdict(elbo: list, num_data: int) -> str:
    """One sentence: whether the ELBO per step ``elbo`` was still rising at its end."""
    from ..training.convergence import MIN_TREND_STEPS, still_rising

    if len(elbo) * 0.2 < MIN_TREND_STEPS:
        return (f"too few steps ({len(elbo)}) to judge convergence by the trend of the last fifth "
                f"(it needs {int(MIN_TREND_STEPS / 0.2)})")
    rising = still_rising(elbo, num_data)
    if rising is None:
        return (f"converged: over the last {int(len(elbo) * 0.2)} steps the ELBO shows no significant rise "
                "(savigp's trend test)")
    return f"not converged: {rising.message()}"
