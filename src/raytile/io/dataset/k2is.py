"""``libertem.io.dataset.k2is`` at its ported path: the format's data set classes (raytile.io.formats.k2is)."""

from raytile.io.formats.k2is import *  # noqa: F401,F403
from raytile.io.formats.k2is import __all__  # noqa: F401
