"""``libertem.io.dataset.seq`` at its ported path: the format's data set classes (raytile.io.formats.seq)."""

from raytile.io.formats.seq import *  # noqa: F401,F403
from raytile.io.formats.seq import __all__  # noqa: F401
