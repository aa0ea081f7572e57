"""``libertem.io.dataset.blo`` at its ported path: the format's data set classes (raytile.io.formats.blo)."""

from raytile.io.formats.blo import *  # noqa: F401,F403
from raytile.io.formats.blo import __all__  # noqa: F401
