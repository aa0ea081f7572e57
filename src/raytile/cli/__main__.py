"""``python -m raytile.cli``: the ``raytile`` command."""

import sys

from raytile.cli import main

sys.exit(main())
