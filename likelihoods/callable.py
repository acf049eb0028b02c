"""Turn any user function ``log_lik(y, f) -> log p(y | f)`` into a likelihood.

The function may be written in torch or in numpy/scipy (or call a simulator): it receives the
targets ``y`` of shape ``(B, P)`` and latent values ``f`` of shape ``(..., B, Q)`` and must return
``(..., B)``. For the latent functions only its *values* are needed (Bonilla et al. 2019, §5:
score-function gradients), so it need not be differentiable, and a numpy function works
unchanged: inputs are handed over as numpy arrays when ``backend="numpy"`` and the result is
converted back.

**Every task.** ``task="regression"`` (the default; predictive means from an optional
``mean_fn``) or ``task="classification"``: the labels are a finite set ``classes`` (default
``0, ..., num_classes - 1``) and the class probabilities are the user's own function evaluated at
every label, p(y = c | f) = exp(log_lik(c, f)) / sum_c' exp(log_lik(c', f)) (the normalization
is a no-op for a normalized likelihood; a function whose values do not sum to one over the
labels gets a warning once).

**The support of y.** ``support=`` says where y lives, for the checks of
:func:`savigp.testing.check_likelihood` (which integrate exp(log_lik) over y) and for plots (which
read the predictive interval off the density on a grid of y): ``"real"`` (the real line),
``"positive"`` (0, inf), ``"unit_interval"`` (0, 1), ``"counts"`` (0, 1, 2, ...), ``"circle"``
(an angle in radians, y and y + 2 pi the same point, integrated over [-pi, pi]), or a pair
``(lo, hi)`` (an interval; ``None`` or an infinity for an open end); ``{"support": ..., "atoms":
[0.0]}`` adds point masses (a censoring point, a zero inflation of a continuous y), where
exp(log_lik) is a probability, not a density; one for all P outputs or a list of P. Left out, the
checks infer candidates from the targets (:func:`parse_support`).

**Learnable parameters.** ``params={"r": 3.0}`` adds keyword arguments of ``log_lik`` that are
learned with the rest of the model (``constraints={"r": "positive"}`` keeps one positive through
a softplus, ``"unit_interval"`` keeps one in (0, 1) through the logistic function, e.g. a
zero-inflation probability, ``"fixed"`` holds it). They enter the ELBO only through the expected log-likelihood,
whose gradient in a parameter phi is (phi does not enter q)

    d/dphi E_q[log p(y | f, phi)] = E_q[d/dphi log p(y | f, phi)],

estimated from the same Monte Carlo draws as the value. The derivative inside comes from torch
autograd for a torch function and from central finite differences for a numpy one (two extra
calls per scalar parameter in the backward pass; a positive parameter is differenced in log
phi, one in (0, 1) in logit(phi)). The finite-difference step h = eps^(1/3) * max(1, |phi|) balances truncation, O(h^2), and
rounding, O(eps / h): measured 1e-10 to 6e-9 relative against closed-form and autograd
derivatives (experiments/user_parameter_gradient.py), far below the Monte Carlo error.
"""
from __future__ import annotations

import inspect
import math
import warnings
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from .base import Likelihood, bad_rows_message
from .parameters import POSITIVE_FLOOR, positive_from_raw, raw_from_positive, raw_from_unit, unit_from_raw

#: constraints a user parameter can have
CONSTRAINTS = ("real", "positive", "unit_interval", "fixed")
#: the named supports of y (``support=``); a pair (lo, hi) gives any interval
SUPPORTS = ("real", "positive", "unit_interval", "counts", "circle")
#: the most labels a classification likelihood takes from its training targets (more: pass classes)
MAX_INFERRED_CLASSES = 1000
#: relative central-difference step for numpy parameter derivatives: eps^(1/3)
_FD_STEP = float(np.finfo(np.float64).eps) ** (1.0 / 3.0)


def _numpy_on_tensor(err: BaseException) -> bool:
    """True for the error numpy code raises when it is handed a tensor that requires a gradient
    (``np.log(s)`` on a learned parameter, ``array - f``): torch's ``Can't call numpy() on Tensor
    that requires grad``."""
    return isinstance(err, RuntimeError) and "numpy() on Tensor that requires grad" in str(err)


def _first_line(err: BaseException) -> str:
    """The first line of an error's message."""
    return (str(err).strip().splitlines() or [""])[0]


