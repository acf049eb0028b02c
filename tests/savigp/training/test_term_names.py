"""The ELBO's terms are named once, by the fields of :class:`savigp.ELBOTerms`: the training step's
on-device row, its finiteness check and the loop's error read their names and order from it (the
step sliced its row by position, ``vals[:5]``, and the per-step check listed its own names)."""
import dataclasses
import math
import pathlib
import re

import torch

import savigp
from savigp.model import ELBOTerms
from savigp.training import loop, step

ROOT = pathlib.Path(savigp.__file__).parent


def test_no_module_but_the_model_spells_out_the_terms():
    spelled = re.compile(r"\(\s*\"ell\",\s*\"entropy\"|\"cross_entropy\",\s*\"mean_head_kl\"|vals\[:\d\]|!= \"ell_stderr\"")
    found = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if p.name != "model.py"
             and spelled.search(p.read_text())]
    assert found == []


def test_the_fields_name_the_terms_and_the_checked_ones():
    assert ELBOTerms.NAMES == tuple(f.name for f in dataclasses.fields(ELBOTerms))
    assert ELBOTerms.CHECKED == tuple(n for n in ELBOTerms.NAMES if n != "ell_stderr")
    assert step.StepRunner.TERMS == ELBOTerms.NAMES


def test_an_infinite_standard_error_is_no_bad_step_and_a_nan_term_is():
    bad = loop.BadStep(3, {n: 0.0 for n in ELBOTerms.NAMES}, [True])
    bad.terms.update(ell_stderr=math.inf, mean_head_kl=math.nan)

    class _Model:
        likelihood = None

        def named_parameters(self):
            return [("w", torch.zeros(1))]

    err = loop.diverged_error(_Model(), bad)
    assert err.where == ("mean_head_kl",)
