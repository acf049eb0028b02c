"""The docs list the same choices as the registries of :mod:`savigp._choices` (the command's
``choices=`` and the model-file schema read those): a kernel, posterior family, mean head or
estimator added to a registry must appear in the docs' tables, and a name removed must leave them."""
import re

import pytest

from conftest import ROOT
from savigp import _choices


def _option_row(doc: str, option: str) -> tuple:
    """The ``a|b|c`` of the row ``| `--option a|b|c` ...`` of the options table in docs/<doc>."""
    text = (ROOT / "docs" / doc).read_text()
    found = re.findall(rf"^\| `{re.escape(option)} ([a-z0-9\\|-]+)`", text, re.M)
    assert len(found) == 1, f"docs/{doc}: {len(found)} rows for {option}"
    return tuple(found[0].split("\\|"))


@pytest.mark.parametrize("option, names", [
    ("--kernel", _choices.KERNELS.names()),
    ("--posterior", _choices.POSTERIORS.names()),
    ("--mean-basis", _choices.MEAN_HEADS.names()),
    ("--entropy", _choices.ENTROPY_ESTIMATES),
    ("--inducing-init", _choices.INDUCING_INITS),
    ("--dtype", _choices.DTYPES),
])
def test_the_command_line_table_lists_each_registry(option, names):
    assert _option_row("cli.md", option) == tuple(names)


def test_the_estimator_row_lists_every_estimator():
    text = (ROOT / "docs" / "cli.md").read_text()
    row = re.search(r"^\| `--estimator` \| auto \| (.*) \|$", text, re.M)
    assert row and tuple(re.findall(r"`([a-z-]+)`", row.group(1))) == _choices.ESTIMATORS.names()


def _first_column(doc: str, header: str) -> tuple:
    """The quoted names of the first column of the table whose header starts with ``header``."""
    text = (ROOT / "docs" / doc).read_text()
    table = re.search(rf"^\| `{re.escape(header)}` \|.*\n\|[- |]+\|\n((?:\|.*\n)+)", text, re.M)
    assert table, f"docs/{doc}: no table headed `{header}`"
    return tuple(dict.fromkeys(re.findall(r'^\| `"([a-z-]+)"`', table.group(1), re.M)))


def test_the_family_and_mean_head_tables_list_each_registry():
    assert _first_column("mixtures.md", "posterior=") == _choices.POSTERIORS.names()
    assert set(_first_column("models.md", "mean_basis")) == set(_choices.MEAN_HEADS.names())
