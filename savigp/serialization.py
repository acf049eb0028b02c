"""Model files (kept for the names callers import from here): see :mod:`savigp.model_files`."""
from .model_files import *  # noqa: F401,F403
from .model_files import __all__  # noqa: F401
