"""Every upgrade of a model file written by an earlier savigp, in one place and in order.

A model file's ``config["version"]`` says which format wrote it (:data:`VERSION` is the one this
savigp writes, :data:`READABLE_VERSIONS` those it reads). Two kinds of change are upgraded here:

* **format steps** (:data:`CONFIG_STEPS`), one function per version: ``CONFIG_STEPS[v]`` turns a
  version-``v`` configuration into a version-``v + 1`` one, in place; :func:`upgrade_config`
  runs them in order from the file's version up to :data:`VERSION`;
* **layout steps** that came without a version (a field or a state-dict entry added later): each
  recognizes a file written before it by what the file lacks, and gives it the meaning such files
  had. :data:`CONFIG_DEFAULTS` fills configuration fields; :data:`STATE_STEPS` fill or mark
  state-dict entries before the rebuilt model loads them; :data:`MODEL_STEPS` rewrite parameters
  that can only be converted with the loaded model (its kernel and inducing inputs).

The model itself (:mod:`savigp.model`) knows nothing of files or their history: the reader
(:func:`~savigp.model_files.file_format.read_model_file`) calls :func:`upgrade_config`, the builder
(:func:`~savigp.model_files.builder.rebuild_model`) calls :func:`upgrade_state` before
``load_state_dict`` and :func:`upgrade_model` after it. A new format step is one function here
and its entry; a test loads a file of every earlier layout (``tests/savigp/model_files/test_model_file_migrations.py``).
"""
from __future__ import annotations

from typing import Callable

import torch
from likelihoods.parameters import inverse_softplus

#: the format version this savigp writes
VERSION = 5


# ---------------------------------------------------------------------- format steps (config)
#: the names of the whitened diagonal mixture in version-1 files
V1_DIAGONAL_NAMES = ("diag", "diagonal", "mog")


def _posterior_records(config: dict) -> list:
    """The dicts of ``config`` whose ``"posterior"`` names the family: ``model``, ``model_options``
    and the command's recorded options (``training.options``, which ``--resume`` compares)."""
    training = config.get("training")
    parts = [config.get("model"), config.get("model_options"),
             training.get("options") if isinstance(training, dict) else None]
    return [part for part in parts if isinstance(part, dict)]


def v1_to_v2(config: dict) -> None:
    """Version 1 -> 2: ``posterior="diag"`` became the paper's diagonal mixture over u
    (:class:`~savigp.posteriors.UDiagonalMixture`, Bonilla et al. 2019, eq. (22)-(23) with a
    diagonal S_k); version-1 files meant the whitened one (also named ``"diagonal"``, ``"mog"``),
    in version 2 ``"diag-whitened"`` (and in version 4 ``"diag"`` again, :func:`v3_to_v4`). The
    parameters have the same names and shapes, so loading them as the other family would silently
    give another model."""
    for part in _posterior_records(config):
        if part.get("posterior") in V1_DIAGONAL_NAMES:
            part["posterior"] = "diag-whitened"


def v2_to_v3(config: dict) -> None:
    """Version 2 -> 3: a user likelihood's file is recorded with its SHA-256 (``"sha256"``) and
    never imported unless the caller says so. A version-2 file has no hash: it reads unchanged
    (its user code is imported only with ``trust_code=True`` or an explicit ``likelihood=``)."""


#: version 3 -> 4: the new name of each diagonal family's version-3 name
V3_RENAMED = {"diag": "diag-u", "mog": "diag-u", "diag-whitened": "diag", "diagonal": "diag"}


def v3_to_v4(config: dict) -> None:
    """Version 3 -> 4: ``posterior="diag"`` became the diagonal family in whitened coordinates
    (:class:`~savigp.posteriors.DiagonalMixture`, the convention of GPflow's ``q_diag`` and
    GPyTorch's mean-field distribution, whose intervals match the full Gaussian's), and the
    paper's diagonal mixture over u (:class:`~savigp.posteriors.UDiagonalMixture`) is
    ``"diag-u"``. A version-2/3 ``"diag"`` (or its alias ``"mog"``) is the mixture over u, now
    ``"diag-u"``; ``"diag-whitened"`` (or ``"diagonal"``) the whitened one, now ``"diag"``. The
    parameters of the two have the same names and shapes, so the old name read as the new one would
    silently give another model. A version-1 ``"diag"`` (whitened) is ``"diag-whitened"`` after
    :func:`v1_to_v2`, so ``"diag"`` here: whitened, as it was written."""
    for part in _posterior_records(config):
        name = part.get("posterior")
        if isinstance(name, str) and name in V3_RENAMED:
            part["posterior"] = V3_RENAMED[name]


def v4_to_v5(config: dict) -> None:
    """Version 4 -> 5: the kernel is recorded as its spec (:mod:`savigp.kernels.spec`, data: sums,
    products, scales, lists and each leaf's family with the options that fix its shapes, e.g.
    ``active_dims``), so that composite kernels, kernels on some of the inputs and
    :class:`~savigp.kernels.KernelList` are saved (:mod:`savigp.model_files.kernel_record`). A
    version-4 file named one registered family (``model_options.kernel``, absent: ``"rbf"``) and,
    when it had one, its ``kernel_ard`` (absent: the family's default, ARD): here the spec of that
    one leaf, ``{"kernel": name}`` with ``"ard"`` when recorded. Values of other types are left for
    the schema to refuse."""
    options = config.get("model_options")
    if not isinstance(options, dict):
        return
    name, ard = options.get("kernel"), options.get("kernel_ard")
    if name is None and ard is None:  # the default kernel, as in version 5
        return
    name = "rbf" if name is None else name
    if isinstance(name, str) and (ard is None or isinstance(ard, bool)):
        options.pop("kernel_ard", None)
        options["kernel"] = {"kernel": name, **({} if ard is None else {"ard": ard})}


