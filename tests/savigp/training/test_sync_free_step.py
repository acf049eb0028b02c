"""The training step without host synchronization, its failure semantics, and the CUDA-graph
decision (savigp.training.step, savigp.runtime.sync_free)."""
import contextlib
import math
import warnings

import pytest
import torch

import savigp
from savigp.training import step as _step
from savigp.kernels.stationary import RBF
from savigp.estimators.nonfinite import NonFiniteLogProb
from likelihoods import CallableLikelihood, Gaussian, Logistic, Poisson
from conftest import requires_cuda

#: the Tensor methods that read a tensor back to the host (on CUDA: wait for the device)
HOST_READS = ("item", "__float__", "__int__", "__bool__", "tolist", "cpu", "numpy")


@contextlib.contextmanager
def no_host_reads():
    """Inside: every host read of a tensor raises (class-wide, so also inside torch's Python code)."""
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def forbid(name):
        def raiser(self, *args, **kwargs):
            raise AssertionError(f"host synchronization inside a training step: Tensor.{name}")
        return raiser

    for name in HOST_READS:
        setattr(torch.Tensor, name, forbid(name))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)


def _data(N=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N, 2, generator=g) * 4
    f = torch.sin(X[:, :1]) + 0.5 * torch.cos(X[:, 1:])
    return X, f, g


def _guarded_steps(monkeypatch):
    """Wrap StepRunner.step in no_host_reads; count the guarded steps."""
    original = _step.StepRunner.step
    count = {"steps": 0}

    def guarded(self, batch):
        with no_host_reads():
            out = original(self, batch)
        count["steps"] += 1
        return out

    monkeypatch.setattr(_step.StepRunner, "step", guarded)
    return count


@pytest.mark.parametrize("case", [
    ("gaussian", "closed-form", "full", 1, 0),
    ("gaussian", "reparam", "diag-u", 2, 0),
    ("logistic", "score", "full", 1, 0),
    ("logistic", "score", "diag-u", 2, 0),
    ("poisson", "reparam", "full", 1, 0),
    ("gaussian", "score", "full", 1, 6),  # with the decoupled mean head
])
def test_a_training_step_never_reads_a_tensor_back(monkeypatch, case):
    lik_name, estimator, posterior, K, G = case
    X, f, g = _data()
    if lik_name == "gaussian":
        lik, Y = Gaussian(0.1), f + 0.1 * torch.randn(f.shape, generator=g)
    elif lik_name == "logistic":
        lik, Y = Logistic(), torch.where(f > 0, 1.0, -1.0)
    else:
        lik, Y = Poisson(), torch.poisson(torch.exp(f), generator=g)
    model = savigp.SAVIGP(X, Y, lik, num_inducing=7, posterior=posterior, num_components=K, mean_basis_size=G)
    count = _guarded_steps(monkeypatch)
    h = savigp.fit(model, iterations=4, batch_size=20, lr=0.01, num_samples=10, estimator=estimator,
                   progress=False, log_every=4)
    assert count["steps"] == 4 and h.steps == 4
    assert all(math.isfinite(v) for v in h.elbo)
    # the guard is not vacuous: a host read inside the step fails it
    with no_host_reads(), pytest.raises(AssertionError, match="host synchronization"):
        float(model.elbo(num_samples=10).elbo)


