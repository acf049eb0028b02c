"""``python -m savigp.cli ...``: the ``savigp`` command line."""
import sys

from . import main

sys.exit(main())
