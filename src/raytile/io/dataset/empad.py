"""``libertem.io.dataset.empad`` at its ported path: the format's data set classes (raytile.io.formats.empad)."""

from raytile.io.formats.empad import *  # noqa: F401,F403
from raytile.io.formats.empad import __all__  # noqa: F401
