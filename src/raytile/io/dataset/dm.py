"""``libertem.io.dataset.dm`` at its ported path: the format's data set classes (raytile.io.formats.dm)."""

from raytile.io.formats.dm import *  # noqa: F401,F403
from raytile.io.formats.dm import __all__  # noqa: F401
