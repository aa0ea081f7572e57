"""A run's results as files: every buffer of a UDF in one ``.npz``, one buffer as a ``.png``.

The PNG holds one pixel per value: gray levels ``round(255 * (v - lo) /
(hi - lo))`` between the finite minimum and maximum (NaN, e.g. outside a
ROI, is black); a buffer with extra dimensions (one value per mask, the
``(y, x)`` of a CoM field) gives its plane ``index`` along them. A CoM
``field`` (``(..., 2)`` as ``(y, x)``) may be asked for as colour instead
(``colour=True``), pictured by :func:`raytile.viz.images.rgb_from_2dvector`
as the Analysis API pictures it.

>>> gray_levels(np.array([[0.0, 1.0], [2.0, np.nan]])).tolist()
[[0, 128], [255, 0]]
"""

from __future__ import annotations

import io
from typing import Any, Mapping

import numpy as np

__all__ = ["npz_bytes", "png_bytes", "gray_levels", "plane"]


def npz_bytes(buffers: Mapping[str, np.ndarray]) -> bytes:
    """The buffers as the bytes of an ``.npz`` file (``np.savez_compressed``, one array a name)."""
    out = io.BytesIO()
    arrays: dict[str, Any] = {name: np.asarray(data) for name, data in buffers.items()}
    np.savez_compressed(out, **arrays)
    return out.getvalue()


def gray_levels(values: np.ndarray) -> np.ndarray:
    """``uint8`` gray levels of ``values`` scaled linearly from their finite minimum to maximum."""
    v = np.asarray(values)
    if v.dtype.kind == "c":
        v = np.abs(v)
    v = v.astype(np.float64)
    finite = np.isfinite(v)
    if not finite.any():
        return np.zeros(v.shape, np.uint8)
    lo, hi = float(v[finite].min()), float(v[finite].max())
    span = hi - lo if hi > lo else 1.0
    out = np.round(255 * (np.where(finite, v, lo) - lo) / span)
    return out.astype(np.uint8)


def plane(data: np.ndarray, image_dims: int, index: int) -> np.ndarray:
    """The ``image_dims``-D image of ``data``: its plane ``index`` along the extra trailing dims (flattened).

    Raises IndexError if ``index`` is outside them.
    """
    data = np.asarray(data)
    image = data.shape[:image_dims]
    extra = int(np.prod(data.shape[image_dims:], dtype=np.int64))
    if not 0 <= index < max(extra, 1):
        raise IndexError(f"index {index} is outside the {extra} values per pixel of shape {data.shape}")
    return data.reshape(*image, max(extra, 1))[..., index]


def png_bytes(image: np.ndarray, colour_field: bool = False) -> bytes:
    """A 2D ``image`` (or a ``(h, w, 2)`` field of ``(y, x)`` with ``colour_field``) as the bytes of a PNG."""
    from PIL import Image

    if colour_field:
        from raytile.viz.images import rgb_from_2dvector

        field = np.asarray(image, np.float64)
        finite = np.isfinite(field).all(axis=-1)
        rgb = rgb_from_2dvector(y=np.where(finite, field[..., 0], 0.0), x=np.where(finite, field[..., 1], 0.0))
        pic = Image.fromarray(np.ascontiguousarray(rgb, np.uint8))
    else:
        pic = Image.fromarray(gray_levels(image))
    out = io.BytesIO()
    pic.save(out, format="PNG")
    return out.getvalue()
