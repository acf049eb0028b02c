"""The paper's experiment scripts, each run as ``python experiments/<name>.py ...`` (see
docs/experiments.md). Importing one as ``experiments.<name>`` (the tests, ``python -m
experiments.<name>``) first imports the shared runner, :mod:`experiments._common`, which makes the
scripts' own imports (``import _common``, ``import _flagship_io as io``) resolve as they do when a
script is run as a file."""
from . import _common  # noqa: F401
