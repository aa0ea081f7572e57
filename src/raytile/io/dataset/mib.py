"""``libertem.io.dataset.mib`` at its ported path: the format's data set classes (raytile.io.formats.mib)."""

from raytile.io.formats.mib import *  # noqa: F401,F403
from raytile.io.formats.mib import __all__  # noqa: F401
