"""The kernel search's proposals (:mod:`savigp.selection.kernel_search`): kernel expressions as sums
of products of base kernels, the expansions of one by a base kernel, and the starting values of a
candidate (Duvenaud et al. 2013; Lloyd et al. 2014).

* an expression is a list of terms, each a list of leaves (a base family on some input columns,
  with its values): :func:`terms_of` reads a spec (:mod:`savigp.kernels.spec`), :func:`canonical_key`
  says when two are the same (sums and products commute);
* :func:`proposals`: S + B, S with T_i replaced by T_i * B, S with one base kernel replaced by another;
* a candidate's starts: :func:`warm_spec` (the parent's fitted values for the leaves they share,
  periods at the periodogram's peaks of what the parent leaves unexplained, :func:`residual_peaks`,
  or the neutral start), :func:`inherit` (the neutral start's q(u) and likelihood from the parent);
* the check of a move: :func:`projections` (the parent's structure at a fitted child's values).

The base families are read by their capabilities (``has_period``, ``starts_from_data``,
``search_neutral_factor``, ``repeat_is_redundant``), never by name (docs/architecture.md).
"""
from __future__ import annotations

import copy
import json
from typing import Optional

import numpy as np

from .._checks import writable
from .._choices import KERNELS
from ..kernels.periodogram import periodogram_peaks


def base_leaf(name: str, dims) -> dict:
    return {"kernel": name} if dims is None else {"kernel": name, "active_dims": list(dims)}


def family_of(leaf: dict):
    """The kernel class of a leaf (its capabilities: ``has_period``, ``starts_from_data``,
    ``search_neutral_factor``, ``repeat_is_redundant``; never its name, docs/architecture.md)."""
    return KERNELS[leaf["kernel"]]


def leaf_key(leaf: dict) -> str:
    return json.dumps({"kernel": leaf["kernel"], "active_dims": leaf.get("active_dims")}, sort_keys=True)


def canonical_key(terms) -> tuple:
    """A canonical form: sums and products commute."""
    return tuple(sorted(tuple(sorted(leaf_key(b) for b in t)) for t in terms))


def proposals(terms, bases) -> list:
    """The expansions of ``terms`` (a list of products, each a list of leaves) by one base kernel."""
    if terms is None:
        return [[[b]] for b in bases]
    out = [terms + [[b]] for b in bases]  # S + B
    for i, t in enumerate(terms):  # T_i -> T_i * B
        out += [terms[:i] + [t + [b]] + terms[i + 1:] for b in bases]
    for i, t in enumerate(terms):  # B_j -> B'
        for j, leaf in enumerate(t):
            out += [terms[:i] + [t[:j] + [b] + t[j + 1:]] + terms[i + 1:] for b in bases if leaf_key(b) != leaf_key(leaf)]
    return [t for t in out if not any(_redundant_repeat(term) for term in t)]


def _redundant_repeat(term) -> bool:
    """A product with two factors on the same columns of a family whose product is itself again
    (``repeat_is_redundant``: two RBFs, whose length-scales combine), so it adds hyper-parameters and
    nothing else (Duvenaud et al. 2013 leave SE x SE out too)."""
    keys = [leaf_key(x) for x in term if family_of(x).repeat_is_redundant]
    return len(keys) != len(set(keys))


def plain_spec(spec: dict) -> dict:
    """``spec`` without initial values (for the table's expressions)."""
    if "sum" in spec or "product" in spec:
        op = "sum" if "sum" in spec else "product"
        return {op: [plain_spec(p) for p in spec[op]]}
    return {k: v for k, v in spec.items() if k in ("kernel", "active_dims")}


def start_from_data(X: np.ndarray, leaf: dict) -> dict:
    """A new leaf's start from the columns it reads, for a family that ``starts_from_data`` (a linear
    part's offset and variance, :meth:`savigp.kernels.linear.Linear.initial_from_data`)."""
    import torch

    dims = leaf.get("active_dims")
    cols = X[:, list(dims)] if dims is not None else X
    return family_of(leaf).initial_from_data(torch.as_tensor(writable(cols)))