def _describe_function(fn: Callable, import_path: Optional[str]) -> str:
    """``'name' (file.py, line 12)`` for messages: where the user's function is defined."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    try:
        where = inspect.getsourcefile(fn)
        line = inspect.getsourcelines(fn)[1]
        loc = f" ({where}, line {line})"
    except (TypeError, OSError):
        loc = f" ({import_path})" if import_path else ""
    return f"user likelihood {name!r}{loc}"


class _NumpyWithParameters(torch.autograd.Function):
    """log p values of a numpy function, with the gradient in its parameters by central differences.

    forward(lik, y, f, names, *values) -> ``(..., B)``; backward returns, for each parameter
    tensor phi (any shape), sum over the output of grad_out * d log p / d phi_i. No gradient
    reaches f (a numpy function is never differentiated in f)."""

    @staticmethod
    def forward(ctx, lik, y, f, names, *values):
        ctx.lik, ctx.names = lik, names
        ctx.save_for_backward(y, f, *values)
        return lik._numpy_values(lik.fn, (y, f), dict(zip(names, values)), like=f)

    @staticmethod
    def backward(ctx, grad_out):
        y, f, *values = ctx.saved_tensors
        lik, names = ctx.lik, ctx.names
        grads = []
        for j, (name, v) in enumerate(zip(names, values)):
            if not ctx.needs_input_grad[4 + j]:
                grads.append(None)
                continue
            g = torch.zeros_like(v)
            flat = g.view(-1)
            for i in range(v.numel()):
                flat[i] = (grad_out * lik._parameter_derivative(y, f, names, values, name, i)).sum()
            grads.append(g)
        return (None, None, None, None, *grads)


class CallableLikelihood(Likelihood):
    """Wrap ``log_lik(y, f[, **params])`` as a likelihood.

    Args:
        log_lik: the function; ``y (B, P)``, ``f (..., B, Q)`` -> ``(..., B)``.
        num_latent: Q, the number of latent functions it reads.
        output_dim: P, the number of target columns it expects (default 1; 1 for classification).
        backend: ``"torch"`` (tensors in, tensor out), ``"numpy"`` (arrays in, array out) or
            ``"auto"``: call with tensors and, if the function fails on tensors or returns a numpy
            array, use numpy from then on.
        differentiable: the function is a torch expression differentiable in f (enables the
            reparameterization estimator). With ``backend="auto"`` this selects the torch
            backend; the first call checks that the result carries a gradient to f and raises
            a ``ValueError`` with the reason otherwise. ``backend="numpy"`` with
            ``differentiable=True`` is an error.
        task: ``"regression"`` (default) or ``"classification"``.
        mean_fn: optional ``mean_fn(f[, **params])`` (same backend): E[y | f] as ``(..., B, P)``
            (or ``(..., B)`` when P = 1), or a pair (E[y | f], Var[y | f]). It gives predictive
            means (and SSE); the predictive variance needs the pair and is None without it.
        import_path: how to re-import ``log_lik`` (``"pkg.module:function"`` or
            ``"file.py:function"``); recorded in model files so that they can be loaded again.
        params: learnable keyword parameters of ``log_lik`` (and of ``mean_fn`` when it accepts
            them): name -> initial value (a number or a list of numbers).
        constraints: name -> ``"real"`` (default), ``"positive"`` (softplus), ``"unit_interval"``
            (in (0, 1) through the logistic function: a probability) or ``"fixed"``.
        classes: classification: the label of each class (numbers); default
            ``0, ..., num_classes - 1``.
        num_classes: classification: C, when ``classes`` is not given.
        ordered: classification: the labels are ordered (an ordinal likelihood), so that the mean
            and variance of the label are meaningful (``savigp predict`` writes them only then).
        min_log_prob: optional floor for the function's values: -inf (and anything below) is
            replaced by it, for simulators whose densities underflow. NaN still raises.
        mean_import_path: how to re-import ``mean_fn`` (recorded in model files).
        support: regression: where y lives (module docstring): ``"real"``, ``"positive"``,
            ``"unit_interval"``, ``"counts"``, ``"circle"`` or ``(lo, hi)``, one for all outputs or
            a list of ``output_dim``; None (default): not declared.
    """

    def __init__(
        self,
        log_lik: Callable,
        num_latent: int = 1,
        output_dim: int = 1,
        backend: str = "auto",
        differentiable: bool = False,
        task: str = "regression",
        mean_fn: Optional[Callable] = None,
        import_path: Optional[str] = None,
        *,
        params: Optional[Mapping[str, object]] = None,
        constraints: Optional[Mapping[str, str]] = None,
        classes: Optional[Sequence[float]] = None,
        num_classes: Optional[int] = None,
        ordered: bool = False,
        min_log_prob: Optional[float] = None,
        mean_import_path: Optional[str] = None,
        support=None,
    ):
        super().__init__()
        if not callable(log_lik):
            raise TypeError(f"CallableLikelihood: log_lik must be callable, got {type(log_lik).__name__}")
        if isinstance(log_lik, type):
            raise TypeError(f"CallableLikelihood: log_lik is the class {log_lik.__name__}, not a function; a "
                            "Likelihood subclass is used directly (construct it), not wrapped")
        if backend not in ("torch", "numpy", "auto"):
            raise ValueError(f"CallableLikelihood: backend must be 'torch', 'numpy' or 'auto', got {backend!r}")
        if int(num_latent) < 1:
            raise ValueError(f"CallableLikelihood: num_latent must be >= 1, got {num_latent}")
        if task not in ("regression", "classification"):
            raise ValueError(f"CallableLikelihood: task must be 'regression' or 'classification', got {task!r}")
        if differentiable and backend == "numpy":
            raise ValueError("CallableLikelihood: differentiable=True needs a torch function (backend='torch' or "
                             "'auto'); a numpy function has no gradient in f (leave differentiable=False: the "
                             "score-function estimator needs values only)")
        self.fn = log_lik
        self.num_latent = int(num_latent)
        self.output_dim = int(output_dim)
        self.backend = "torch" if (differentiable and backend == "auto") else backend
        self._backend_arg = backend
        self.mean_backend = backend
        self.differentiable = bool(differentiable)
        self._checked_gradient = not self.differentiable
        self.task = task
        self.mean_fn = mean_fn
        self.import_path = import_path
        self.mean_import_path = mean_import_path
        self.min_log_prob = None if min_log_prob is None else float(min_log_prob)
        if self.min_log_prob is not None and not math.isfinite(self.min_log_prob):
            raise ValueError(f"CallableLikelihood: min_log_prob must be a finite number, got {min_log_prob!r}")
        self._name = getattr(log_lik, "__name__", type(log_lik).__name__)
        self._warned_normalization = False
        self._init_parameters(dict(params or {}), dict(constraints or {}))
        self._init_classes(classes, num_classes)
        if ordered and task != "classification":
            raise ValueError("CallableLikelihood: ordered=True applies to task='classification' only")
        self.ordered = bool(ordered)
        if support is not None and task == "classification":
            raise ValueError("CallableLikelihood: support applies to task='regression' (a classifier's y is one of "
                             "its classes)")
        try:
            parse_support(support, self.output_dim)
        except ValueError as err:
            raise ValueError(f"CallableLikelihood: {err}") from None
        self.support = support if support is None or isinstance(support, str) else _plain_support(support)

    # ------------------------------------------------------------------ construction helpers
    def _init_parameters(self, params: dict, constraints: dict) -> None:
        unknown = set(constraints) - set(params)
        if unknown:
            raise ValueError(f"CallableLikelihood: constraints for unknown parameter(s) {sorted(unknown)}; "
                             f"params are {sorted(params)}")
        self.raw_params = nn.ParameterDict()
        self.constraints: dict = {}
        self._param_init: dict = {}
        for name, value in params.items():
            if not str(name).isidentifier():
                raise ValueError(f"CallableLikelihood: parameter name {name!r} is not a Python identifier")
            kind = constraints.get(name, "real")
            if kind not in CONSTRAINTS:
                raise ValueError(f"CallableLikelihood: constraint of {name!r} must be one of {CONSTRAINTS}, got {kind!r}")
            try:
                v = torch.as_tensor(np.asarray(value, dtype=np.float64))
            except (TypeError, ValueError):
                raise ValueError(f"CallableLikelihood: parameter {name!r} must be a number or a list of numbers, "
                                 f"got {value!r}") from None
            if not bool(torch.isfinite(v).all()):
                raise ValueError(f"CallableLikelihood: parameter {name!r} must be finite, got {value!r}")
            if kind == "positive":
                if not bool((v > POSITIVE_FLOOR).all()):
                    raise ValueError(f"CallableLikelihood: positive parameter {name!r} must start above "
                                     f"{POSITIVE_FLOOR}, got {value!r}")
                v = raw_from_positive(v)
            if kind == "unit_interval":
                if not bool(((v > 0) & (v < 1)).all()):
                    raise ValueError(f"CallableLikelihood: parameter {name!r} in the unit interval must start "
                                     f"strictly between 0 and 1, got {value!r}")
                v = raw_from_unit(v)
            self.raw_params[name] = nn.Parameter(v, requires_grad=kind != "fixed")
            self.constraints[name] = kind
            self._param_init[name] = np.asarray(value, dtype=np.float64).tolist()
        if params:
            self._check_accepts(self.fn, "log_lik")

    def _check_accepts(self, fn: Callable, what: str) -> bool:
        """True when ``fn`` accepts every parameter as a keyword; for ``log_lik`` a TypeError if not."""
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins and some callables: cannot tell
            return True
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
            return True
        missing = [n for n in self.raw_params if n not in sig.parameters]
        if missing and what == "log_lik":
            raise TypeError(f"{_describe_function(fn, self.import_path)} does not accept the parameter(s) "
                            f"{missing} as keyword arguments: define it as {self._name}(y, f, "
                            f"{', '.join(f'{n}=...' for n in self.raw_params)})")
        return not missing

    def _init_classes(self, classes, num_classes) -> None:
        self.classes = None
        if self.task != "classification":
            if classes is not None or num_classes is not None:
                raise ValueError("CallableLikelihood: classes/num_classes apply to task='classification' only")
            return
        if self.output_dim != 1:
            raise ValueError(f"CallableLikelihood: a classification likelihood takes one column of labels "
                             f"(output_dim=1), got output_dim={self.output_dim}")
        try:  # None without classes and num_classes: set from the training labels by initialize_from_data
            self.classes = label_set(classes, num_classes)
        except ValueError as err:
            raise ValueError(f"CallableLikelihood: {err}") from None

    # ------------------------------------------------------------------ parameters
    def parameter_tensors(self) -> dict:
        """The current parameter values: name -> tensor (constrained, differentiable);
        :meth:`parameter_values` gives them as plain values."""
        out = {}
        for name, raw in self.raw_params.items():
            kind = self.constraints[name]
            out[name] = positive_from_raw(raw) if kind == "positive" else unit_from_raw(raw) if kind == "unit_interval" else raw
        return out

    def spec(self) -> dict:
        """Plain-value description from which the model file rebuilds this likelihood (with
        ``import_path``): ``{"name": "callable", "class", "import_path", "kwargs"}``, with
        ``"code_kwargs": {"mean_fn": {"import_path": mean_import_path}}`` for a mean function
        (code is never among ``kwargs``: a model file records it apart, with its SHA-256, and
        runs it only with the caller's consent). Learned parameter values are in the state dict;
        ``kwargs["params"]`` holds the initial ones."""
        kwargs = {"num_latent": self.num_latent, "output_dim": self.output_dim,
                  "backend": self._backend_arg,
                  "task": self.task}
        if self.differentiable:
            kwargs["differentiable"] = True
        if self._param_init:
            kwargs["params"] = dict(self._param_init)
            kwargs["constraints"] = dict(self.constraints)
        if self.classes is not None:
            kwargs["classes"] = list(self.classes)
        if self.ordered:
            kwargs["ordered"] = True
        if self.min_log_prob is not None:
            kwargs["min_log_prob"] = self.min_log_prob
        if self.support is not None:
            kwargs["support"] = self.support
        spec = {"name": "callable", "class": "CallableLikelihood", "import_path": self.import_path, "kwargs": kwargs}
        if self.mean_import_path is not None:
            spec["code_kwargs"] = {"mean_fn": {"import_path": self.mean_import_path}}
        return spec

    # ------------------------------------------------------------------ calling the user's code
    def describe(self) -> str:
        """How messages name the user's function: ``user likelihood 'name' (file, line)``."""
        return _describe_function(self.fn, self.import_path)

    def _name_in_errors(self) -> str:
        return self.describe()

    def _numpy_values(self, fn: Callable, args: tuple, params: dict, like: Tensor) -> Tensor:
        np_args = [a.detach().cpu().numpy() for a in args]
        np_params = {k: v.detach().cpu().numpy() for k, v in params.items()}
        out = fn(*np_args, **np_params)
        return self._as_tensor(out, like)

    @staticmethod
    def _as_tensor(out, like: Tensor) -> Tensor:
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], (Tensor, np.ndarray)):
            return type(out)(CallableLikelihood._as_tensor(o, like) for o in out)
        if not isinstance(out, Tensor):
            out = torch.as_tensor(np.asarray(out, dtype=np.float64))
        return out.to(device=like.device, dtype=like.dtype)

    def _failure(self, err: BaseException, args: tuple, what: str) -> ValueError:
        shapes = " and ".join(f"{n} of shape {tuple(a.shape)}" for n, a in zip(("y", "f") if len(args) == 2 else ("f",), args))
        hint = ""
        if isinstance(err, IndexError) and f"size {self.num_latent}" in str(err):
            hint = (f" (it was given Q = num_latent = {self.num_latent} latent function(s) in the last axis of f: "
                    "if it reads more, pass num_latent=...)")
        return ValueError(f"{self.describe()}: {what} failed when called with {shapes}: "
                          f"{type(err).__name__}: {err}{hint}")

    def _call(self, fn: Callable, *args: Tensor, params: Optional[dict] = None, what: str = "log_lik") -> Tensor:
        like = args[-1]
        params = {} if params is None else params
        role = "backend" if what == "log_lik" else "mean_backend"  # each function has its own
        if getattr(self, role) == "auto":
            setattr(self, role, self._detect_backend(fn, args, params))
        backend = getattr(self, role)
        try:
            if backend == "numpy":
                if what == "log_lik" and params and any(v.requires_grad for v in params.values()) \
                        and torch.is_grad_enabled():
                    names = tuple(params)
                    return _NumpyWithParameters.apply(self, args[0], args[1], names, *params.values())
                return self._numpy_values(fn, args, params, like)
            out = fn(*args, **params)
        except Exception as err:
            if backend == "torch" and _numpy_on_tensor(err) and not self.differentiable:
                if self._backend_arg == "auto":  # detected as torch, but this call shows numpy code: numpy from now on
                    setattr(self, role, "numpy")
                    return self._call(fn, *args, params=params, what=what)
                raise ValueError(f"{self.describe()}: {what} computes with numpy ({type(err).__name__}: "
                                 f"{_first_line(err)}), but backend='torch' hands it tensors: pass backend='numpy' "
                                 "or 'auto' (on the command line: --lik-option backend=numpy)") from err
            if self.differentiable and backend == "torch" and what == "log_lik":
                raise ValueError(f"{self.describe()}: declared differentiable=True, so it is called with torch "
                                 f"tensors, but it failed: {type(err).__name__}: {err}. A numpy function cannot "
                                 "be differentiable in f: drop differentiable=True (training then uses the "
                                 "score-function estimator)") from err
            raise self._failure(err, args, what) from err
        return self._as_tensor(out, like)

    def _detect_backend(self, fn: Callable, args: tuple, params: dict) -> str:
        """``"torch"`` when ``fn`` computes with torch: given f that requires a gradient, its result
        carries one (numpy code either fails on such a tensor or returns an array, and a result
        produced by numpy on tensors through ``__array_wrap__`` has no gradient); else
        ``"numpy"`` when ``fn`` runs on arrays; ``"torch"`` for a tensor result that ignores f. For
        a pair (a mean function's mean and variance) the mean decides."""
        probe = list(args[:-1]) + [args[-1].detach().clone().requires_grad_(True)]
        # the parameters as training passes them: a learned one requires a gradient, so numpy code that
        # reads it (np.log(s)) fails here as it would in training (detached, it ran and looked like torch)
        probe_params = {k: v.detach().clone().requires_grad_(self._learned(k)) for k, v in params.items()}
        with torch.enable_grad(), warnings.catch_warnings():  # numpy code given tensors may warn before failing
            warnings.simplefilter("ignore")
            try:
                out = fn(*probe, **probe_params)
            except Exception:
                out = None
        if isinstance(out, (tuple, list)) and out:  # a mean function's pair (E[y | f], Var[y | f])
            out = out[0]
        if isinstance(out, Tensor) and out.requires_grad:
            return "torch"
        try:
            self._numpy_values(fn, args, params, like=args[-1])
        except Exception as err:
            if isinstance(out, Tensor):
                return "torch"
            raise self._failure(err, args, "log_lik" if len(args) == 2 else "mean_fn") from err
        return "numpy"

    def _learned(self, name: str) -> bool:
        """True for a parameter of ``log_lik`` that training learns (it then requires a gradient)."""
        return name in self.raw_params and self.raw_params[name].requires_grad and torch.is_floating_point(
            self.raw_params[name])

    def _parameter_derivative(self, y: Tensor, f: Tensor, names: tuple, values: list, name: str, i: int) -> Tensor:
        """d log p(y | f, phi) / d phi_i by central differences, ``(..., B)`` (numpy backend),
        evaluated in float64 whatever the model's dtype (a float32 difference would lose half of
        its digits to rounding), returned in f's dtype."""
        like = f
        y, f = y.detach().to(torch.float64), f.detach().to(torch.float64)
        params = {k: v.detach().to(torch.float64) for k, v in zip(names, values)}
        base = params[name]
        kind = self.constraints.get(name)
        phi = float(base.view(-1)[i])
        h = _FD_STEP if kind in ("positive", "unit_interval") else _FD_STEP * max(1.0, abs(phi))
        vals = []
        for sign in (1.0, -1.0):
            p = base.clone()
            if kind == "positive":  # in log phi
                p.view(-1)[i] = phi * math.exp(sign * h)
            elif kind == "unit_interval":  # in logit phi: d phi / d logit phi = phi (1 - phi)
                p.view(-1)[i] = 1.0 / (1.0 + math.exp(-(math.log(phi / (1 - phi)) + sign * h)))
            else:
                p.view(-1)[i] = phi + sign * h
            params[name] = p
            vals.append(self._numpy_values(self.fn, (y, f), params, like=f))
        diff = (vals[0] - vals[1]) / (2 * h)
        scale = phi if kind == "positive" else phi * (1 - phi) if kind == "unit_interval" else 1.0
        return (diff / scale).to(like.dtype)

    def _floored(self, out: Tensor) -> Tensor:
        if self.min_log_prob is None:
            return out
        floor = torch.as_tensor(self.min_log_prob, dtype=out.dtype, device=out.device)
        return torch.where(torch.isnan(out), out, torch.maximum(out, floor))

    def suggest_differentiable(self, y: Tensor) -> Optional[str]:
        """Once per likelihood: a one-line suggestion to declare ``differentiable=True`` when the
        function, not declared so, is differentiable in f in torch -- called with torch tensors on
        the rows ``y (B, P)`` and seeded f ~ N(0, 0.3^2) of shape ``(2, B, Q)`` that require a
        gradient, it returns a tensor of shape ``(2, B)`` carrying one, and autograd gives finite
        values and finite gradients. Else (a numpy function, a failure, non-finite values) None.
        The reparameterization estimator that ``differentiable=True`` selects is usually far less
        noisy than the score function (Bonilla et al. 2019, §5)."""
        if self.differentiable or self.backend == "numpy" or getattr(self, "_suggested", False):
            return None
        self._suggested = True
        y = y[:3]
        gen = torch.Generator().manual_seed(0)
        f = (0.3 * torch.randn(2, y.shape[0], self.num_latent, generator=gen, dtype=torch.float64))
        f = f.to(device=y.device, dtype=y.dtype).requires_grad_(True)
        params = {k: v.detach() for k, v in self.parameter_tensors().items()}
        with torch.enable_grad(), warnings.catch_warnings():  # numpy code given tensors may warn before failing
            warnings.simplefilter("ignore")
            try:
                out = self.fn(y, f, **params)
                if not (isinstance(out, Tensor) and out.requires_grad and tuple(out.shape) == tuple(f.shape[:-1])):
                    return None
                (grad,) = torch.autograd.grad(out.sum(), f)
            except Exception:
                return None
        if not (bool(torch.isfinite(out).all()) and bool(torch.isfinite(grad).all())):
            return None
        return (f"{self.describe()} is differentiable in f with torch (autograd gave finite gradients on "
                f"{y.shape[0]} rows), but it is not declared so and gets the score-function estimator: "
                "differentiable=True selects the reparameterization estimator, usually much less noisy")

    # ------------------------------------------------------------------ the protocol
    def _log_prob(self, y: Tensor, f: Tensor) -> Tensor:
        out = self._call(self.fn, y, f, params=self.parameter_tensors())  # shape checked by Likelihood.log_prob
        if not self._checked_gradient and torch.is_grad_enabled() and f.requires_grad:
            if not out.requires_grad:
                raise ValueError(f"{self.describe()}: declared differentiable=True but its result has no gradient "
                                 "with respect to f (it leaves torch, e.g. through .numpy() or float()): drop "
                                 "differentiable=True to use the score-function estimator")
            self._checked_gradient = True
        return self._floored(out)

    def conditional_moments(self, f: Tensor) -> tuple:
        """E[y | f] ``(..., B, P)`` and Var[y | f] (or None when ``mean_fn`` gives the mean only).

        Classification without ``mean_fn``: the mean and variance of the label under the class
        probabilities."""
        if self.mean_fn is None:
            if self.task == "classification" and self.classes is not None:
                p = self.class_probabilities(f)
                c = torch.as_tensor(self.classes, dtype=f.dtype, device=f.device)
                mean = (p * c).sum(-1, keepdim=True)
                return mean, (p * (c - mean) ** 2).sum(-1, keepdim=True)
            raise NotImplementedError(f"user likelihood {self._name!r} has no mean_fn")
        params = self.parameter_tensors()
        if params and not self._check_accepts(self.mean_fn, "mean_fn"):
            params = {}
        out = self._call(self.mean_fn, f, params=params, what="mean_fn")
        mean, var = (out[0], out[1]) if isinstance(out, (tuple, list)) else (out, None)
        if mean.dim() == f.dim() - 1:
            mean = mean.unsqueeze(-1)
        if var is not None and var.dim() == f.dim() - 1:
            var = var.unsqueeze(-1)
        expected = tuple(f.shape[:-1]) + (self.output_dim,)
        for label, t in (("E[y | f]", mean), ("Var[y | f]", var)):
            if t is not None and tuple(t.shape) != expected:
                raise ValueError(f"mean_fn of {self.describe()} returned {label} of shape {tuple(t.shape)} for f of "
                                 f"shape {tuple(f.shape)}; expected {expected}")
        return mean, var

    # ------------------------------------------------------------------ classification
    def _require_classes(self) -> list:
        if self.task != "classification":
            raise NotImplementedError(f"{self.describe()} is not a classification likelihood (task={self.task!r})")
        if self.classes is None:
            raise ValueError(f"{self.describe()}: the label set is unknown: pass classes=[...] or num_classes=C "
                             "(or build a model with it, which takes the labels of the training targets)")
        return self.classes

    def class_probabilities(self, f: Tensor) -> Tensor:
        """p(y = c | f) for every label c, ``(..., B, C)``: the user's function at each label,
        normalized over the labels."""
        classes = self._require_classes()
        B = f.shape[-2]
        lp = torch.stack([self.log_prob(torch.full((B, 1), c, dtype=f.dtype, device=f.device), f)
                          for c in classes], dim=-1)  # (..., B, C)
        lse = torch.logsumexp(lp, dim=-1, keepdim=True)
        if not self._warned_normalization:
            dev = float((lse.detach().abs()).nan_to_num(nan=float("inf")).max())
            if dev > 1e-3:
                self._warned_normalization = True
                warnings.warn(f"{self.describe()}: its probabilities over the labels {classes} sum to "
                              f"exp({dev:.3g}) instead of 1 for some f; class probabilities are renormalized",
                              RuntimeWarning, stacklevel=2)
        return torch.exp(lp - lse)

    def class_index(self, y: Tensor) -> Tensor:
        """Index in ``classes`` of each row's label, ``(B,)`` (labels are validated first)."""
        c = torch.as_tensor(self._require_classes(), dtype=y.dtype, device=y.device)
        return (y[:, :1] == c).to(torch.int64).argmax(-1)

    def validate_targets(self, y: Tensor) -> None:
        super().validate_targets(y)
        msg = bad_rows_message(~torch.isfinite(y), y, "are not finite")
        if msg is None and self.task == "classification" and self.classes is not None:
            c = torch.as_tensor(self.classes, dtype=y.dtype, device=y.device)
            msg = bad_rows_message(~(y[:, :1] == c).any(-1), y,
                                   f"are not labels in {{{', '.join(_label(v) for v in self.classes)}}}")
        if msg:
            raise ValueError(f"{self.describe()}: {msg}")

    def initialize_from_data(self, y: Tensor) -> None:
        """Classification without a label set: the sorted distinct training labels."""
        if self.task == "classification" and self.classes is None:
            try:
                self.classes = label_set(targets=y[:, 0])
            except ValueError as err:
                raise ValueError(f"{self.describe()}: {err}") from None

    def extra_repr(self) -> str:
        extra = f", params={sorted(self.raw_params)}" if len(self.raw_params) else ""
        cls = f", classes={self.classes}" if self.classes is not None else ""
        return f"fn={self._name}, num_latent={self.num_latent}, backend={self.backend}, task={self.task}{cls}{extra}"


