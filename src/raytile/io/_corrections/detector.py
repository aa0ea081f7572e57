"""``libertem.io.corrections.detector`` at its ported path: whole-array detector corrections.

:func:`correct` subtracts a dark frame, multiplies by a gain map and patches
excluded pixels (each replaced by the median of its valid neighbours, as
:class:`~raytile.io.corrections.CorrectionSet` does in a run), on an array of
``(*nav, *sig)`` frames outside any run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.common.errors import CorrectError, RepairValueError
from raytile.io.corrections import CorrectionSet, patch_pixels, repair_sources

__all__ = ["correct", "correct_dot_masks", "CorrectError", "RepairValueError"]


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
    if not buffer.flags.c_contiguous or np.isfortran(buffer):  # as LiberTEM, also when not in place
        raise CorrectError(f"correct: the buffer must be C-contiguous, got one of shape {buffer.shape} that is "
                           f"{'in Fortran order' if np.isfortran(buffer) else 'not contiguous'} "
                           "(np.ascontiguousarray makes a C-contiguous copy)")
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


def correct_dot_masks(masks: Any, gain_map: np.ndarray, excluded_pixels: Any = None,
                      allow_empty: bool = False) -> Any:
    """``masks`` (``(n, *sig)``) changed so that applying them to uncorrected, dark-subtracted frames
    gives what applying ``masks`` to corrected frames gives (LiberTEM's ``correct_dot_masks``).

    :func:`correct` replaces an excluded pixel by the mean of its ``c`` non-excluded neighbours and
    multiplies by ``gain_map``; both are linear, so the masks take them instead: an excluded pixel's
    weight goes to its neighbours (``1/c`` each) and every weight is multiplied by the gain. Sparse
    masks (``sparse``, ``scipy.sparse``) stay sparse (a ``sparse.COO`` for pydata ones, as LiberTEM).
    """
    import scipy.sparse

    sig_shape = tuple(np.shape(gain_map))
    pixels = int(np.prod(sig_shape))
    mask_shape = tuple(masks.shape)
    gain = np.asarray(gain_map).reshape(-1)
    pydata = type(masks).__module__.split(".")[0] == "sparse"
    flat: Any = masks.reshape((-1, pixels))
    if pydata:
        flat = flat.to_scipy_sparse().tocsr()
    elif not scipy.sparse.issparse(flat):
        flat = np.asarray(flat)
    if excluded_pixels is not None:
        if isinstance(excluded_pixels, (list, tuple)) and len(excluded_pixels):
            excluded_pixels = np.asarray(excluded_pixels)
        excluded = CorrectionSet(excluded_pixels=excluded_pixels, allow_empty=allow_empty).excluded_mask(sig_shape)
        if excluded is not None:
            # repair as a pixels x pixels map: identity, an excluded pixel's row spread over its neighbours
            keep = np.ones(pixels)
            rows, cols, vals = [], [], []
            for coords, nb in repair_sources(excluded):
                e = int(np.ravel_multi_index(coords, sig_shape))
                if len(nb) == 0:  # allow_empty: left as it is, as correct() leaves it
                    continue
                keep[e] = 0
                rows += [e] * len(nb)
                cols += list(np.ravel_multi_index(tuple(nb.T), sig_shape))
                vals += [1.0 / len(nb)] * len(nb)
            repair = scipy.sparse.diags(keep) + scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(pixels, pixels))
            flat = (repair.T @ flat.T).T
    result: Any = flat.multiply(gain).tocsr() if scipy.sparse.issparse(flat) else flat * gain
    if pydata:
        import sparse

        return sparse.COO.from_scipy_sparse(result).reshape(mask_shape)
    if scipy.sparse.issparse(result):
        return result if len(mask_shape) == 2 else result.toarray().reshape(mask_shape)
    return np.asarray(result).reshape(mask_shape)
