"""The parameter groups that :func:`savigp.fit` trains (``groups=``, the command's ``--learn``;
their names: :data:`savigp._choices.PARAMETER_GROUPS`)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from .._choices import PARAMETER_GROUPS
from ..model import SAVIGP


def parameter_groups(model: SAVIGP, groups: Optional[Sequence[str]] = None) -> list:
    """The trainable parameters of the named groups (all groups by default)."""
    groups = PARAMETER_GROUPS if groups is None else tuple(groups)
    unknown = set(groups) - set(PARAMETER_GROUPS)
    if unknown:
        raise ValueError(f"unknown parameter group(s) {sorted(unknown)}; choose from {PARAMETER_GROUPS}")
    modules = {"posterior": [model.posterior], "kernel": [model.kernel], "likelihood": [model.likelihood],
               "mean_head": [model.head]}  # (the zero head has no parameters)
    params = []
    for g in groups:
        if g == "inducing":
            params += [model.inducing] if isinstance(model.inducing, torch.nn.Parameter) else []
        elif g == "prior_mean":
            params += [model.prior_mean] if isinstance(model.prior_mean, torch.nn.Parameter) else []
        else:
            for m in modules[g]:
                params += [p for p in m.parameters() if p.requires_grad]
    return params