def label_set(classes: Optional[Sequence[float]] = None, num_classes: Optional[int] = None,
              targets=None) -> Optional[list]:
    """The labels of a classification likelihood, in order, checked: ``classes`` (two or more
    distinct finite values; ``num_classes``, if also given, must count them), else
    ``0, ..., num_classes - 1`` (an integer >= 2), else the sorted distinct values of ``targets``
    (training labels, a tensor or array of shape ``(N,)``; two to ``MAX_INFERRED_CLASSES`` of them),
    else None. A ValueError names the argument; callers prefix who they are (the command line
    uses it for ``--num-classes`` and the target column, so there is one check of a label set)."""
    if classes is None and num_classes is not None:
        if int(num_classes) != num_classes or int(num_classes) < 2:
            raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        classes = list(range(int(num_classes)))
    if classes is not None:
        labels = [float(c) for c in classes]
        if len(labels) < 2 or len(set(labels)) != len(labels) or not all(math.isfinite(c) for c in labels):
            raise ValueError(f"classes must be two or more distinct finite labels, got {classes!r}")
        if num_classes is not None and int(num_classes) != len(labels):
            raise ValueError(f"num_classes={num_classes} but {len(labels)} classes were given")
        return labels
    if targets is None:
        return None
    labels = [float(v) for v in torch.unique(torch.as_tensor(targets)).tolist()]
    if len(labels) < 2:
        raise ValueError(f"the training targets hold only the label(s) {labels}; pass classes=[...] or num_classes=C")
    if len(labels) > MAX_INFERRED_CLASSES:
        raise ValueError(f"the training targets hold {len(labels)} distinct labels; for classification pass "
                         "classes=[...] (or use task='regression')")
    return labels


