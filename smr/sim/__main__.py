"""``python -m smr.sim``: the seed sweep (see :mod:`smr.sim.sweep`)."""

import sys

from smr.sim.sweep import main

sys.exit(main())