@pytest.mark.parametrize("G", [0, 30])
def test_the_only_host_reads_in_a_cpu_step_are_the_fused_adam_step_counters(G):
    """torch.profiler sees reads from C++ too (aten::_local_scalar_dense, what .item() runs): in fit's
    step on the CPU they all come from the fused Adam kernel reading its step counters, which live on
    the host unless the optimizer is capturable (as fit makes it for a CUDA graph)."""
    from torch.profiler import ProfilerActivity, profile
    from savigp.training import make_adam

    X, f, g = _data()
    model = savigp.SAVIGP(X, torch.where(f > 0, 1.0, -1.0), Logistic(), num_inducing=7, mean_basis_size=G)
    opt = make_adam([p for p in model.parameters() if p.requires_grad], 0.01)
    runner = _step.StepRunner(model, opt, num_samples=10, estimator="score", generator=torch.Generator(), window=2)
    batch = torch.arange(20)
    runner.run(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runner.run(batch)
    reads = [e for e in prof.events() if e.name == "aten::_local_scalar_dense"]
    callers = set()
    for e in reads:
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::_fused"):
            parent = parent.cpu_parent
        callers.add(parent.name if parent is not None else "outside the optimizer")
    assert callers <= {"aten::_fused_adam_"}, callers
    assert runner.read()["ok"]


def test_the_sync_free_step_takes_the_same_steps_as_a_per_step_check():
    """log_every changes only when fit reads back: the ELBO trace and the parameters are identical."""
    X, f, g = _data()
    Y = torch.where(f > 0, 1.0, -1.0)
    runs = []
    for log_every in (1, 7):
        model = savigp.SAVIGP(X, Y, Logistic(), num_inducing=6, posterior="diag-u", num_components=2)
        h = savigp.fit(model, iterations=10, batch_size=20, lr=0.02, num_samples=10, estimator="score",
                       progress=False, log_every=log_every, seed=3)
        runs.append((h.elbo, [p.detach().clone() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0] and len(runs[0][0]) == 10
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


def _nan_after(calls_before_nan):
    calls = {"n": 0}

    def log_lik(y, f):
        calls["n"] += f.shape[0] == 10  # training's calls (num_samples=10), not the start's stationarity test (16)
        return -0.5 * (y[:, 0] - f[..., 0]) ** 2 + (float("nan") if calls["n"] > calls_before_nan else 0.0)

    return CallableLikelihood(log_lik, backend="torch")


def test_a_bad_step_inside_a_window_restores_the_last_good_step():
    """NaN log-likelihood values at the 4th step, read at the check after step 5: the likelihood's
    NonFiniteLogProb (rows, targets and f values, from evaluating that step again) naming the step,
    and the parameters are exactly those after the 3rd step."""
    X, f, g = _data(60)
    Y = f + 0.1 * torch.randn(f.shape, generator=g)
    ref = savigp.SAVIGP(X, Y, _nan_after(10 ** 9), num_inducing=5)
    # (estimator="score" by name: "auto" would first call the function once to suggest differentiable=True)
    savigp.fit(ref, iterations=3, num_samples=10, progress=False, seed=1, estimator="score")
    model = savigp.SAVIGP(X, Y, _nan_after(3), num_inducing=5)
    with pytest.raises(NonFiniteLogProb, match=r"returned NaN or inf for .*data row .*\(at training step 3;") as err:
        savigp.fit(model, iterations=10, num_samples=10, progress=False, seed=1, log_every=5, estimator="score")
    assert len(err.value.rows) == 3
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(a, b), name


def test_divergence_is_named_and_the_model_keeps_finite_parameters():
    """An infinite gradient at the 3rd step makes Adam's update NaN: TrainingDiverged names the step and
    the parameter, read at the check after step 5; the parameters are those after step 2."""
    X, f, g = _data(60)
    Y = f + 0.1 * torch.randn(f.shape, generator=g)
    ref = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=5)
    savigp.fit(ref, iterations=2, progress=False)
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=5)
    calls = {"n": 0}

    def poison(grad):
        calls["n"] += 1
        return grad * float("inf") if calls["n"] == 3 else grad

    model.posterior.mean.register_hook(poison)
    with pytest.raises(savigp.TrainingDiverged, match=r"at step 2: parameter posterior.mean has non-finite") as err:
        savigp.fit(model, iterations=8, progress=False, log_every=5)
    assert err.value.step == 2 and err.value.where == ("posterior.mean",)
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(a, b), name


class _IndefiniteRBF(RBF):
    """An RBF kernel whose K_zz (called with the same tensor twice) is shifted by -1e-6 I: slightly
    indefinite, as rounding can leave a kernel matrix of close inducing inputs."""

    def forward(self, x1, x2):
        K = super().forward(x1, x2)
        if x1 is x2:
            K = K - 1e-6 * torch.eye(K.shape[-1], dtype=K.dtype)
        return K


def test_a_failed_factorization_grows_the_jitter_and_training_goes_on():
    X, f, g = _data(60)
    Y = f + 0.1 * torch.randn(f.shape, generator=g)
    Z = torch.linspace(0, 4, 12)[:, None].expand(12, 2).contiguous() * torch.tensor([1.0, 0.0])
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), _IndefiniteRBF(2, 1, lengthscale=[1.0, 1.0]), inducing_inputs=Z,
                          learn_inducing=False)
    with pytest.warns(RuntimeWarning, match=r"could not be factorized at step 0 with relative jitter 1.0e-08"):
        h = savigp.fit(model, iterations=6, lr=0.01, progress=False, log_every=3)
    assert model.jitter_floor > 9e-6  # ten times the 1e-6 that factorizes it
    assert h.steps == 3 and all(math.isfinite(v) for v in h.elbo)  # steps 0-2 discarded, 3-5 kept


