"""ROIs from JSON: a nav-shaped bitmap (base64 of ``np.packbits``) or a list of rectangles.

``{"bitmap": "<base64>"}``: the bits of the nav positions in C order,
packed 8 to a byte, most significant bit first (``np.packbits(roi.ravel())``).
``{"rects": [[y0, x0, y1, x1], ...]}``: half-open boxes, as many numbers as
twice the nav dimensions (starts, then stops). The encoded ROI may be at most
``max_bytes`` long (413 beyond).

>>> roi = decode_roi({"rects": [[0, 0, 2, 3]]}, nav_shape=(4, 4), max_bytes=1 << 20)
>>> int(roi.sum())
6
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

import numpy as np

from raytile.serve.errors import BadRequest, PayloadTooLarge
from raytile.serve.validation import check

__all__ = ["decode_roi", "encode_bitmap", "ROI_SCHEMA"]

ROI_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "bitmap": {"type": "string"},
        "rects": {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
    },
}


def encode_bitmap(roi: np.ndarray) -> str:
    """The ``bitmap`` form of a bool ROI (for clients written in Python)."""
    return base64.b64encode(np.packbits(np.asarray(roi, dtype=bool).ravel()).tobytes()).decode("ascii")


def decode_roi(spec: Any, nav_shape: tuple[int, ...], max_bytes: int, field: str = "roi") -> np.ndarray | None:
    """A bool array of ``nav_shape`` from the request's ``roi`` (None: the whole data set)."""
    if spec is None:
        return None
    check(spec, ROI_SCHEMA, field)
    size = len(json.dumps(spec))
    if size > max_bytes:
        raise PayloadTooLarge(field, f"is {size} bytes; this server takes ROIs of at most {max_bytes} bytes")
    if ("bitmap" in spec) == ("rects" in spec):
        raise BadRequest(field, "needs exactly one of 'bitmap' and 'rects'")
    n = math.prod(nav_shape)
    if "bitmap" in spec:
        try:
            raw = base64.b64decode(spec["bitmap"], validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{field}.bitmap", "is not valid base64") from None
        if len(raw) != (n + 7) // 8:
            raise BadRequest(f"{field}.bitmap", f"has {len(raw)} bytes; nav shape {tuple(nav_shape)} "
                                                f"needs {(n + 7) // 8} (np.packbits of {n} positions)")
        return np.unpackbits(np.frombuffer(raw, np.uint8), count=n).astype(bool).reshape(nav_shape)
    roi = np.zeros(nav_shape, dtype=bool)
    dims = len(nav_shape)
    for i, rect in enumerate(spec["rects"]):
        if len(rect) != 2 * dims:
            raise BadRequest(f"{field}.rects[{i}]", f"needs {2 * dims} numbers (starts, then stops), got {len(rect)}")
        lo, hi = rect[:dims], rect[dims:]
        if any(a >= b or b > s for a, b, s in zip(lo, hi, nav_shape)):
            raise BadRequest(f"{field}.rects[{i}]", f"{rect} is empty or outside the nav shape {tuple(nav_shape)}")
        roi[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
    return roi
