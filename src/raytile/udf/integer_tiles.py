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

For 8- and 16-bit integers into float32 (the dtype LiberTEM reads such
data in); sums are exact while they stay integers below 2**24, products
add up in another order than BLAS does, in the same precision.

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

__all__ = ["is_integer_tile", "sum_frames_into", "dot_rows_into", "load_kernels"]


def is_integer_tile(flat: Any, out_dtype: Any) -> bool:
    """True if ``flat`` is a C-contiguous 2D numpy array of 8- or 16-bit integers to be reduced into
    float32: what these kernels do. (Wider integers give float64 results; they are converted first.)"""
    return (isinstance(flat, np.ndarray) and flat.ndim == 2 and flat.dtype.kind in "ui"
            and flat.dtype.itemsize <= 2 and flat.flags.c_contiguous and np.dtype(out_dtype) == np.float32)


# Values are cast to float32 explicitly: numba adds an integer to a float32 in float64 otherwise, at half
# the speed. Four frames a pass: the result (or the mask) is read once for four frames (measured on
# 256x256 uint16 frames, hot in cache: sum 5.7 -> 3.1 us, mask product 5.6 -> 3.2 us a frame).
@cached_njit(nogil=True, fastmath=True)
def _sum_frames(tile, out):  # pragma: no cover (numba)
    n, f = tile.shape[0], 0
    while f + 4 <= n:
        r0, r1, r2, r3 = tile[f], tile[f + 1], tile[f + 2], tile[f + 3]
        for i in range(out.shape[0]):
            out[i] += (np.float32(r0[i]) + np.float32(r1[i])) + (np.float32(r2[i]) + np.float32(r3[i]))
        f += 4
    for f in range(f, n):
        row = tile[f]
        for i in range(out.shape[0]):
            out[i] += np.float32(row[i])


@cached_njit(nogil=True, fastmath=True)
def _dot_rows(tile, rows, out):  # pragma: no cover (numba)
    n, f = tile.shape[0], 0
    while f + 4 <= n:
        r0, r1, r2, r3 = tile[f], tile[f + 1], tile[f + 2], tile[f + 3]
        for j in range(rows.shape[0]):
            mask = rows[j]
            a0 = a1 = a2 = a3 = np.float32(0)
            for i in range(mask.shape[0]):
                m = mask[i]
                a0 += np.float32(r0[i]) * m
                a1 += np.float32(r1[i]) * m
                a2 += np.float32(r2[i]) * m
                a3 += np.float32(r3[i]) * m
            out[f, j] += a0
            out[f + 1, j] += a1
            out[f + 2, j] += a2
            out[f + 3, j] += a3
        f += 4
    for f in range(f, n):
        row = tile[f]
        for j in range(rows.shape[0]):
            mask = rows[j]
            acc = np.float32(0)
            for i in range(mask.shape[0]):
                acc += np.float32(row[i]) * mask[i]
            out[f, j] += acc


def _check(flat: np.ndarray, out: np.ndarray, name: str) -> None:
    if not is_integer_tile(flat, out.dtype):
        raise ValueError(f"{name}: tile ({flat.dtype}, {flat.shape}) must be 2D C-contiguous 8- or 16-bit "
                         f"integers and out ({out.dtype}) float32")


def sum_frames_into(tile: np.ndarray, out: np.ndarray) -> None:
    """``out += tile.sum(axis=0)``: ``tile`` ``(frames, pixels)``, ``out`` ``(pixels,)`` float32.

    ``out`` may be any float32 view of the right length (a result
    buffer's flattened view). Exact while the sums are integers below 2**24.
    """
    _check(tile, out, "sum_frames_into")
    if out.shape != (tile.shape[1],):
        raise ValueError(f"sum_frames_into: tile {tile.shape} does not fit out {out.shape}")
    _sum_frames(tile, out)


def dot_rows_into(tile: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """``out += tile @ rows.T``: ``tile`` ``(frames, pixels)``, ``rows`` ``(n, pixels)`` float32 (one
    mask a row), ``out`` ``(frames, n)`` float32; each product is accumulated in float32."""
    _check(tile, out, "dot_rows_into")
    if rows.ndim != 2 or rows.shape[1] != tile.shape[1] or out.shape != (tile.shape[0], rows.shape[0]):
        raise ValueError(f"dot_rows_into: tile {tile.shape}, rows {rows.shape} and out {out.shape} do not fit")
    if rows.dtype != np.float32:
        raise ValueError(f"dot_rows_into: rows must be float32, not {rows.dtype}")
    _dot_rows(tile, rows, out)


def load_kernels() -> None:
    """Compile the kernels for uint8 and uint16 tiles, or load them from numba's on-disk cache.

    Worker actors call this when they start, with their other start-up
    imports, so that the first run's first tile does not wait for it (about
    0.2 s with the cache, 0.6 s without; the demo's first run was 0.1 s
    slower before). Other dtypes compile on first use.
    """
    for dtype in (np.uint8, np.uint16):
        tile = np.zeros((1, 1), dtype)
        sum_frames_into(tile, np.zeros(1, np.float32))
        dot_rows_into(tile, np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32))
