"""``libertem.io.dataset.frms6`` at its ported path: the format's data set classes (raytile.io.formats.frms6)."""

from raytile.io.formats.frms6 import *  # noqa: F401,F403
from raytile.io.formats.frms6 import __all__  # noqa: F401