def _label(v: float) -> str:
    return str(int(v)) if float(v) == int(v) else repr(float(v))


def parse_support(support, output_dim: int) -> Optional[tuple]:
    """The support of each of ``output_dim`` outputs from what a user declared (``support=``):
    a tuple of P ``(kind, lo, hi, atoms)``, kind ``"interval"`` (lo, hi possibly infinite: the
    real line is (-inf, inf)), ``"counts"`` (0, 1, 2, ...; lo = 0, hi = inf) or ``"circle"``
    (lo = -pi, hi = pi), and ``atoms`` a tuple of point masses; None for None. ``support`` is a
    name of :data:`SUPPORTS`, a pair ``(lo, hi)`` (None or an infinity for an open end), a dict
    ``{"support": one of those, "atoms": [values]}``, or a list of ``output_dim`` of those. A
    ValueError names what is wrong."""
    if support is None:
        return None
    if isinstance(support, (str, dict)) or _is_pair(support):
        entries = [support] * int(output_dim)
    else:
        try:
            entries = list(support)
        except TypeError:
            raise ValueError(f"support must be one of {SUPPORTS}, a pair (lo, hi) or a list of {output_dim} of "
                             f"those, got {support!r}") from None
        if len(entries) != int(output_dim):
            raise ValueError(f"support lists {len(entries)} entries but there are {output_dim} outputs "
                             f"(output_dim): give one for all outputs or one per output")
    return tuple(_one_support(s) for s in entries)