def warm_spec(terms, parent: Optional[dict], periods: dict, shift: int = 0, starts: Optional[dict] = None,
               neutral: Optional[dict] = None) -> Optional[dict]:
    """The candidate's spec: leaves it shares with the parent start at the parent's fitted values
    (matched term by term, by family and columns), new periodic leaves at the periodogram's peaks:
    the first at peak ``shift`` (0: the strongest), the next at the next peak, and so on; other new
    leaves at ``starts[leaf key]`` where given (a linear leaf's offset and variance).

    With ``neutral`` (leaf key -> the leaf's default length-scales ``[[l_1, ..., l_d]]``), the
    neutral start of a child that adds one base kernel to its parent: the new kernel leaves the
    parent's prior almost as it was, so that the child starts at about the parent's ELBO and its
    fit can only climb from there. A new term starts at variance 0.01 (``k + 0.01 k_new``); a new
    factor of a family that declares ``search_neutral_factor`` (the stationary ones) at variance 1 and
    ten times its default length-scales (``k x k_new`` with ``k_new`` >= 0.94 over the data). None where no such start exists (a new periodic
    or linear factor: flat in its parameters near 1, or never 1)."""
    fitted = terms_of(parent) if parent is not None else []
    used = set()
    if neutral is not None and not fitted:
        return None

    def values_for(t_index, leaf):
        for i, term in enumerate(fitted):
            for j, f in enumerate(term):
                if (i, j) not in used and leaf_key(f) == leaf_key(leaf) and (i == t_index or t_index >= len(fitted)):
                    used.add((i, j))
                    return {k: v for k, v in f.items() if k not in ("kernel", "active_dims")}
        return None

    out, new_periodic = [], {}
    for ti, term in enumerate(terms):
        leaves, fresh = [], []
        for leaf in term:
            v = values_for(ti, leaf)
            new = dict(leaf)
            if v is not None:
                new.update(v)
            else:
                fresh.append(len(leaves))
                if starts and leaf_key(leaf) in starts:
                    new.update(starts[leaf_key(leaf)])
                elif family_of(leaf).has_period:  # the first new one at the strongest peak, the next at the next
                    dims = tuple(leaf.get("active_dims") or [])
                    peaks = periods.get(dims, [])
                    if peaks:
                        n = new_periodic.get(dims, shift)
                        new["period"] = float(peaks[n % len(peaks)])
                        new_periodic[dims] = n + 1
            leaves.append(new)
        if neutral is not None and fresh:
            leaf = leaves[fresh[0]]
            if len(fresh) == len(leaves):  # a new term
                leaf["variance"] = [0.01]
            elif family_of(leaf).search_neutral_factor and leaf_key(leaf) in neutral:
                leaf["variance"] = [1.0]
                leaf["lengthscale"] = [[10.0 * float(v) for v in row] for row in neutral[leaf_key(leaf)]]
            else:
                return None
        out.append(leaves[0] if len(leaves) == 1 else {"product": leaves})
    return out[0] if len(out) == 1 else {"sum": out}


def inherit(child, parent) -> None:
    """The neutral start's other half: ``child`` takes the fitted ``parent``'s q(u) (where their
    inducing inputs and posterior shapes are the same), its likelihood's parameters and its prior
    mean, so that with a prior almost the parent's its ELBO starts at about the parent's (a fresh
    q(u) and the likelihood at its initial values were tens of nats below it after settling)."""
    import torch

    ours, theirs = child.state_dict(), parent.state_dict()
    z, z_parent = ours.get("inducing"), theirs.get("inducing")
    same_z = z is not None and z_parent is not None and z.shape == z_parent.shape and bool(torch.equal(z, z_parent))
    take = {k: v for k, v in theirs.items()
            if k in ours and ours[k].shape == v.shape and not k.startswith(("kernel.", "inducing"))
            and (same_z or not k.startswith(("posterior.", "mean_head.")))}
    child.load_state_dict({**ours, **take})


def extends(terms, parent_terms) -> bool:
    """Is ``terms`` ``parent_terms`` with one more base kernel (a new term or a new factor)?"""
    want = canonical_key(parent_terms)
    for i, term in enumerate(terms):
        for j in range(len(term)):
            rest = [t if k != i else t[:j] + t[j + 1:] for k, t in enumerate(terms)]
            if canonical_key([t for t in rest if t]) == want:
                return True
    return False


