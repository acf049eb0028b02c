"""Data-parallel training on torch.distributed (savigp/training/distributed.py): 2 CPU processes on gloo,
started by the tests on the loopback interface.

* one step: the global ELBO, its terms and the summed gradients of a 2-rank step equal those of a
  1-process step on the union batch, to 1e-10 relative (float64; the same Monte Carlo draws per
  data point in both, so reparameterization and score estimators are compared exactly; a numpy
  black-box likelihood; both gradient synchronizations, the bucketed all-reduce and DDP; a
  composite kernel);
* 50 steps of ``fit`` on 2 ranks end at the parameters of 1 process with the same global batches
  and seed (closed-form ELBO, so no draws differ), within 1e-9 relative; the ranks' parameters are
  bitwise identical;
* a killed rank: the survivor stops with a clear message, the checkpoint rank 0 wrote is intact
  and one process resumes it to completion (a different number of ranks).
"""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import savigp
from likelihoods import CallableLikelihood, Gaussian
from savigp.estimators import sampling as ell_sampling
from savigp.training.distributed import DataParallel, free_loopback_port
from savigp.model import ELBOTerms
from savigp.model_files import load_model

from conftest import ROOT  # noqa: E402  (the repository root)
REPO = str(ROOT)
ENV = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "SAVIGP_CLI_TEST_SIGINT_AFTER"):
    ENV.pop(key, None)


def _data(N=64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 2))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:] + 0.3 * rng.standard_normal((N, 1))
    return X, Y


def _numpy_laplace(y, f):  # a numpy black box, (B, 1), (..., B, 1) -> (..., B)
    return -np.log(2 * 0.5) - np.abs(y[:, 0] - f[..., 0]) / 0.5


#: a composite kernel (a product, active_dims, the isotropic RBF with its distance cache, White)
COMPOSITE = "rbf + periodic(0, period=2) * rbf(ard=false) + white(variance=0.1)"


