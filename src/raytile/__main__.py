"""``python -m raytile``: the ``raytile`` command (:mod:`raytile.cli`)."""

import sys

from raytile.cli import main

sys.exit(main())
