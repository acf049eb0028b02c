"""The public :func:`savigp.fit`: :func:`savigp.training.fitting.fit`, or, with ``max_components``,
the K search over it (:func:`choose_and_adopt`). The training's ``fit`` knows nothing of searches:
the searches call it (:mod:`savigp.selection`), never the other way round.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import fields
import warnings
from contextlib import contextmanager
from typing import Optional

from ..training import warmup as _warmup
from ..training.fitting import fit as _training_fit
from ..training.loop import TrainingHistory
from ..training.plan import FitPlan
from .components import adopt, choose_components

#: the paragraph of ``max_components`` in :func:`fit`'s docstring (the rest is the training's fit's)
_MAX_COMPONENTS = """        max_components: choose the number of mixture components K, up to this many, by the
            full-data ELBO (:func:`savigp.choose_components` with fit's other arguments and its
            defaults: a birth and two restarts per K, K grown while the ELBO gains more than 2
            standard errors; :func:`choose_and_adopt`); the model's posterior (and every other
            parameter) is then the chosen fit's, in place, the table of ELBO per K is printed unless
            ``progress=False``, and the returned history is the chosen fit's with the table in
            ``history.components``. Not with ``state`` or ``callback``.
"""


def fit(model, plan: Optional[FitPlan] = None, *, max_components: Optional[int] = None, **options) -> TrainingHistory:
    with _warnings_at_the_caller():
        if max_components is None:
            return _training_fit(model, plan, **options)
        if plan is not None:  # (the plan's fields as the K search's fits' options; keywords replace them)
            options = {**{f.name: getattr(plan, f.name) for f in fields(FitPlan)}, **options}
        return choose_and_adopt(model, max_components, **options)


@contextmanager
def _warnings_at_the_caller():
    """Within: the warnings the training's fit means for its caller (``stacklevel=2``, which now
    names this module) recorded, and issued again at :func:`fit`'s caller when the block ends (raised
    or not), so that the line a warning names, the caller's filters and their once-per-line registry
    are what they were when the training's fit was ``savigp.fit`` (a filter that turns them into
    errors raises when fit ends). Other warnings are filtered where they are issued, as ever, and
    shown when the block ends."""
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.filterwarnings("always", module=re.escape(__name__) + "$")
            yield
    finally:
        for w in caught:
            if w.filename == __file__:
                warnings.warn(w.message, w.category, stacklevel=4)  # (this generator, contextlib's exit, fit)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


def choose_and_adopt(model, max_components: int, *, progress: bool = True, final_elbo: bool = True,
                     state: Optional[dict] = None, callback=None, **options) -> TrainingHistory:
    """``fit(model, max_components=...)``: :func:`savigp.choose_components` with fit's ``options``
    (the table printed unless ``progress=False``), the chosen fit adopted by ``model`` in place
    (:func:`savigp.selection.components.adopt`); the chosen fit's history, with the table of ELBO
    per K in ``history.components`` (and, with ``final_elbo``, the search's own full-data estimate of
    the chosen fit as ``history.final_elbo`` and ``final_elbo_stderr``). Not with ``state`` or
    ``callback`` (a ValueError): it fits several models."""
    if state is not None or callback is not None:
        raise ValueError("fit(max_components=...) fits several models: it takes no state= or callback=")
    search = choose_components(model, max_components=max_components, verbose=progress, progress=False,
                               final_elbo=False, **options)
    adopt(model, search.model)
    _warmup.mark_fitted(model)
    history = search.history
    history.components = search.table
    if final_elbo:
        chosen = search.table[search.num_components]
        history.final_elbo, history.final_elbo_stderr = chosen["elbo"], chosen["se"]
    return history


def _front_doc() -> str:
    """The training fit's docstring with the ``max_components`` paragraph before ``num_samples``."""
    doc = _training_fit.__doc__
    anchor = "        num_samples: S,"
    return doc.replace(anchor, _MAX_COMPONENTS + anchor, 1) if anchor in doc else doc + "\n" + _MAX_COMPONENTS


def _front_signature() -> inspect.Signature:
    """The training fit's signature with ``max_components`` (keyword-only, default None) before its
    other keywords."""
    sig = inspect.signature(_training_fit)
    extra = inspect.Parameter("max_components", inspect.Parameter.KEYWORD_ONLY, default=None,
                              annotation="Optional[int]")
    params = list(sig.parameters.values())
    at = next((i for i, p in enumerate(params) if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD)), len(params))
    return sig.replace(parameters=[*params[:at], extra, *params[at:]])


fit.__doc__ = _front_doc()
fit.__signature__ = _front_signature()
