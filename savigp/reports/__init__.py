"""The HTML report of a fitted model (``savigp.report``, ``savigp report``): a page a person reads
without the code.

The pieces, one idea each: :mod:`.document` (:func:`report`: the page's sections put together),
:mod:`.words` (the kernel's additive parts and the likelihood in words), :mod:`.predictive_draws`
(draws of y from the posterior predictive at each row, which every check of fit reads),
:mod:`.residuals` (randomized quantile residuals, Dunn & Smyth 1996), :mod:`.coverage` (the
predictive intervals' coverage), :mod:`.statistics` (simulated against observed statistics),
:mod:`.trace` (the ELBO per step and its convergence verdict), :mod:`.search_table` (the kernel
search's table a model file may keep), :mod:`.figures` (matplotlib figures as PNG) and :mod:`.html`
(the self-contained page).
"""
from .document import report

__all__ = ["report"]
