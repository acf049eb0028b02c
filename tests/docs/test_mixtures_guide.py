"""The guide docs/mixtures.md runs: its python blocks are executed in order in one namespace, and
what its text says of their results holds: on a dense model the diagonal family's own ELBO prefers
the jointly learned fit that predicts worse, and the two-stage fit (the full Gaussian's
hyper-parameters, then q(u) only) predicts as the full Gaussian does."""
from __future__ import annotations

import torch

from conftest import run_guide


def test_mixtures_guide_runs_and_its_claims_hold(capsys):
    ns = run_guide("mixtures.md", min_blocks=2)
    out = capsys.readouterr().out
    assert "mog1, joint" in out and "mog2 at fg's hyper-parameters" in out
    fg, joint, onward, two = (ns[k] for k in ("r_fg", "r_joint", "r_onward", "r_two"))
    # the family's ELBO ranks the joint fit first although it predicts worse
    assert joint["elbo"] > onward["elbo"] + 50.0
    assert joint["sse"] > 2.0 * fg["sse"] and joint["nlpd"] > onward["nlpd"] > fg["nlpd"]
    # the two-stage fit keeps fg's kernel and noise and predicts as fg does
    for name in ("kernel", "likelihood"):
        ours, theirs = getattr(ns["two_stage"], name).state_dict(), getattr(ns["fg"], name).state_dict()
        assert all(torch.equal(ours[k], theirs[k]) for k in theirs), name
    assert abs(two["sse"] - fg["sse"]) < 0.005 and two["nlpd"] < onward["nlpd"]