def _is_pair(value) -> bool:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)) or len(value) != 2:
        return False
    return all(v is None or isinstance(v, (int, float, np.integer, np.floating)) for v in value)


def _one_support(value) -> tuple:
    if isinstance(value, dict):
        if set(value) - {"support", "atoms"} or "support" not in value or isinstance(value["support"], dict):
            raise ValueError(f"support as a dict takes 'support' (a name or (lo, hi)) and 'atoms' (a list of "
                             f"numbers), got {value!r}")
        kind, lo, hi, _ = _one_support(value["support"])
        try:
            atoms = tuple(float(a) for a in value.get("atoms", ()))
        except (TypeError, ValueError):
            raise ValueError(f"support atoms must be a list of numbers, got {value.get('atoms')!r}") from None
        if kind == "counts" or not all(math.isfinite(a) and lo <= a <= hi for a in atoms):
            raise ValueError(f"support atoms must be finite values within [lo, hi] of a continuous support, got "
                             f"{value!r}")
        return kind, lo, hi, atoms
    named = {"real": ("interval", -math.inf, math.inf, ()), "positive": ("interval", 0.0, math.inf, ()),
             "unit_interval": ("interval", 0.0, 1.0, ()), "counts": ("counts", 0.0, math.inf, ()),
             "circle": ("circle", -math.pi, math.pi, ())}
    if isinstance(value, str):
        if value not in named:
            raise ValueError(f"support must be one of {SUPPORTS} or a pair (lo, hi), got {value!r}")
        return named[value]
    if not _is_pair(value):
        raise ValueError(f"support must be one of {SUPPORTS} or a pair (lo, hi) of numbers (None for an open "
                         f"end), got {value!r}")
    lo = -math.inf if value[0] is None else float(value[0])
    hi = math.inf if value[1] is None else float(value[1])
    if math.isnan(lo) or math.isnan(hi) or not lo < hi:
        raise ValueError(f"support (lo, hi) needs lo < hi, got {tuple(value)!r}")
    return ("interval", lo, hi, ())


def _plain_support(support):
    """``support`` as plain JSON values for a model file: pairs as lists, infinite ends as None."""
    def plain(s):
        if isinstance(s, str):
            return s
        if isinstance(s, dict):
            return {"support": plain(s["support"]), "atoms": [float(a) for a in s.get("atoms", ())]}
        return [None if v is None or math.isinf(float(v)) else float(v) for v in s]

    return plain(support) if _is_pair(support) or isinstance(support, dict) else [plain(s) for s in support]
