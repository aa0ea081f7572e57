"""Reductions of integer tiles straight into float results, with no converted copy of the tile.

Detectors give integer frames (``uint8``/``uint16``/``uint32``, 12-bit raw
in ``uint16``) while sums and mask products are wanted in float. Converting
a tile first writes a float copy twice its size and reads it back once per
UDF; on a 256x256 ``uint16`` frame that copy cost more than the sum and the
mask product together (measured: conversion 15-20 us, BLAS sum and ring
product 4-9 us each, a frame from memory). These kernels read the integer
tile once and convert each value as they go:

- :func:`sum_frames_into`: ``out += tile.sum(axis=0)`` (SumUDF)
- :func:`dot_rows_into`: ``out += tile @ rows.T`` (ApplyMasksEngine, dense masks)

They are exact where the float conversion is (integers below 2**24 in
float32, 2**53 in float64); the products sum in a different order than
BLAS does, with the same float precision.

>>> import numpy as np
>>> tile = np.arange(12, dtype=np.uint16).reshape(3, 4)
>>> out = np.zeros(4, np.float32)
>>> sum_frames_into(tile, out)
>>> out.tolist()
[12.0, 15.0, 18.0, 21.0]
>>> prod = np.zeros((3, 1), np.float32)
>>> dot_rows_into(tile, np.ones((1, 4), np.float32), prod)
>>> prod[:, 0].tolist()
[6.0, 22.0, 38.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.common.numba import cached_njit

__all__ = ["is_integer_tile", "sum_frames_into", "dot_rows_into"]

#: Result dtypes the kernels accumulate in.
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def is_integer_tile(flat: Any, out_dtype: Any) -> bool:
    """True if ``flat`` is a C-contiguous 2D numpy integer array whose reduction into ``out_dtype``
    (float32 or float64) these kernels do."""
    return (isinstance(flat, np.ndarray) and flat.ndim == 2 and flat.dtype.kind in "ui"
            and flat.flags.c_contiguous and np.dtype(out_dtype) in _FLOATS)


# One kernel per float dtype: numba adds an integer to a float32 in float64 unless the integer is
# cast first, which halves the speed (measured 21 against 11 us a 256x256 uint16 frame).
@cached_njit(nogil=True, fastmath=True)
def _sum_frames_f32(tile, out):  # pragma: no cover (numba)
    for f in range(tile.shape[0]):
        row = tile[f]
        for i in range(row.shape[0]):
            out[i] += np.float32(row[i])


@cached_njit(nogil=True, fastmath=True)
def _sum_frames_f64(tile, out):  # pragma: no cover (numba)
    for f in range(tile.shape[0]):
        row = tile[f]
        for i in range(row.shape[0]):
            out[i] += np.float64(row[i])


@cached_njit(nogil=True, fastmath=True)
def _dot_rows_f32(tile, rows, out):  # pragma: no cover (numba)
    for f in range(tile.shape[0]):
        row = tile[f]
        for j in range(rows.shape[0]):
            mask = rows[j]
            acc = np.float32(0)
            for i in range(row.shape[0]):
                acc += np.float32(row[i]) * mask[i]
            out[f, j] += acc


@cached_njit(nogil=True, fastmath=True)
def _dot_rows_f64(tile, rows, out):  # pragma: no cover (numba)
    for f in range(tile.shape[0]):
        row = tile[f]
        for j in range(rows.shape[0]):
            mask = rows[j]
            acc = np.float64(0)
            for i in range(row.shape[0]):
                acc += np.float64(row[i]) * mask[i]
            out[f, j] += acc


def sum_frames_into(tile: np.ndarray, out: np.ndarray) -> None:
    """``out += tile.sum(axis=0)``: ``tile`` ``(frames, pixels)`` integer, ``out`` ``(pixels,)`` float.

    ``out`` may be any float view of the right length (a result buffer's
    flattened view); the values are added frame by frame, in order.
    """
    if tile.ndim != 2 or out.shape != (tile.shape[1],):
        raise ValueError(f"sum_frames_into: tile {tile.shape} does not fit out {out.shape}")
    if out.dtype not in _FLOATS:
        raise ValueError(f"sum_frames_into: out must be float32 or float64, not {out.dtype}")
    (_sum_frames_f32 if out.dtype == np.float32 else _sum_frames_f64)(tile, out)


def dot_rows_into(tile: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """``out += tile @ rows.T``: ``tile`` ``(frames, pixels)`` integer, ``rows`` ``(n, pixels)`` float
    (one mask a row), ``out`` ``(frames, n)`` of the rows' dtype.

    Each product is accumulated in that dtype.
    """
    if (tile.ndim != 2 or rows.ndim != 2 or rows.shape[1] != tile.shape[1]
            or out.shape != (tile.shape[0], rows.shape[0])):
        raise ValueError(f"dot_rows_into: tile {tile.shape}, rows {rows.shape} and out {out.shape} do not fit")
    if rows.dtype != out.dtype or out.dtype not in _FLOATS:
        raise ValueError(f"dot_rows_into: rows ({rows.dtype}) and out ({out.dtype}) need one float dtype")
    (_dot_rows_f32 if out.dtype == np.float32 else _dot_rows_f64)(tile, rows, out)