# ------------------------------------------------------------------ CUDA graphs: the decision and the fallback
def test_graph_decision():
    lik = Gaussian(0.1)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    use, why = _step.graph_decision(None, device=cpu, optimizer="adam", estimator="closed-form", likelihood=lik,
                                    joint=False)
    assert not use and "cpu" in why
    use, why = _step.graph_decision(False, device=cuda, optimizer="adam", estimator="closed-form", likelihood=lik,
                                    joint=False)
    assert not use and "cuda_graphs=False" in why
    numpy_lik = CallableLikelihood(lambda y, f: -(y[:, 0] - f[..., 0]) ** 2, backend="numpy")
    use, why = _step.graph_decision(True, device=cuda, optimizer="lbfgs", estimator="score", likelihood=numpy_lik,
                                    joint=False)
    assert not use and "L-BFGS" in why and "numpy" in why
    use, why = _step.graph_decision(None, device=cuda, optimizer="adam", estimator="quadrature", likelihood=lik,
                                    joint=True)
    assert "quadrature" in why and "joint" in why


def test_a_mean_head_sampling_kl_columns_on_the_host_is_not_captured(monkeypatch):
    """Sampled KL columns are drawn on the host: a graph would replay the capture's columns at every
    step (a biased KL), so fit runs that step eagerly and says why; exact KL heads capture."""
    monkeypatch.setattr(torch.cuda.CUDAGraph, "register_generator_state", lambda self, g: None, raising=False)
    X, f, g = _data(40)
    model = savigp.SAVIGP(X, f, Gaussian(0.1), num_inducing=6, mean_basis_size=20)
    decide = dict(device=torch.device("cuda"), optimizer="adam", estimator="closed-form", likelihood=Gaussian(0.1),
                  joint=False)
    assert _step.graph_decision(None, mean_head=model.mean_head, **decide) == (True, "")
    model.mean_head.kl_columns = 8
    use, why = _step.graph_decision(None, mean_head=model.mean_head, **decide)
    assert not use and "kl_columns=8" in why
    model.mean_head.kl_columns = 20  # all columns: the exact KL
    assert _step.graph_decision(None, mean_head=model.mean_head, **decide)[0]


def test_graph_decision_on_cuda_with_a_torch_likelihood(monkeypatch):
    monkeypatch.setattr(torch.cuda.CUDAGraph, "register_generator_state", lambda self, g: None, raising=False)
    use, why = _step.graph_decision(None, device=torch.device("cuda"), optimizer="adadelta", estimator="score",
                                    likelihood=Logistic(), joint=False)
    assert use and why == ""


