"""``CorrectionSet`` at the path of ``libertem.corrections.corrset``: raytile's I/O corrections.

The same class as :class:`raytile.io.corrections.CorrectionSet` (dark frame,
gain map and excluded pixels, applied to every tile right after it is read;
LiberTEM's constructor and getters).
"""

from raytile.io.corrections import CorrectionSet

__all__ = ["CorrectionSet"]
