"""``libertem.io.dataset.tvips`` at its ported path: the format's data set classes (raytile.io.formats.tvips)."""

from raytile.io.formats.tvips import *  # noqa: F401,F403
from raytile.io.formats.tvips import __all__  # noqa: F401