#: ``CONFIG_STEPS[v]``: the step from version v to v + 1 (every version below :data:`VERSION`)
CONFIG_STEPS: dict[int, Callable[[dict], None]] = {1: v1_to_v2, 2: v2_to_v3, 3: v3_to_v4, 4: v4_to_v5}
#: the versions this savigp reads
READABLE_VERSIONS = tuple(sorted(CONFIG_STEPS)) + (VERSION,)


# ---------------------------------------------------------------------- layout steps without a version
def entropy_before_it_was_recorded(config: dict) -> None:
    """``config.model.entropy`` (the entropy estimate of a mixture, K > 1) was added with the
    pairwise bound; every file before it used the bound of Bonilla et al. 2019, eq. (18):
    ``"bound"``."""
    model = config.get("model")
    if isinstance(model, dict) and model.get("entropy") is None:
        model["entropy"] = "bound"


#: configuration fields added after files were written, in order
CONFIG_DEFAULTS: tuple[Callable[[dict], None], ...] = (entropy_before_it_was_recorded,)


def u_diagonal_former_coordinates(model, state: dict) -> None:
    """A diagonal mixture over u (``posterior="diag-u"``, ``"diag"`` in those files) written before its ``parametrization``
    buffer held the u-space mean m and softplus^-1(s) directly; the family now stores
    whitened, prior-conditioned coordinates (w, d) (:class:`~savigp.posteriors.UDiagonalMixture`).
    Such a state is marked ``parametrization = 0`` here and converted by
    :func:`u_diagonal_to_whitened` once the kernel and inducing inputs are loaded."""
    post = getattr(model, "posterior", None)
    if (post is not None and post.PARAMETRIZATION is not None and "posterior.raw_scale" in state
            and "posterior.parametrization" not in state):
        state["posterior.parametrization"] = torch.tensor(0)


def warped_slope_bound(model, state: dict) -> None:
    """:class:`likelihoods.WarpedGaussian` gained the ``slope_bound`` buffer (``max_slope``); a file
    written before it had no bound, which the rebuilt likelihood's own value keeps (inf unless
    the file's arguments give one)."""
    lik = getattr(model, "likelihood", None)
    bound = getattr(lik, "slope_bound", None)
    if isinstance(bound, torch.Tensor) and "likelihood.slope_bound" not in state:
        state["likelihood.slope_bound"] = bound.detach().clone()


#: state-dict steps, run in order on the file's state dict before the rebuilt model loads it
STATE_STEPS: tuple[Callable[[object, dict], None], ...] = (u_diagonal_former_coordinates, warped_slope_bound)


@torch.no_grad()
def u_diagonal_to_whitened(model) -> bool:
    """The conversion :func:`u_diagonal_former_coordinates` announced: the loaded parameters are
    m (``mean``) and softplus^-1(s) (``raw_scale``); rewrite them as w = L_zz^-1 m and d = s / c for
    the loaded prior factor L_zz (c: the prior-conditional standard deviations of
    :meth:`~savigp.posteriors.UDiagonalMixture.u_parameters`). The same q(u). Returns whether it
    converted."""
    post = model.posterior
    target = post.PARAMETRIZATION
    if target is None or int(post.parametrization) == target:
        return False
    Lzz = model.prior_factor()
    sd = post.scale()  # the file's s
    w = torch.linalg.solve_triangular(Lzz, post.mean.unsqueeze(-1), upper=False).squeeze(-1)
    d = sd * torch.exp(-post.u_parameters(Lzz=Lzz).log_cond_sd)  # s / c
    post.mean.copy_(w)
    post.raw_scale.copy_(inverse_softplus(d.clamp_min(1e-12)))
    post.parametrization.fill_(target)
    return True


#: steps on the rebuilt model after its state is loaded, in order
MODEL_STEPS: tuple[Callable[[object], bool], ...] = (u_diagonal_to_whitened,)


# ---------------------------------------------------------------------- entry points
def upgrade_config(config: dict) -> dict:
    """``config`` (of a readable version, see :data:`READABLE_VERSIONS`) in this version's terms,
    in place: the format steps from its version on, then :data:`CONFIG_DEFAULTS`. Returns it."""
    version = config["version"]
    while version < VERSION:
        CONFIG_STEPS[version](config)
        version += 1
    config["version"] = version
    for step in CONFIG_DEFAULTS:
        step(config)
    return config


def upgrade_state(model, state: dict) -> dict:
    """A copy of a file's ``state`` dict that ``model`` (rebuilt from the file's configuration)
    loads with ``strict=True``: :data:`STATE_STEPS` in order."""
    state = dict(state)
    for step in STATE_STEPS:
        step(model, state)
    return state


def upgrade_model(model) -> None:
    """:data:`MODEL_STEPS` on a model that has just loaded an upgraded state (:func:`upgrade_state`)."""
    for step in MODEL_STEPS:
        step(model)
