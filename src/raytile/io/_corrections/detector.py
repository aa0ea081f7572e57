"""``libertem.io.corrections.detector`` at its ported path: whole-array detector corrections.

:func:`correct` subtracts a dark frame, multiplies by a gain map and patches
excluded pixels (each replaced by the median of its valid neighbours, as
:class:`~raytile.io.corrections.CorrectionSet` does in a run), on an array of
``(*nav, *sig)`` frames outside any run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.common.errors import RepairValueError
from raytile.io.corrections import CorrectionSet, patch_pixels

__all__ = ["correct", "RepairValueError"]


def correct(buffer: np.ndarray, dark_image: np.ndarray | None = None, gain_map: np.ndarray | None = None,
            excluded_pixels: Any = None, repair_descriptor: Any = None, inplace: bool = False,
            sig_shape: tuple[int, ...] | None = None, allow_empty: bool = False) -> np.ndarray:
    """``buffer`` corrected: ``(buffer - dark_image) * gain_map``, excluded pixels patched.

    ``sig_shape`` defaults to the shape of the dark frame or gain map, else the last two axes.
    ``inplace=True`` writes into ``buffer`` (it must be of a floating dtype) and returns it;
    otherwise a copy of at least float32 comes back. ``repair_descriptor`` (LiberTEM's
    precomputed neighbourhoods) is accepted and not needed: neighbours are found here.
    ``excluded_pixels`` given as a list is, as in LiberTEM, ``(ndim, n)``: one row of indices per signal
    dimension (``CorrectionSet`` reads a list as ``[(y, x), ...]``).
    """
    buffer = np.asarray(buffer)
    if isinstance(excluded_pixels, (list, tuple)) and len(excluded_pixels):
        excluded_pixels = np.asarray(excluded_pixels)
    if sig_shape is None:
        ref = dark_image if dark_image is not None else gain_map
        sig_shape = tuple(np.shape(ref)) if ref is not None else tuple(buffer.shape[-2:])
    sig_shape = tuple(int(n) for n in sig_shape)
    if inplace:
        if not np.issubdtype(buffer.dtype, np.floating):
            raise TypeError(f"correct: inplace=True needs a floating-point buffer, got dtype {buffer.dtype}")
        out = buffer
    else:
        out = buffer.astype(np.result_type(np.float32, buffer.dtype))
    corrections = CorrectionSet(dark=dark_image, gain=gain_map, excluded_pixels=excluded_pixels,
                                allow_empty=allow_empty)
    frames = out.reshape((-1,) + sig_shape)
    if dark_image is not None:
        frames -= np.asarray(dark_image, dtype=frames.dtype).reshape(sig_shape)
    if gain_map is not None:
        frames *= np.asarray(gain_map, dtype=frames.dtype).reshape(sig_shape)
    mask = corrections.excluded_mask(sig_shape)
    if mask is not None:
        patch_pixels(frames, mask)
    return out
