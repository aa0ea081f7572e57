"""``libertem.io.dataset.mrc`` at its ported path: the format's data set classes (raytile.io.formats.mrc)."""

from raytile.io.formats.mrc import *  # noqa: F401,F403
from raytile.io.formats.mrc import __all__  # noqa: F401
