"""The public savigp.fit (savigp.selection.front): the training's fit, or with max_components the K
search over it; its warnings name the caller's line (not the front's), its signature and docstring
are the training fit's plus max_components, and the search refuses state= and callback=."""
import inspect
import warnings

import numpy as np
import pytest

import savigp
from likelihoods import Gaussian
from savigp.training.fitting import fit as training_fit


def _model():
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 5, (20, 1)), 0)
    return savigp.SAVIGP(X, np.sin(X), Gaussian(), kernel="rbf", num_inducing=5, seed=0)


def test_fits_warnings_name_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        savigp.fit(_model(), iterations=20, lr=0.05, progress=False)  # (20 steps: the ELBO still rises)
    rising = [w for w in caught if issubclass(w.category, savigp.ConvergenceWarning)]
    assert rising and all(w.filename == __file__ for w in rising), [(w.filename, w.lineno) for w in caught]


def test_the_front_is_the_training_fit_plus_max_components():
    params = [name for name in inspect.signature(savigp.fit).parameters if name != "max_components"]
    assert params == list(inspect.signature(training_fit).parameters)
    assert inspect.signature(savigp.fit).parameters["max_components"].kind == inspect.Parameter.KEYWORD_ONLY
    assert "max_components: choose the number of mixture components" in savigp.fit.__doc__
    assert "iterations: number of optimizer steps" in savigp.fit.__doc__
    with pytest.raises(ValueError, match="takes no state= or callback="):
        savigp.fit(_model(), max_components=2, iterations=5, state={})
