"""``savigp.report``: one self-contained HTML page that describes a fitted model to a person who
does not read the code: the model in words with each additive part's share of the latent variance,
a figure per part and of the fit, the kernel search's table (when the model file keeps it), the
training trace and its convergence verdict, and checks of fit that hold for any likelihood
(randomized quantile residuals, Dunn & Smyth 1996; coverage of the 50/80/95% predictive
intervals; for discrete targets, simulated against observed statistics).

A part's share of the latent variance is Var_n[m_j(x_n)] / Var_n[m(x_n)]: the variance over the
data of the part's posterior mean over that of the total latent mean (the parts' means add up to the
total, but their covariances make the shares sum to more or less than 1).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from . import html
from .coverage import interval_coverage
from .predictive_draws import CannotDraw, observed_classes, predictive_draws
from .residuals import quantile_residuals
from .search_table import search_rows
from .statistics import simulated_statistics
from .trace import convergence_verdict, stored_trace
from .words import describe_likelihood, describe_term


#: the most rows the checks of fit draw the predictive at (a random subset of more): S draws of each
#: are held at once (1000 x 20000 float64: 160 MB)
MAX_CHECK_ROWS = 20000
#: the residuals are drawn against each of the first this many input columns
MAX_RESIDUAL_COLUMNS = 3


def _checked(name: str, value, rows: Optional[int], cols: int) -> np.ndarray:
    """``value`` as a float64 ``(rows, cols)`` array, or a ValueError naming both shapes."""
    a = np.asarray(value, dtype=np.float64)
    if a.ndim == 1 and cols == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] != cols or (rows is not None and a.shape[0] != rows):
        want = f"({rows if rows is not None else 'N'}, {cols})"
        raise ValueError(f"savigp.report: {name} must have shape {want}, got {a.shape}")
    return a


def _model_parts(model):
    """``(SAVIGP, model file configuration or {})`` of a SAVIGP or a loaded model file."""
    if hasattr(model, "transform_inputs"):
        return model.model, model.config or {}
    from ..model import SAVIGP

    if not isinstance(model, SAVIGP):
        raise TypeError(f"savigp.report: model must be a savigp.SAVIGP or a loaded model file (savigp.load), got "
                        f"{type(model).__name__}")
    return model, {}


def _stats(config: dict, key: str) -> Optional[dict]:
    return ((config.get("standardize") or {}).get(key)) if config else None


def _part_words(inner, q: int, names: list, columns: list, config: dict) -> list:
    """A sentence for each part of latent function ``q``: its kernel term's
    (:func:`savigp.kernels.terms.additive_terms`, in the parts' order), and the prior mean's."""
    from ..kernels.terms import additive_terms

    inputs = _stats(config, "inputs")
    terms = additive_terms(inner.kernel, q)
    out = [describe_term(t, columns, None if inputs is None else inputs["std"], _target_sd(config), q) for t in terms]
    for _ in names[len(terms):]:  # the prior mean (and a mean head's shift)
        mu = float(inner.prior_mean.detach().reshape(-1)[min(q, inner.prior_mean.numel() - 1)])
        out.append(f"the prior mean ({mu:.3g}{', learned' if inner.prior_mean.requires_grad else ''})"
                   + (" and the mean basis's shift" if inner.head.size > 0 else ""))
    return out


def _dims(dims, D: int) -> list:
    """A part's input columns as a list (``None``, all of them: ``0 .. D-1``; the mean's: none)."""
    return list(range(D)) if dims is None else [int(d) for d in dims]


def _extremes(mean, X, columns, dims: list) -> str:
    """Where a part of one input column is lowest and highest over the data (``mean (N,)`` its
    posterior mean at ``X (N, D)``), as words; "" for a part of no or several columns."""
    if len(dims) != 1:
        return ""
    x, lo, hi = X[:, int(dims[0])], int(np.argmin(mean)), int(np.argmax(mean))
    name = columns[int(dims[0])]
    return f"; lowest ({mean[lo]:.3g}) at {name} {x[lo]:.4g}, highest ({mean[hi]:.3g}) at {name} {x[hi]:.4g}"


def _part_figure(figures, X, columns, dims: list, name: str, mean, var, ylabel: str, share: str, where: str) -> str:
    """One part's figure: its posterior mean ``mean (N,)`` and 95% band (``var (N,)``) against its own
    (first) input column, ``dims`` (none: the first column), named in the figure's alt text and caption;
    a note for a part that is one constant over the data."""
    scale = 1e-9 * (1.0 + float(np.abs(mean).max()))
    if np.ptp(mean) <= scale and float(np.max(var)) <= scale ** 2:  # a constant (the prior mean): not drawn
        return html.paragraph(f"{name}: constant ({mean[0]:.4g}) over the data, not drawn.", "note")
    d = int(dims[0]) if dims else 0
    others = [columns[int(e)] for e in dims[1:]]
    against = columns[d] + (f" (the part also reads {', '.join(others)})" if others else "")
    png = figures.parts_png([X[:, d]], [name], mean[:, None], var[:, None], [columns[d]], ylabel, [share])
    return html.figure(png, f"{where}part {name} against {columns[d]}",
                       f"{name}: its posterior mean and 95% band at the training inputs, against {against}.")


def _fmt(v: float) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.4g}"


def report(model, X, Y, *, X_test=None, Y_test=None, path: Optional[str] = None, history=None,
           num_samples: int = 1000, seed: int = 0, title: Optional[str] = None,
           input_names: Optional[list] = None, target_names: Optional[list] = None) -> str:
    """An HTML report of a fitted model on its data (see the module docstring for what it holds).

    Args:
        model: a :class:`~savigp.SAVIGP` or a loaded model file (:func:`savigp.load`; raw inputs
            and targets, as in the CSV file).
        X: training inputs ``(N, D)``; Y: training targets ``(N, P)`` (or ``(N,)`` for P = 1).
        X_test, Y_test: optional test data ``(N*, D)``, ``(N*, P)``: the coverage of their
            predictive intervals is reported too.
        path: write the page there atomically (else only return it).
        history: the :class:`savigp.TrainingHistory` of the fit, for its ELBO trace (a model file
            keeps none unless it says so: the report then says it is not stored).
        num_samples: predictive draws per row for the checks of fit.
        seed: seeds every draw.
        title: the page's title (default: the model's kernel and likelihood).
        input_names, target_names: column names (default: the model file's, else x0.., y0..).

    Returns:
        the page's HTML text.

    Raises:
        ValueError: an array of the wrong shape (naming it, the shape expected and the one given), or
            ``num_samples`` < 1.
        savigp.io.plotting.MissingExtra: matplotlib is not installed.
    """
    from ..parts import MEAN_PART, predict_parts
    from . import figures

    inner, config = _model_parts(model)
    if int(num_samples) < 1:
        raise ValueError(f"savigp.report: num_samples must be >= 1, got {num_samples}")
    D, P, Q = int(inner.input_dim), int(inner.likelihood.output_dim), int(inner.likelihood.num_latent)
    X = _checked("X", X, None, D)
    Y = _checked("Y", Y, X.shape[0], P)
    if (X_test is None) != (Y_test is None):
        raise ValueError("savigp.report: give both X_test and Y_test, or neither")
    if X_test is not None:
        X_test = _checked("X_test", X_test, None, D)
        Y_test = _checked("Y_test", Y_test, X_test.shape[0], P)
    cols = config.get("columns") or {}
    columns = list(input_names or cols.get("inputs") or [f"x{d}" for d in range(D)])
    tnames = list(target_names or cols.get("targets") or [f"y{p}" for p in range(P)])
    part_figures = []
    sections = []

    # ------------------------------------------------------------ the model in words, and its parts
    Xm = model.transform_inputs(X) if hasattr(model, "transform_inputs") else X
    parts = predict_parts(inner, Xm, columns=columns)
    body = [html.paragraph(f"Likelihood: {describe_likelihood(inner.likelihood, _target_sd(config), tnames[0] if P == 1 else None)}.")]
    share_rows = []
    unit = _target_sd(config)  # standardized targets: the parts in the targets' units
    ylabel = f"{tnames[0]} (latent, in its units)" if _stats(config, "targets") is not None else "latent function"
    if inner.likelihood.task == "classification" and Q == 1:  # a binary classifier: f's sign is the class
        ylabel = "latent (high: positive class)"
    for q in range(Q):
        names = list(parts.names[q])
        mean = parts.mean[q].detach().cpu().double().numpy() * unit
        var = parts.var[q].detach().cpu().double().numpy() * unit ** 2
        words = _part_words(inner, q, names, columns, config)
        total = mean.sum(axis=1)
        total_var = float(total.var())
        shares = [float(mean[:, j].var()) / total_var if total_var > 0 else float("nan") for j in range(len(names))]
        lead = f"Latent function {q}: " if Q > 1 else "The latent function is the sum of "
        body.append(html.paragraph(lead + f"{len(names)} part{'s' if len(names) != 1 else ''}:"))
        body.append(html.bullets([f"{n}: {w}; {100 * s:.1f}% of the latent variance"
                                  + _extremes(mean[:, j], X, columns, _dims(parts.active_dims[q][j], D))
                                  for j, (n, w, s) in enumerate(zip(names, words, shares))], "parts"))
        share_rows += [[q, n, f"{100 * s:.1f}%", _fmt(float(np.sqrt(mean[:, j].var())))]
                       for j, (n, s) in enumerate(zip(names, shares))]
        part_figures += [_part_figure(figures, X, columns, _dims(parts.active_dims[q][j], D), name, mean[:, j],
                                      var[:, j], ylabel, f"{100 * s:.1f}% of the latent variance",
                                      f"latent function {q}, " if Q > 1 else "")
                         for j, (name, s) in enumerate(zip(names, shares))]
    body.append(html.table(["latent", "part", "share of latent variance", "sd of its mean over the data"],
                           share_rows, numeric=[True, False, True, True]))
    body.append(html.paragraph("A part's share is the variance over the data of its posterior mean over that of the "
                               "total latent mean; parts that are correlated make the shares add up to more or "
                               "less than 100%.", "note"))
    sections.append(html.section("model", "The model in words", "".join(body)))
    parts_body = "".join(part_figures)
    sections.append(html.section("parts", "Each part", parts_body))

    # ------------------------------------------------------------ the fit and the checks of fit
    sections += _checks(model, inner, X, Y, X_test, Y_test, columns, tnames, num_samples, seed, figures)

    # ------------------------------------------------------------ training and search
    sections.append(_training_section(history, config, inner, figures))
    search = search_rows(config)
    if search is not None:
        headings, rows, summary = search
        sections.append(html.section("search", "Kernel structure search",
                                     html.paragraph("The candidates the search fitted, in the order tried, by their "
                                                    "full-data ELBO and its penalized score (savigp.search_kernels, "
                                                    "Duvenaud et al. 2013). " + summary)
                                     + html.table(headings, rows)))
    expression = "; ".join(" + ".join(n for n in names if n != MEAN_PART) for names in parts.names)
    title = title or f"savigp model: {expression}"
    subtitle = (f"{_likelihood_name(inner.likelihood)} likelihood, {X.shape[0]} training rows, {D} input(s), "
                f"M = {int(inner.num_inducing)} inducing points; checks from {num_samples} predictive draws per row "
                f"(seed {seed})")
    text = html.page(title, subtitle, sections)
    if path is not None:
        from ..io.atomic_files import atomic_write

        with atomic_write(path) as fh:
            fh.write(text)
    return text


def _likelihood_name(likelihood) -> str:
    """The likelihood's class name, or "user" for a user's log p(y | f)."""
    from likelihoods import CallableLikelihood

    return "user" if isinstance(likelihood, CallableLikelihood) else type(likelihood).__name__


def _target_sd(config: dict) -> float:
    targets = _stats(config, "targets")
    return 1.0 if targets is None else float(np.asarray(targets["std"]).reshape(-1)[0])


def _some_rows(X, Y, seed: int, what: str) -> tuple:
    """``(X, Y, note)``: at most :data:`MAX_CHECK_ROWS` rows (a seeded random subset, in their order)
    and a sentence saying so, or all of them and ""."""
    N = X.shape[0]
    if N <= MAX_CHECK_ROWS:
        return X, Y, ""
    keep = np.sort(np.random.default_rng(seed).choice(N, MAX_CHECK_ROWS, replace=False))
    return X[keep], Y[keep], f"The fit and its checks use a random {MAX_CHECK_ROWS} of the {N} {what} rows."


def _checks(model, inner, X, Y, X_test, Y_test, columns, tnames, num_samples, seed, figures) -> list:
    """The fit's figure and the checks of fit (residuals, coverage, simulated statistics)."""
    from scipy.stats import kstest

    X, Y, note = _some_rows(X, Y, seed, "training")
    notes = [note]
    if X_test is not None:
        X_test, Y_test, note = _some_rows(X_test, Y_test, seed + 1, "test")
        notes.append(note)
    try:
        draws = predictive_draws(model, X, Y, num_samples=num_samples, seed=seed)
    except (CannotDraw, ValueError) as err:
        note = html.paragraph(f"Not available: the predictive distribution of y cannot be drawn ({err}).", "note")
        return [html.section("fit", "The fit", note), html.section("checks", "Checks of fit", note)]
    test_draws = None if X_test is None else predictive_draws(model, X_test, Y_test, num_samples=num_samples,
                                                               seed=seed + 1)
    classifier = inner.likelihood.task == "classification"
    tname = tnames[0]
    if classifier:  # the draws are class indices: the observed labels' indices, one column
        Y, tnames = observed_classes(model, Y), [f"class of {tnames[0]}"]
        Y_test = None if Y_test is None else observed_classes(model, Y_test)
    fit_body = [_classifier_fit(draws, Y, test_draws, Y_test, tname, figures)] if classifier else []
    if classifier and X.shape[1] == 2 and draws.max() <= 1 and Y.max() <= 1:
        fit_body.append(_probability_map(model, X, Y, columns, tname, seed, figures))
    levels = [0.025, 0.5, 0.975]
    for p in range(0 if classifier else Y.shape[1]):
        bands = np.quantile(draws[:, :, p], levels, axis=0)
        tests = (None, None, None) if X_test is None else (X_test[:, 0], Y_test[:, p],
                                                          np.quantile(test_draws[:, :, p], levels, axis=0))
        png = figures.total_png(X[:, 0], Y[:, p], bands, columns[0], tnames[p], *tests)
        fit_body.append(html.figure(png, f"fit of {tnames[p]}", f"{tnames[p]}: the predictive median and 95% interval "
                                    "at the inputs, with the data."))
    u, r = quantile_residuals(draws, Y, seed=seed)
    body = [html.paragraph(" ".join(n for n in notes if n), "note")] if any(notes) else []
    body += [html.paragraph("Randomized quantile residuals (Dunn & Smyth 1996): u = F(y-) + V (F(y) - F(y-)) with V "
                           "uniform, F the posterior predictive CDF estimated from the draws; residual = "
                           "Phi^-1(u). For a well-specified model they are standard normal, whatever the "
                           "likelihood.")]
    rows = []
    for p in range(Y.shape[1]):
        ks = kstest(u[:, p], "uniform")
        rows.append([tnames[p], _fmt(float(r[:, p].mean())), _fmt(float(r[:, p].std())), _fmt(float(ks.statistic)),
                     _fmt(float(ks.pvalue)), "consistent with uniform" if ks.pvalue >= 0.05 else "not uniform (p < 0.05)"])
        shown = columns[:MAX_RESIDUAL_COLUMNS]
        body.append(html.figure(figures.residuals_png(r[:, p], [X[:, d] for d in range(len(shown))], shown),
                                f"quantile residuals of {tnames[p]}",
                                f"{tnames[p]}: the residuals' histogram against the standard normal, and against "
                                f"{', '.join(shown)} (dashed: +-1.96)."))
    body.insert(1 + any(notes), html.table(["target", "mean", "sd", "KS statistic", "KS p-value", "verdict"], rows,
                              numeric=[False, True, True, True, True, False]))
    if classifier:
        body.append(html.paragraph("A classifier's labels are compared by their class index (any fixed order of "
                                   "the classes leaves the residuals uniform under the model); intervals of a label "
                                   "mean nothing, so coverage is not shown (the fit gives the reliability of the "
                                   "predicted probabilities instead).", "note"))
        return [html.section("fit", "The fit", "".join(fit_body)), html.section("checks", "Checks of fit",
                                                                                "".join(body))]
    body.append(html.paragraph("Coverage of the central predictive intervals (share of targets inside; a calibrated "
                               "model is within about 2 standard errors of the level):"))
    cov_rows = []
    for name, d, y in (("training", draws, Y), ("test", test_draws, Y_test)):
        if d is None:
            continue
        for c in interval_coverage(d, y):
            cov_rows.append([name, f"{100 * c['level']:.0f}%", f"{100 * c['covered']:.1f}%",
                             f"{100 * c['stderr']:.1f}%", c["n"]])
    body.append(html.table(["data", "interval", "covered", "standard error", "n"], cov_rows,
                           numeric=[False, True, True, True, True]))
    if np.all(Y == np.round(Y)):
        stat_rows = []
        for p in range(Y.shape[1]):
            for s in simulated_statistics(draws, Y, column=p):
                stat_rows.append([tnames[p], s["name"], _fmt(s["observed"]), _fmt(s["simulated_mean"]),
                                  f"{_fmt(s['low'])} .. {_fmt(s['high'])}", _fmt(s["p_value"])])
        body.append(html.paragraph("Discrete targets: statistics of the data against those of data sets simulated "
                                   "from the fitted model (a posterior predictive check; p < 0.05: the model does not "
                                   "reproduce it):"))
        body.append(html.table(["target", "statistic", "observed", "simulated mean", "simulated 95% range",
                                "p-value"], stat_rows, numeric=[False, False, True, True, True, True]))
    return [html.section("fit", "The fit", "".join(fit_body)), html.section("checks", "Checks of fit", "".join(body))]


def _classifier_fit(draws, Y, test_draws, Y_test, tname: str, figures) -> str:
    """A classifier's fit: accuracy, Brier score and reliability (:mod:`.calibration`) on the training
    and test rows, and the reliability diagram."""
    from .calibration import reliability, scored_probability

    two = draws.max() <= 1 and Y.max() <= 1
    what = f"the positive class of {tname}" if two else "the most drawn class"
    rows, tables = [], {}
    for name, d, y in (("training", draws, Y), ("test", test_draws, Y_test)):
        if d is None:
            continue
        p, o, correct = scored_probability(d, y)
        tables[name] = reliability(p, o)
        rows.append([name, len(o), f"{100 * correct.mean():.1f}%", _fmt(float(np.mean((p - o) ** 2))),
                     f"{100 * p.mean():.1f}%", f"{100 * o.mean():.1f}%"])
    return (html.paragraph(f"How often the most probable class is the observed one, the Brier score (mean squared "
                           f"difference of the predicted probability of {what} and the outcome; 0.25 for always "
                           f"saying 50%), and the predicted against the observed share of {what}:")
            + html.table(["data", "n", "accuracy", "Brier score", "mean predicted", "observed"], rows,
                         numeric=[False, True, True, True, True, True])
            + html.figure(figures.reliability_png(tables, what), "reliability of the predicted probabilities",
                          f"Reliability: the rows binned by their predicted probability of {what}, each bin's "
                          "observed share against its mean prediction (a calibrated model lies on the diagonal)."))


#: the probability map's grid points per axis, and the latent draws at each
MAP_GRID, MAP_SAMPLES = 60, 1000


def _probability_map(model, X, classes, columns, tname: str, seed: int, figures) -> str:
    """A binary classifier of two input columns: its predicted probability of the positive class on
    a :data:`MAP_GRID` x :data:`MAP_GRID` grid over the training rows' range (each point the share
    of :data:`MAP_SAMPLES` predictive draws in the class), with the training rows ``X (N, 2)`` marked
    by their observed class ``classes (N, 1)``."""
    gx, gy = (np.linspace(X[:, d].min(), X[:, d].max(), MAP_GRID) for d in (0, 1))
    grid = np.stack(np.meshgrid(gx, gy), axis=-1).reshape(-1, 2)
    prob = predictive_draws(model, grid, None, num_samples=MAP_SAMPLES, seed=seed + 2)[:, :, 0].mean(axis=0)
    what = f"the positive class of {tname}"
    png = figures.probability_map_png(gx, gy, prob.reshape(MAP_GRID, MAP_GRID), X, classes[:, 0], columns[:2], what)
    return html.figure(png, f"probability of {what} over {columns[0]} and {columns[1]}",
                       f"The predicted probability of {what} over {columns[0]} and {columns[1]} (the 50% contour "
                       f"in black), with the training rows by their observed class.")


def _training_section(history, config: dict, inner, figures) -> str:
    """The ELBO per step and its convergence verdict, or a note that it is not stored."""
    elbo = list(history.elbo) if history is not None and getattr(history, "elbo", None) else stored_trace(config)
    final = config.get("elbo") if config else None
    if not elbo:
        note = ("The ELBO per step is not stored in the model file" if config else
                "No training trace was given (pass history=savigp.fit(...))")
        if final is not None:
            note += f"; the final ELBO was {final:.6g}"
        return html.section("training", "Training", html.paragraph(note + "."))
    N = int(inner.num_data) if hasattr(inner, "num_data") else len(elbo)
    verdict = convergence_verdict(elbo, N)
    body = html.paragraph(f"{len(elbo)} steps; last ELBO {elbo[-1]:.6g}. Verdict: {verdict}.")
    return html.section("training", "Training", body + html.figure(figures.trace_png(elbo), "ELBO per step",
                                                                  "The ELBO after each step."))
