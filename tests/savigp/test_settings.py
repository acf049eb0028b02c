"""The ``SAVIGP_*`` environment variables: read in :mod:`savigp.settings` only, each with its
default, and a value that does not parse is refused naming the variable and what was expected."""
import re

import pytest

from conftest import ROOT
from savigp import cost, settings
from savigp.training import distributed


def test_every_variable_the_sources_name_is_a_setting_and_only_settings_reads_the_environment():
    named, readers = set(), []
    for path in sorted((ROOT / "savigp").rglob("*.py")):
        text = path.read_text()
        named |= set(re.findall(r"\bSAVIGP_[A-Z_]+[A-Z]\b", text))
        if path.name != "settings.py" and re.search(r"(environ\.get|environ\[|getenv)\(?\s*[\"']SAVIGP_", text):
            readers.append(str(path.relative_to(ROOT)))
    assert named == set(settings.SETTINGS), named ^ set(settings.SETTINGS)
    assert readers == []
    doc = settings.__doc__
    assert all(f"``{name}``" in doc for name in settings.SETTINGS)  # the table documents each


def test_defaults_when_unset_or_empty(monkeypatch):
    for name in settings.SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert settings.max_model_bytes() == 8 * 2 ** 30 == cost.memory_limit()
    assert settings.compile_enabled() is False and settings.debug() is False
    assert settings.dist_timeout() == 300.0 == distributed.timeout_seconds()
    assert settings.grad_sync() == "allreduce"
    assert settings.train_lock_held() is None and settings.test_sigint_after() is None
    monkeypatch.setenv("SAVIGP_GRAD_SYNC", "  ")
    assert settings.grad_sync() == "allreduce"


def test_values_are_parsed_where_they_are_used(monkeypatch):
    monkeypatch.setenv("SAVIGP_MAX_MODEL_BYTES", "2e9")
    assert cost.memory_limit() == 2_000_000_000 and cost.memory_limit(5) == 5  # an explicit limit wins
    monkeypatch.setenv("SAVIGP_DIST_TIMEOUT", "12.5")
    assert distributed.timeout_seconds() == 12.5
    monkeypatch.setenv("SAVIGP_GRAD_SYNC", "ddp")
    assert settings.grad_sync() == "ddp"
    monkeypatch.setenv("SAVIGP_COMPILE", "1")
    monkeypatch.setenv("SAVIGP_DEBUG", "0")
    assert settings.compile_enabled() is True and settings.debug() is False
    monkeypatch.setenv("SAVIGP_CLI_TEST_SIGINT_AFTER", "25")
    assert settings.test_sigint_after() == 25


@pytest.mark.parametrize("name, value, expected", [
    ("SAVIGP_MAX_MODEL_BYTES", "8GB", "a positive number of bytes"),
    ("SAVIGP_MAX_MODEL_BYTES", "-1", "a positive number of bytes"),
    ("SAVIGP_DIST_TIMEOUT", "0", "a positive number of seconds"),
    ("SAVIGP_GRAD_SYNC", "nccl", "one of allreduce, ddp"),
    ("SAVIGP_COMPILE", "maybe", "1 or 0"),
    ("SAVIGP_CLI_TEST_SIGINT_AFTER", "x", "a number of steps"),
])
def test_a_bad_value_names_the_variable_and_what_was_expected(monkeypatch, name, value, expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(settings.SettingError, match=re.escape(f"{name}={value!r}: expected {expected}")):
        settings.get(name)
    if name == "SAVIGP_MAX_MODEL_BYTES":  # also through the function that uses it
        with pytest.raises(ValueError, match=name):
            cost.memory_limit()