def _model(num_components=1, N=64, perturb=False, numpy_likelihood=False, kernel=None):
    X, Y = _data(N)
    torch.manual_seed(0)
    lik = CallableLikelihood(_numpy_laplace, backend="numpy") if numpy_likelihood else Gaussian(variance=0.5)
    model = savigp.SAVIGP(X, Y, lik, kernel, num_inducing=8, num_components=num_components)
    if perturb:  # away from q(u) = p(u), where some gradients (inducing inputs) vanish
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.posterior.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _fixed_draws(model, S, K, Q):
    """Patch the Monte Carlo draws so that data point n always gets E[:, :, n] (any batch, any rank)."""
    E = torch.randn(S, K, model.num_data, Q, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    current = {}
    original_elbo = model.elbo

    def elbo(batch=None, **kw):
        current["idx"] = torch.arange(model.num_data) if batch is None else batch
        return original_elbo(batch, **kw)

    def sample_eps(shape, like, generator):
        assert tuple(shape) == (S, K, len(current["idx"]), Q), shape
        return E[:, :, current["idx"]].to(like)

    model.elbo = elbo
    ell_sampling.standard_normal = sample_eps


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def _worker(rank, world, port, out, task):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        task(rank, world, out)
    finally:
        gc.collect()  # the tests' DataParallel objects sit in cycles (patched model.elbo): free them first
        dist.destroy_process_group()


def _step_errors(rank, world):
    """Relative differences between a 2-rank step and a 1-process step on the union batch."""
    batch = torch.randperm(64, generator=torch.Generator().manual_seed(3))[:11]  # 11: unequal shards (6 + 5)
    errors = {}
    for K, estimator, b, variant in ((1, "reparam", batch, ""), (1, "score", batch, ""), (2, "score", batch, ""),
                                     (1, "closed-form", batch, ""), (1, "reparam", None, ""),
                                     (1, "score", batch, "numpy"), (2, "reparam", batch, "ddp"),
                                     (2, "reparam", batch, "composite")):
        model = _model(num_components=K, perturb=True, numpy_likelihood=variant == "numpy",
                       kernel=COMPOSITE if variant == "composite" else None)
        _fixed_draws(model, 20, K, 1)
        params = list(model.parameters())
        os.environ["SAVIGP_GRAD_SYNC"] = "ddp" if variant == "ddp" else "allreduce"
        ddp = DataParallel(model, params, seed=0, check={"N": 64})
        os.environ.pop("SAVIGP_GRAD_SYNC")
        terms = ddp.elbo_and_grad(b, num_samples=20, estimator=estimator, generator=ddp.draws(0), step=0)
        ddp.close()
        grads = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        ref = model.elbo(b, num_samples=20, estimator=estimator)  # one process, the union batch
        (-ref.elbo).backward()
        what = f"K={K} {estimator} batch={'all' if b is None else len(b)} {variant}"
        errors[what + " elbo"] = _relative_error(terms.elbo, ref.elbo.detach())
        errors[what + " ell"] = abs(terms.ell - ref.ell) / abs(ref.ell)
        errors[what + " ell_stderr"] = abs(terms.ell_stderr - ref.ell_stderr) / max(ref.ell_stderr, 1e-300)
        for (name, _), g, p in zip(model.named_parameters(), grads, params):
            if p.grad.abs().max() > 0:
                errors[f"{what} grad {name}"] = _relative_error(g, p.grad)
    return errors


def _fit_parameters(world):
    model = _model()
    savigp.fit(model, iterations=50, batch_size=16, lr=0.05, estimator="closed-form", seed=5, progress=False)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    return {n: p.detach() for n, p in model.named_parameters()}, all(torch.equal(g, gathered[0]) for g in gathered)


def _schedule_fit(world):
    """A mixture's whole schedule on the ranks: 4 exploring starts, the reflection move, fit's own
    phase and the annealing (200 steps, start_fraction 0.4), each start and branch scored by the
    full-data ELBO summed over the ranks."""
    model = _model(num_components=2)
    h = savigp.fit(model, iterations=200, batch_size=16, lr=0.05, estimator="closed-form", seed=5, progress=False,
                   start_fraction=0.4)
    record = (h.starts.starts, h.starts.kept, h.starts.elbo, h.starts.reflection) if h.starts is not None else None
    return {n: p.detach() for n, p in model.named_parameters()}, record, h.final_elbo


def _disagreement(rank):
    """Rank 1 holds different targets: every rank must refuse to train, naming what differs."""
    model = _model()
    if rank == 1:
        model.train_y.add_(1.0)
    try:
        DataParallel(model, list(model.parameters()), seed=0, check={"N": 64})
    except ValueError as err:
        return str(err)
    return None


def _ddp_left_after_close():
    """DistributedDataParallel wrappers still in memory after ``close`` (gc off: only close may free them)."""
    from torch.nn.parallel import DistributedDataParallel

    model = _model()
    os.environ["SAVIGP_GRAD_SYNC"] = "ddp"
    try:
        gc.disable()
        ddp = DataParallel(model, list(model.parameters()), seed=0, check={"N": 64})
        ddp.elbo_and_grad(None, num_samples=4, estimator="reparam", generator=ddp.draws(0), step=0)
        ddp.close()
        del ddp
        return sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
    finally:
        gc.enable()
        os.environ.pop("SAVIGP_GRAD_SYNC")


def _task(rank, world, out):
    left = _ddp_left_after_close()  # (first: _step_errors patches the Monte Carlo draws)
    errors = _step_errors(rank, world)
    params, identical = _fit_parameters(world)
    schedule = _schedule_fit(world)
    refused = _disagreement(rank)
    if rank == 0:
        torch.save({"errors": errors, "params": params, "identical": identical, "refused": refused,
                    "ddp_left": left, "schedule": schedule}, out)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Both in-process checks on 2 spawned ranks at once (every process pays the torch import)."""
    out = str(tmp_path_factory.mktemp("ddp") / "result.pt")
    try:
        mp.spawn(_worker, args=(2, free_loopback_port(), out, _task), nprocs=2, join=True)
    except mp.ProcessExitedException as err:  # killed by a signal, not a Python error: once more, said aloud
        if not err.signal_name:
            raise
        import warnings

        warnings.warn(f"a gloo rank died with {err.signal_name}; the 2-rank run was repeated once")
        mp.spawn(_worker, args=(2, free_loopback_port(), out, _task), nprocs=2, join=True)
    return torch.load(out)


def test_two_rank_step_equals_one_process_step_on_the_union_batch(two_ranks):
    errors = two_ranks["errors"]
    assert len(errors) >= 7 * 8, sorted(errors)
    assert any("numpy" in k for k in errors) and any("ddp" in k for k in errors)
    assert any("composite grad kernel.parts.1.parts.0" in k for k in errors), sorted(errors)  # the periodic part
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-10, (worst, errors[worst])


def test_close_frees_the_ddp_reducer_before_the_group_is_destroyed(two_ranks):
    """Left to the garbage collector, the reducer can outlive the group and gloo aborts the process."""
    assert two_ranks["ddp_left"] == 0, two_ranks["ddp_left"]


def test_ranks_with_different_data_refuse_to_train(two_ranks):
    assert two_ranks["refused"] is not None and "training data" in two_ranks["refused"], two_ranks["refused"]


def _split_order_elbo(model):
    """One process summing the two ranks' shares in the 2-rank order: the same arithmetic as 2 ranks."""
    original = model.elbo

    def elbo(batch=None, **kw):
        parts = torch.tensor_split(batch, 2)
        share = [original(p, **kw) for p in parts]
        total = sum(len(p) / len(batch) * t.elbo for p, t in zip(parts, share))
        return ELBOTerms(total, 0.0, share[0].entropy, share[0].cross_entropy, share[0].mean_head_kl, 0.0)

    model.elbo = elbo
    return model


def test_fifty_steps_on_two_ranks_end_at_the_one_process_parameters(two_ranks):
    """Tolerances: the 2-rank run sums each global batch's ELBO in two parts, one process in one; that
    rounding difference (~1e-16) grows over 50 Adam steps to 3e-9 (measured; the same as between two
    one-process runs summing in the two orders), hence 1e-7 against the union batch and 1e-12 against a
    one-process run that sums in the 2-rank order."""
    assert two_ranks["identical"], "the ranks' parameters differ"
    two = two_ranks["params"]
    start = dict(_model().named_parameters())
    for model, tol in ((_model(), 1e-7), (_split_order_elbo(_model()), 1e-12)):
        savigp.fit(model, iterations=50, batch_size=16, lr=0.05, estimator="closed-form", seed=5, progress=False)
        for name, p in model.named_parameters():
            p = p.detach()
            if name == "posterior.logits":  # K = 1: no gradient
                continue
            assert float((p - start[name].detach()).abs().max()) > 1e-3, name  # training moved it
            err = float((two[name] - p).abs().max())
            assert err <= tol * max(1.0, float(p.abs().max())), (name, err, tol)


def test_two_ranks_take_the_schedule_of_one_process(two_ranks):
    """Before the schedule was one path, a run under torch.distributed explored no starts, tried no
    reflection move and did not anneal: it was another run than one process's. Now the same phases,
    the same decisions (the starts' and branches' ELBOs within 1e-9) and the same parameters (within
    1e-9: the rounding of the 2-rank sums, as above, against a one-process run summing in their order)."""
    params, record, final = two_ranks["schedule"]
    model = _split_order_elbo(_model(num_components=2))
    h = savigp.fit(model, iterations=200, batch_size=16, lr=0.05, estimator="closed-form", seed=5, progress=False,
                   start_fraction=0.4)
    assert record is not None, "no exploration on 2 ranks"
    starts, kept, elbo, reflection = record
    assert starts == 4 and reflection is not None
    assert (kept, reflection["accepted"]) == (h.starts.kept, h.starts.reflection["accepted"])
    assert elbo == pytest.approx(h.starts.elbo, rel=1e-9) and final == pytest.approx(h.final_elbo, rel=1e-9)
    for name, p in model.named_parameters():
        err = float((params[name] - p.detach()).abs().max())
        assert err <= 1e-9 * max(1.0, float(p.detach().abs().max())), (name, err)


def test_killed_rank_stops_the_other_and_leaves_a_resumable_checkpoint(tmp_path):
    X, Y = _data(200)
    data = tmp_path / "train.csv"
    np.savetxt(data, np.hstack([X, Y]), delimiter=",", header="x1,x2,y", comments="")
    out = tmp_path / "model.pt"
    ckpt = str(out) + ".ckpt"
    args = [sys.executable, "-m", "savigp", "train", str(data), "--targets", "y", "--out", str(out),
            "--num-inducing", "10", "--batch-size", "20", "--iterations", "100000", "--checkpoint-every", "20",
            "--quiet", "--estimator", "reparam", "--samples", "10"]
    port = free_loopback_port()
    procs = [subprocess.Popen(args, env={**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
                                         "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "SAVIGP_DIST_TIMEOUT": "30"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        deadline = time.time() + 120
        while not os.path.exists(ckpt) and time.time() < deadline and procs[0].poll() is None:
            time.sleep(0.2)
        assert os.path.exists(ckpt), procs[0].communicate()[1] if procs[0].poll() is not None else "no checkpoint"
        time.sleep(0.5)
        procs[1].send_signal(signal.SIGKILL)
        t0 = time.time()
        _, err = procs[0].communicate(timeout=60)
        stopped_after = time.time() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[0].returncode == 1, (procs[0].returncode, err)
    assert "another rank stopped" in err and "--resume" in err, err
    print(f"survivor stopped {stopped_after:.2f} s after the kill: {err.strip()}")
    saved, state = load_model(ckpt)
    step = int(saved.config["step"])
    assert step % 20 == 0 and step > 0 and state is not None
    done = subprocess.run(args[:args.index("100000")] + [str(step + 10)] + args[args.index("100000") + 1:] +
                          ["--resume"], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    final, _ = load_model(str(out))
    assert final.config["step"] == step + 10 and final.config["complete"] and not os.path.exists(ckpt)
