"""2x2 transformation matrices for ``(y, x)`` vectors, at the path of ``libertem.corrections.coordinates``.

Defined in :mod:`raytile.common.coordinates` (the shared vocabulary, which the UDF layer's
:mod:`raytile.udf.com` uses); this module keeps LiberTEM's path.

>>> (flip_y() @ (2, 3)).tolist()
[-2, 3]
"""

from __future__ import annotations

from raytile.common.coordinates import flip_x, flip_y, identity, rotate, rotate_deg, scale, scale_rotate_flip_y

__all__ = ["scale", "rotate", "rotate_deg", "flip_y", "flip_x", "identity", "scale_rotate_flip_y"]