def test_cuda_graphs_requested_on_the_cpu_fall_back_once(monkeypatch):
    monkeypatch.setattr(_step, "_said", set())
    X, f, g = _data(40)
    Y = f + 0.1 * torch.randn(f.shape, generator=g)
    model = savigp.SAVIGP(X, Y, Gaussian(0.1), num_inducing=5)
    with pytest.warns(RuntimeWarning, match="not captured in a CUDA graph: the model is on cpu"):
        h = savigp.fit(model, iterations=3, progress=False, cuda_graphs=True)
    assert not h.cuda_graph and h.steps == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        savigp.fit(model, iterations=2, progress=False, cuda_graphs=True)  # said once
        savigp.fit(model, iterations=2, progress=False)  # the default on the CPU: nothing to say


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("estimator, batch_size", [("score", 20), ("reparam", None)])
def test_captured_and_eager_steps_agree_on_cuda(estimator, batch_size):
    """The same seed: the captured step replays the eager step's draws, ELBOs and updates."""
    X, f, g = _data(80)
    Y = torch.where(f > 0, 1.0, -1.0)
    out = []
    for graphs in (False, True):
        model = savigp.SAVIGP(X, Y, Logistic(), num_inducing=8, device="cuda", posterior="full")
        h = savigp.fit(model, iterations=12, batch_size=batch_size, lr=0.01, num_samples=16, estimator=estimator,
                       progress=False, cuda_graphs=graphs, log_every=4, seed=5)
        assert h.cuda_graph == graphs
        out.append((torch.tensor(h.elbo), [p.detach().cpu() for p in model.parameters()]))
    assert torch.allclose(out[0][0], out[1][0], rtol=1e-9, atol=1e-9)
    for a, b in zip(out[0][1], out[1][1]):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def test_the_graph_plumbing_with_a_stand_in_for_the_capture(monkeypatch):
    """StepRunner.run without a GPU: streams and the capture replaced by stand-ins whose "replay" runs
    the step body eagerly on the static index buffer. Checks the warm-up count, that the capture
    happens once with the step's batch, that replays see each new batch through the buffer, that a
    recovery drops the graph and warms up again, and that the ELBO trace equals eager steps'."""
    captures, replayed = _capture_stand_ins(monkeypatch)

    traces = []
    for graphs in (False, True):
        _, runner = _logistic_runner(graphs)
        batches = [torch.randperm(80, generator=torch.Generator().manual_seed(i))[:20] for i in range(9)]
        trace = []
        for i, b in enumerate(batches):
            if i == 6 and graphs:
                runner.recover()  # as after a jitter growth: the graph is dropped
            runner.run(b)
            trace += [row[0] for row in runner.read()["rows"]]
        traces.append(trace)
        assert runner.captured == graphs
    assert [c.tolist() for c in captures] == [batches[3].tolist()]  # once, after 3 warm-up steps
    assert [r.tolist() for r in replayed] == [b.tolist() for b in batches[3:6]]  # then replays of each batch
    assert runner.warm == 3 and runner.graph is None  # after the recovery: warming up again
    assert traces[0] == traces[1]


def _logistic_runner(graphs: bool):
    """A StepRunner for a small logistic model (score estimator, window 1); returns (optimizer, runner)."""
    from savigp.training import make_adam

    X, f, g = _data()
    model = savigp.SAVIGP(X, torch.where(f > 0, 1.0, -1.0), Logistic(), num_inducing=6)
    opt = make_adam([p for p in model.parameters() if p.requires_grad], 0.02)
    return opt, _step.StepRunner(model, opt, num_samples=10, estimator="score",
                                 generator=torch.Generator().manual_seed(0), window=1, graphs=graphs)


