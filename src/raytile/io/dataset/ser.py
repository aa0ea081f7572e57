"""``libertem.io.dataset.ser`` at its ported path: the format's data set classes (raytile.io.formats.ser)."""

from raytile.io.formats.ser import *  # noqa: F401,F403
from raytile.io.formats.ser import __all__  # noqa: F401
