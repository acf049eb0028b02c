"""``python -m savigp ...``: the ``savigp`` command line (so that ``torchrun -m savigp train ...`` works)."""
import sys

from .cli import main

sys.exit(main())