def test_a_step_returns_its_terms_without_its_autograd_graph():
    """The terms a step returns (and fit's callback sees) hold no autograd graph: a warm-up step's
    graph kept alive into a CUDA graph capture would hold AccumulateGrad nodes of the warm-up's
    stream. The values are the step's: equal to the window's row the runner recorded."""
    _, runner = _logistic_runner(False)
    batch = torch.randperm(80, generator=torch.Generator().manual_seed(1))[:20]
    terms = runner.run(batch)
    assert terms.elbo.grad_fn is None and not terms.elbo.requires_grad
    row = runner.read()["rows"][0]
    assert float(terms.elbo) == pytest.approx(row[0], rel=1e-12)
    seen = []
    X, f, g = _data()
    model = savigp.SAVIGP(X, torch.where(f > 0, 1.0, -1.0), Logistic(), num_inducing=6)
    savigp.fit(model, iterations=3, batch_size=20, num_samples=10, progress=False,
               callback=lambda step, t: seen.append(t.elbo.grad_fn) and False)
    assert seen == [None, None, None]


def _capture_stand_ins(monkeypatch):
    """Streams and the capture replaced by stand-ins whose "replay" runs the step body eagerly on the
    static index buffer; returns the lists of captured and of replayed batches."""

    class _Stream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: _Stream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    captures, replayed = [], []

    class _StandIn:
        def __init__(self, runner, batch):
            self.runner, self.index, self.ready = runner, batch.clone(), True
            self.rates = _step._Rates(runner.opt, runner.model.device)
            captures.append(batch.clone())

        def replay(self, batch):
            self.index.copy_(batch)
            replayed.append(self.index.clone())
            self.runner.opt.zero_grad()
            return self.runner._body(self.index)

    def stand_in_capture(runner, batch):
        runner.graph = _StandIn(runner, batch)
        return runner.graph

    monkeypatch.setattr(_step, "capture", stand_in_capture)
    return captures, replayed


def test_a_learning_rate_the_graph_cannot_follow_makes_it_capture_again(monkeypatch):
    """float64 parameters: a captured step would keep the rate it was captured with, so a changed
    ``param_group["lr"]`` drops the graph (captured again after the warm-up); an unchanged one keeps
    it. The ELBO trace equals the eager steps' under the same schedule."""
    captures, _ = _capture_stand_ins(monkeypatch)

    traces = []
    for graphs in (False, True):
        opt, runner = _logistic_runner(graphs)
        trace = []
        for i in range(12):
            if i == 6:
                for group in opt.param_groups:
                    group["lr"] = 0.005
            runner.run(torch.randperm(80, generator=torch.Generator().manual_seed(i))[:20])
            trace += [row[0] for row in runner.read()["rows"]]
        traces.append(trace)
    assert len(captures) == 2  # at step 3, and again 3 warm-up steps after the change at step 6
    assert traces[0] == traces[1]