def projections(child: dict, parent_terms) -> list:
    """Specs of the parent's structure at a fitted child's values: the child less one of its base
    kernels (a term left empty dropped), for each base kernel whose removal leaves the parent's
    structure (none when the child replaced a base kernel)."""
    terms, want, out = terms_of(child), canonical_key(parent_terms), []
    for i, term in enumerate(terms):
        for j in range(len(term)):
            rest = [t if k != i else t[:j] + t[j + 1:] for k, t in enumerate(terms)]
            rest = [copy.deepcopy(t) for t in rest if t]
            if rest and canonical_key(rest) == want:
                spec = [t[0] if len(t) == 1 else {"product": t} for t in rest]
                spec = spec[0] if len(spec) == 1 else {"sum": spec}
                if spec not in out:
                    out.append(spec)
    return out


def count_periodic(terms) -> int:
    return sum(family_of(leaf).has_period for term in terms for leaf in term)


def periods_of(spec: dict) -> list:
    """The starting periods of ``spec``'s periodic leaves, in order (None where unset)."""
    return [leaf.get("period") for term in terms_of(spec) for leaf in term if family_of(leaf).has_period]


def terms_of(spec: dict) -> list:
    """A sum-of-products spec as a list of lists of leaves."""
    terms = spec["sum"] if "sum" in spec else [spec]
    return [t["product"] if "product" in t else [t] for t in terms]


def residual_peaks(model, X: np.ndarray, Y: np.ndarray, groups, count: int) -> dict:
    """The periodogram peaks of what the model leaves unexplained (:func:`working_residuals`), per
    group of input columns: a season the current expression already explains (or its harmonics) is
    not proposed again. An empty dict when there is nothing to read."""
    residual, weights = working_residuals(model, X, Y)
    if residual is None:
        return {}
    return {tuple(g or []): periodogram_peaks(X, residual, g, count, weights=weights) for g in groups}


def working_residuals(model, X: np.ndarray, Y: np.ndarray):
    """What ``model`` leaves unexplained, read in the latent space where a new kernel part acts: at
    its latent mean m_n, one Newton step of log p(y_n | f) in f (the working residual of iteratively
    reweighted least squares, McCullagh and Nelder 1989, §2.5),

        r_n = -g_n / h_n,    g_n = d log p(y_n | f) / df,    h_n = d^2 log p(y_n | f) / df^2  at f = m_n,

    with the weights w_n = -h_n (0 where the likelihood is not locally concave). For a Gaussian
    likelihood r_n = y_n - m_n with equal weights; for counts with a log link r_n = (y_n - exp m_n) /
    exp m_n, weighted by exp m_n: its y-space residual reads a season at the scale of the rate.

    Returns:
        ``(r (N, 1), w (N,))``; without autograd derivatives (a likelihood that is not
        ``differentiable``, or Q > 1): the targets less the predictive mean ``(N, P)`` and None;
        ``(None, None)`` when the likelihood has no predictive mean either.
    """
    import torch

    with torch.no_grad():
        prediction = model.predict(X)
    lik, m = model.likelihood, prediction.latent_mean
    if getattr(lik, "differentiable", False) and m is not None and m.shape[-1] == 1:
        try:
            f = m.detach().clone().requires_grad_(True)
            y = torch.as_tensor(writable(Y), dtype=f.dtype, device=f.device)
            g, = torch.autograd.grad(lik.log_prob(y, f).sum(), f, create_graph=True)
            h, = torch.autograd.grad(g.sum(), f)  # log p(y_n | f_n) depends on f_n alone: the diagonal
            g, h = g.detach().cpu().numpy()[:, 0], h.detach().cpu().numpy()[:, 0]
            w = np.where(np.isfinite(h) & (h < 0), -h, 0.0)
            if np.all(np.isfinite(g)) and np.count_nonzero(w) >= 8:
                return np.where(w > 0, g / np.where(w > 0, w, 1.0), 0.0)[:, None], w
        except (RuntimeError, ValueError, TypeError, NotImplementedError):
            pass  # (no second derivative: the y-space residuals)
    if prediction.mean is None:
        return None, None
    return Y - prediction.mean.detach().cpu().numpy().reshape(Y.shape), None