def test_rates_follow_into_device_tensors_for_float32_adam():
    """float32 fused Adam: the rate lives in a float32 tensor that follows the group's value (no
    recapture); during the capture the group holds the tensor, afterwards its own value again."""
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float32))
    opt = torch.optim.Adam([p], lr=0.1, fused=True)
    rates = _step._Rates(opt, p.device)
    assert rates.tensors is not None and float(rates.tensors[0]) == pytest.approx(0.1)
    with rates.capturing():
        assert opt.param_groups[0]["lr"] is rates.tensors[0]
    assert opt.param_groups[0]["lr"] == 0.1
    opt.param_groups[0]["lr"] = 0.025
    assert rates.follow() and float(rates.tensors[0]) == pytest.approx(0.025)
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))]})
    assert not rates.follow()  # the groups changed: capture again
    q = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    assert _step._Rates(torch.optim.Adam([q], lr=0.1, fused=True), q.device).tensors is None


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_schedule_set_in_a_callback_reaches_the_captured_step_on_cuda(dtype):
    """A learning rate changed by a callback between checks (as experiments/mnist.py's cosine
    schedule does) is what the captured step uses: captured and eager runs agree, and both differ
    from the run at the constant rate (so the schedule mattered)."""
    X, f, g = _data(80)
    Y = torch.where(f > 0, 1.0, -1.0)
    out = {}
    for graphs, schedule in ((False, True), (True, True), (True, False)):
        model = savigp.SAVIGP(X, Y, Logistic(), num_inducing=8, device="cuda", dtype=dtype, posterior="full")
        state = {}

        def callback(step, terms):
            if schedule:
                for group in state["optimizer"].param_groups:
                    group["lr"] = 0.05 * 0.5 ** ((step + 1) // 4)
            return False

        h = savigp.fit(model, iterations=16, batch_size=40, lr=0.05, num_samples=16, progress=False,
                       cuda_graphs=graphs, log_every=4, seed=5, callback=callback, state=state)
        assert h.cuda_graph == graphs
        out[graphs, schedule] = torch.cat([p.detach().flatten().double().cpu() for p in model.parameters()])
    tol = dict(rtol=1e-9, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    assert torch.allclose(out[True, True], out[False, True], **tol)
    assert not torch.allclose(out[True, False], out[False, True], **tol)


_CAPTURED_CASES = {  # name: (likelihood, targets rule, SAVIGP options, estimator)
    "gaussian-closed-form": (Gaussian, "real", dict(posterior="full"), "auto"),
    "bernoulli-diag-u-K1": (Logistic, "sign", dict(posterior="diag-u", num_components=1), "score"),
    "bernoulli-diag-u-K2": (Logistic, "sign", dict(posterior="diag-u", num_components=2), "score"),
    "bernoulli-diag-K2": (Logistic, "sign", dict(posterior="diag", num_components=2), "score"),
    "bernoulli-full-K2": (Logistic, "sign", dict(posterior="full", num_components=2), "reparam"),
    "gaussian-orthogonal-head": (Gaussian, "real", dict(posterior="full", mean_basis_size=40), "auto"),
}


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(_CAPTURED_CASES))
def test_every_family_captures_its_step_on_cuda(case, dtype):
    """Each family, estimator and the mean head capture their step (no host read, no host-to-device
    copy inside it) and then train as the eager steps do from the same seed."""
    lik, rule, options, estimator = _CAPTURED_CASES[case]
    X, f, g = _data(80)
    Y = f if rule == "real" else torch.where(f > 0, 1.0, -1.0)
    out = []
    for graphs in (False, True):
        model = savigp.SAVIGP(X, Y, lik(), num_inducing=8, device="cuda", dtype=dtype, seed=3, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a failed capture says so with a RuntimeWarning
            h = savigp.fit(model, iterations=10, batch_size=40, lr=0.01, num_samples=16, estimator=estimator,
                           progress=False, cuda_graphs=graphs, log_every=5, seed=5)
        assert h.cuda_graph == graphs, case
        out.append(torch.tensor(h.elbo))
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-3)
    assert torch.allclose(out[0], out[1], **tol), (case, out)


@pytest.mark.cuda
@requires_cuda
def test_after_a_failed_capture_training_goes_on_eagerly_on_cuda(monkeypatch):
    """A likelihood that reads a value back to the host cannot be captured: fit says so once and
    trains eagerly; the draws still work (a failed capture leaves the generator it registered
    unusable, so the runner keeps the original) and the result equals an eager run's."""

    class HostReading(Logistic):
        def _log_prob(self, y, f):
            if float(f.detach().abs().max()) > 1e6:  # a host read: not capturable
                raise AssertionError("unreachable")
            return super()._log_prob(y, f)

    monkeypatch.setattr(_step, "_said", set())  # (fit says a failure once per process)
    X, f, g = _data(80)
    Y = torch.where(f > 0, 1.0, -1.0)
    elbos = []
    for graphs in (False, None):
        model = savigp.SAVIGP(X, Y, HostReading(), num_inducing=8, device="cuda", seed=3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            h = savigp.fit(model, iterations=12, batch_size=40, lr=0.01, num_samples=16, estimator="score",
                           progress=False, cuda_graphs=graphs, log_every=4, seed=5)
        assert not h.cuda_graph and h.steps == 12
        if graphs is None:
            assert any("capture failed" in str(w.message) for w in caught)
        elbos.append(torch.tensor(h.elbo))
    assert torch.allclose(elbos[0], elbos[1], rtol=1e-9, atol=1e-9)
