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
- :func:`sum_runs_into`: the same for masks that are runs of one value (virtual detectors:
  rings, disks, rectangles; :func:`mask_runs` decides), each run's pixels summed exactly in
  integers: work follows the masks' non-zero pixels, not masks x pixels
- :func:`sum_pixels_into`: ``out += tile.sum(axis=1)`` (SumSigUDF), each frame's sum
  exact in int64 and rounded once into ``out``
- :func:`multiply_frames_into`: ``product *= frame - frame.min() + 1`` per pixel for
  each frame of a tile, into a float64 product, so that one log serves up to 63
  frames (LogsumUDF: the sum of the logs is the log of the product; 2x less
  time a frame than a table of logs, 2-2.5x less than numpy's float32 log);
  :func:`split_exponents_into` takes the product's powers of two out, exactly,
  so that it takes more frames: one log per pixel and partition. Frames that
  share one minimum (a counting detector's 0) are read once, not twice

For 8- and 16-bit integers into float32 (the dtype LiberTEM reads such
data in); sums are exact while they stay integers below 2**24, products
add up in another order than BLAS does, in the same precision.

Two more reduce tiles of any real dtype (integers of any width, float32,
float64) in float64, the precision their UDFs promise:

- :func:`frame_moments_into`: each frame's intensity and its y and x
  moments inside a weighted region (CoMUDF), row by row: the y moment is the
  row's sum times its y, so a frame is read once for all three;
  :func:`region_moments_into` does the same for 8/16-bit frames and a region
  of 0s and 1s (CoMUDF's disks and rings) exactly, in int32 lanes: row sums
  and column sums, weighed by y and x per frame;
- :func:`pixel_moments_into`: per pixel, the count, sum and sum of squared
  deviations of the frames, merged into running values (StdDevUDF);
  :func:`pixel_sums_into` does it for 8/16-bit frames in exact integers,
  sum and sum of squares, which :func:`merge_pixel_sums_into` merges into
  the same running values (once a partition).

Measured on 256x256 uint16 frames hot in cache, against the sum kernel in
the same process: moments 7x its time a frame, region moments 1x (1.1x
read from the page cache; converting to float64 and BLAS with the three
masks took 15-20x), pixel
moments 3x (numpy's float64 copy, deviations and merge took over 25x), pixel
sums 1.8x (1.25x from the page cache).

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

from dataclasses import dataclass
from typing import Any

import numpy as np

from raytile.common.numba import cached_njit

__all__ = ["is_integer_tile", "is_real_tile", "sum_frames_into", "dot_rows_into", "mask_spans", "sum_pixels_into",
           "MaskRuns", "mask_runs", "runs_pay", "sum_runs_into", "sum_and_dot_row_into",
           "multiply_frames_into", "split_exponents_into", "PRODUCT_FRAMES", "frame_moments_into", "region_lanes",
           "region_moments_into",
           "pixel_moments_into", "INT_MOMENT_FRAMES", "pixel_sums_into", "merge_pixel_sums_into",
           "load_kernels"]

#: fastmath for kernels that read float tiles: reordered sums and fused multiply-adds, but NaN and inf
#: keep their meaning (a NaN pixel gives a NaN result, as in numpy).
_FLOAT_FASTMATH = {"reassoc", "contract", "arcp", "nsz"}
#: Pixels a block, for kernels that keep a running value per pixel in L1 while they go through frames.
_BLOCK = 1024
_i32 = np.int32
#: Pixels a block in :func:`pixel_moments_into`: their running sums (2 x 64 KiB of float64) stay in L2.
_MOMENT_BLOCK = 8192


def is_integer_tile(flat: Any, out_dtype: Any) -> bool:
    """True if ``flat`` is a C-contiguous 2D numpy array of 8- or 16-bit integers to be reduced into
    float32: what these kernels do. (Wider integers give float64 results; they are converted first.)"""
    return (isinstance(flat, np.ndarray) and flat.ndim == 2 and flat.dtype.kind in "ui"
            and flat.dtype.itemsize <= 2 and flat.flags.c_contiguous and np.dtype(out_dtype) == np.float32)


def is_real_tile(arr: Any, ndim: int) -> bool:
    """True if ``arr`` is a C-contiguous ``ndim``-D numpy array of integers or floats (no bool, no
    complex): what :func:`frame_moments_into` and :func:`pixel_moments_into` read."""
    return (isinstance(arr, np.ndarray) and arr.ndim == ndim and arr.dtype.kind in "uif"
            and arr.flags.c_contiguous)


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


# One mask: four frames a pass over the whole mask (it stays in L2); 15-20% less time a frame than
# _dot_rows for one mask, which is twice as fast from 4 masks on.
@cached_njit(nogil=True, fastmath=True)
def _dot_rows_by_frames(tile, rows, out):  # pragma: no cover (numba)
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


#: Pixels a block in :func:`dot_rows_into`: 16 masks' blocks (128 KiB of float32) stay in L2 while all the
#: frames of a tile go past them.
_MASK_BLOCK = 2048


# Per block of pixels, for all frames of the tile: four frames converted to float32 once (into an L1
# scratch), then multiplied with four masks at a time (16 accumulators: each load of a frame or a mask
# serves four products). The old order (four frames, each mask over the whole frame) read every mask
# from L3 for each four frames and converted each frame once per mask; measured on 256x256 uint16,
# 16 masks, 32 frames a tile: 40 us/frame against 80 (the sum kernel 12), one mask the same as before.
# Block sums are float32 (a few hundred terms a lane), added up in float64.
@cached_njit(nogil=True, fastmath=True)
def _dot_rows(tile, rows, spans, out):  # pragma: no cover (numba)
    n, px = tile.shape
    m = rows.shape[0]
    acc = np.zeros((n, m), np.float64)
    scratch = np.empty((4, _MASK_BLOCK), np.float32)
    for b in range(0, px, _MASK_BLOCK):
        k = min(_MASK_BLOCK, px - b)
        span = spans[b // _MASK_BLOCK]
        f = 0
        while f + 4 <= n:
            s0, s1, s2, s3 = scratch[0, :k], scratch[1, :k], scratch[2, :k], scratch[3, :k]
            r0, r1 = tile[f, b:b + k], tile[f + 1, b:b + k]
            r2, r3 = tile[f + 2, b:b + k], tile[f + 3, b:b + k]
            for i in range(k):
                s0[i] = np.float32(r0[i])
                s1[i] = np.float32(r1[i])
                s2[i] = np.float32(r2[i])
                s3[i] = np.float32(r3[i])
            j = 0
            while j + 4 <= m:
                lo = min(min(span[j, 0], span[j + 1, 0]), min(span[j + 2, 0], span[j + 3, 0]))
                hi = max(max(span[j, 1], span[j + 1, 1]), max(span[j + 2, 1], span[j + 3, 1]))
                if lo >= hi:  # four masks all zero in this block
                    j += 4
                    continue
                ma, mb = rows[j, b + lo:b + hi], rows[j + 1, b + lo:b + hi]
                mc, md = rows[j + 2, b + lo:b + hi], rows[j + 3, b + lo:b + hi]
                t0, t1, t2, t3 = s0[lo:hi], s1[lo:hi], s2[lo:hi], s3[lo:hi]
                a0 = a1 = a2 = a3 = c0 = c1 = c2 = c3 = np.float32(0)
                d0 = d1 = d2 = d3 = e0 = e1 = e2 = e3 = np.float32(0)
                for i in range(hi - lo):
                    x, y, z, w = ma[i], mb[i], mc[i], md[i]
                    v0, v1, v2, v3 = t0[i], t1[i], t2[i], t3[i]
                    a0 += v0 * x
                    a1 += v1 * x
                    a2 += v2 * x
                    a3 += v3 * x
                    c0 += v0 * y
                    c1 += v1 * y
                    c2 += v2 * y
                    c3 += v3 * y
                    d0 += v0 * z
                    d1 += v1 * z
                    d2 += v2 * z
                    d3 += v3 * z
                    e0 += v0 * w
                    e1 += v1 * w
                    e2 += v2 * w
                    e3 += v3 * w
                for q, (p0, p1, p2, p3) in enumerate(((a0, a1, a2, a3), (c0, c1, c2, c3),
                                                      (d0, d1, d2, d3), (e0, e1, e2, e3))):
                    acc[f, j + q] += p0
                    acc[f + 1, j + q] += p1
                    acc[f + 2, j + q] += p2
                    acc[f + 3, j + q] += p3
                j += 4
            for j in range(j, m):
                lo, hi = span[j, 0], span[j, 1]
                ma = rows[j, b + lo:b + hi]
                t0, t1, t2, t3 = s0[lo:hi], s1[lo:hi], s2[lo:hi], s3[lo:hi]
                a0 = a1 = a2 = a3 = np.float32(0)
                for i in range(max(0, hi - lo)):
                    x = ma[i]
                    a0 += t0[i] * x
                    a1 += t1[i] * x
                    a2 += t2[i] * x
                    a3 += t3[i] * x
                acc[f, j] += a0
                acc[f + 1, j] += a1
                acc[f + 2, j] += a2
                acc[f + 3, j] += a3
            f += 4
        for f in range(f, n):
            row = tile[f, b:b + k]
            for j in range(m):
                mask = rows[j, b:b + k]
                a = np.float32(0)
                for i in range(k):
                    a += np.float32(row[i]) * mask[i]
                acc[f, j] += a
    for f in range(n):
        for j in range(m):
            out[f, j] += acc[f, j]


# Per block of _MASK_BLOCK pixels and per mask, the range [lo, hi) of the block outside which the mask is
# zero (lo >= hi: zero in all the block). Virtual detectors are mostly zeros: 16 adjacent rings share
# each pixel among them, and a ring's part of a block of 8 rows is a few runs.
@cached_njit(nogil=True)
def _mask_spans(rows):  # pragma: no cover (numba)
    m, px = rows.shape
    nb = (px + _MASK_BLOCK - 1) // _MASK_BLOCK
    spans = np.zeros((nb, m, 2), np.int64)
    for bi in range(nb):
        b = bi * _MASK_BLOCK
        k = min(_MASK_BLOCK, px - b)
        for j in range(m):
            lo, hi = k, 0
            for i in range(k):
                if rows[j, b + i] != 0:
                    lo = min(lo, i)
                    hi = i + 1
            spans[bi, j, 0] = lo
            spans[bi, j, 1] = hi
    return spans


#: Pixels a run of :func:`mask_runs` holds at most: its sum of 16-bit values stays in int32 (2**15 x 65535
#: < 2**31).
_RUN_CAP = 2**15


# Per mask, runs of pixels of one non-zero value (a new run also every _RUN_CAP pixels): how many, and how
# many pixels are non-zero. A NaN or an infinity is a run of its own pixel, so that it meets that pixel
# alone, as in a product pixel by pixel (inf x 0 is NaN even where the rest of a run is not 0).
@cached_njit(nogil=True)
def _count_runs(rows):  # pragma: no cover (numba)
    m, px = rows.shape
    runs = nonzero = 0
    for j in range(m):
        prev = np.float32(0)
        length = 0
        for i in range(px):
            v = rows[j, i]
            if v != 0:
                nonzero += 1
                if v != prev or length == _RUN_CAP or not np.isfinite(v):
                    runs += 1
                    length = 0
                length += 1
            prev = v
    return runs, nonzero


@cached_njit(nogil=True)
def _fill_runs(rows, bounds, values):  # pragma: no cover (numba)
    m, px = rows.shape
    k = -1
    for j in range(m):
        prev = np.float32(0)
        length = 0
        for i in range(px):
            v = rows[j, i]
            if v != 0:
                if v != prev or length == _RUN_CAP or not np.isfinite(v):
                    k += 1
                    length = 0
                    bounds[k, 0] = i
                    bounds[k, 2] = j
                    values[k] = v
                bounds[k, 1] = i + 1
                length += 1
            prev = v


# Masks as runs of one value (virtual detectors: rings, disks, rectangles, the rings of a radial profile):
# per run, the pixels of eight frames summed exactly in int32 lanes (every step cast back to int32: numba
# widens int32 + int32 to int64, half the lanes), then times the run's value into float64 per frame and
# mask, rounded once into ``out``. Work follows the masks' non-zero pixels, not masks x pixels. The runs
# are sliced so that the loop counts from 0: indexing with the run's own bounds made numba check each index
# for wrap-around, and the loop was not vectorised (2x the time). Runs in the order of their first pixel:
# the frames are read as parallel streams. Eight frames a pass, not four: a run's bounds, slices and
# float64 updates serve twice the frames (16 rings: 10% less time). Measured on 256x256 uint16, 32-frame
# tiles, against _dot_rows / _dot_rows_by_frames (with spans) in the same process: 16 adjacent rings
# (4127 runs of 12 pixels on average) 10.3 us/frame hot, 12.4 from memory, against 23 and 28 (the sum
# kernel 5.5 and 9.5); 1 ring (282 runs) 3.5-4 hot, 8.4 from memory, against 5.5 and 10.9.
@cached_njit(nogil=True, fastmath=True)
def _sum_runs(tile, bounds, values, out):  # pragma: no cover (numba)
    n = tile.shape[0]
    acc = np.zeros(out.shape, np.float64)
    f = 0
    while f + 8 <= n:
        q0, q1, q2, q3 = tile[f], tile[f + 1], tile[f + 2], tile[f + 3]
        q4, q5, q6, q7 = tile[f + 4], tile[f + 5], tile[f + 6], tile[f + 7]
        for k in range(bounds.shape[0]):
            s, e, j = bounds[k, 0], bounds[k, 1], bounds[k, 2]
            r0, r1, r2, r3 = q0[s:e], q1[s:e], q2[s:e], q3[s:e]
            r4, r5, r6, r7 = q4[s:e], q5[s:e], q6[s:e], q7[s:e]
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = _i32(0)
            for i in range(r0.shape[0]):
                a0 = _i32(a0 + _i32(r0[i]))
                a1 = _i32(a1 + _i32(r1[i]))
                a2 = _i32(a2 + _i32(r2[i]))
                a3 = _i32(a3 + _i32(r3[i]))
                a4 = _i32(a4 + _i32(r4[i]))
                a5 = _i32(a5 + _i32(r5[i]))
                a6 = _i32(a6 + _i32(r6[i]))
                a7 = _i32(a7 + _i32(r7[i]))
            v = values[k]
            acc[f, j] += v * np.float64(a0)
            acc[f + 1, j] += v * np.float64(a1)
            acc[f + 2, j] += v * np.float64(a2)
            acc[f + 3, j] += v * np.float64(a3)
            acc[f + 4, j] += v * np.float64(a4)
            acc[f + 5, j] += v * np.float64(a5)
            acc[f + 6, j] += v * np.float64(a6)
            acc[f + 7, j] += v * np.float64(a7)
        f += 8
    if f + 4 <= n:
        q0, q1, q2, q3 = tile[f], tile[f + 1], tile[f + 2], tile[f + 3]
        for k in range(bounds.shape[0]):
            s, e, j = bounds[k, 0], bounds[k, 1], bounds[k, 2]
            r0, r1, r2, r3 = q0[s:e], q1[s:e], q2[s:e], q3[s:e]
            a0 = a1 = a2 = a3 = _i32(0)
            for i in range(r0.shape[0]):
                a0 = _i32(a0 + _i32(r0[i]))
                a1 = _i32(a1 + _i32(r1[i]))
                a2 = _i32(a2 + _i32(r2[i]))
                a3 = _i32(a3 + _i32(r3[i]))
            v = values[k]
            acc[f, j] += v * np.float64(a0)
            acc[f + 1, j] += v * np.float64(a1)
            acc[f + 2, j] += v * np.float64(a2)
            acc[f + 3, j] += v * np.float64(a3)
        f += 4
    for f in range(f, n):
        q0 = tile[f]
        for k in range(bounds.shape[0]):
            s, e, j = bounds[k, 0], bounds[k, 1], bounds[k, 2]
            r0 = q0[s:e]
            a0 = _i32(0)
            for i in range(r0.shape[0]):
                a0 = _i32(a0 + _i32(r0[i]))
            acc[f, j] += values[k] * np.float64(a0)
    for f in range(n):
        for j in range(out.shape[1]):
            out[f, j] += acc[f, j]


#: Pixels a run whose sum :func:`_sum_pixels` keeps in int32 (256 x 65535 < 2**24).
_SUM_RUN = 256


# Integers of up to 16 bits add up exactly (numpy's float32 reduction converts in chunks first and rounds
# as it goes): per run of 256 pixels in int32 lanes (every step cast back to int32: numba widens int32 +
# int32 to int64, half the lanes), the runs' sums in int64. Four frames a pass: four streams from memory
# at once. Measured on 256x256 uint16 from the page cache: 13 us/frame against 19 for a frame at a time in
# int64 (the sum kernel 12-14).
@cached_njit(nogil=True, fastmath=True)
def _sum_pixels(tile, out):  # pragma: no cover (numba)
    n, px = tile.shape
    whole = px - px % _SUM_RUN
    f = 0
    while f + 4 <= n:
        a, b, c, d = tile[f], tile[f + 1], tile[f + 2], tile[f + 3]
        t0 = t1 = t2 = t3 = 0
        for s in range(0, whole, _SUM_RUN):
            r0, r1, r2, r3 = a[s:s + _SUM_RUN], b[s:s + _SUM_RUN], c[s:s + _SUM_RUN], d[s:s + _SUM_RUN]
            s0 = s1 = s2 = s3 = _i32(0)
            for x in range(_SUM_RUN):
                s0 = _i32(s0 + _i32(r0[x]))
                s1 = _i32(s1 + _i32(r1[x]))
                s2 = _i32(s2 + _i32(r2[x]))
                s3 = _i32(s3 + _i32(r3[x]))
            t0 += s0
            t1 += s1
            t2 += s2
            t3 += s3
        for x in range(whole, px):
            t0 += np.int64(a[x])
            t1 += np.int64(b[x])
            t2 += np.int64(c[x])
            t3 += np.int64(d[x])
        out[f] += t0
        out[f + 1] += t1
        out[f + 2] += t2
        out[f + 3] += t3
        f += 4
    for f in range(f, n):
        row = tile[f]
        acc = 0
        for i in range(px):
            acc += np.int64(row[i])
        out[f] += acc


#: Frames whose ``frame - frame.min() + 1`` terms (at most 2**16 for 16-bit data) one float64 product
#: per pixel holds: 2**(16 * 63) < 2**1024.
PRODUCT_FRAMES = 63
#: Frames a chunk: a chunk's products are taken while the next chunk's minima are found, block by block,
#: so that reading the next frames from memory overlaps the products of frames already in L2 (two chunks
#: of 256x256 uint16, 1 MiB, fit in L2).
_MIN_CHUNK = 4


# Per chunk of four frames, block by block of pixels (the block's products stay in L1): the next chunk's
# minima over the block (those frames come from memory), then the chunk's terms v - min + 1 multiplied
# in float32 into an L1 scratch (exact integers up to 2**16, their product below 2**64 rounded at most
# three times to 2**-24; eight pixels a vector), and the scratch into the float64 product (a separate
# loop: mixed in the first it held the float32 work to four pixels a vector). Measured on 256x256 uint16
# from the page cache: 19-20 us/frame against 23 for a pass for the minima of eight frames before their
# products (the sum kernel 12); hot in cache 11.7 against 13.8.
@cached_njit(nogil=True, fastmath=True)
def _multiply_frames(tile, product, fresh):  # pragma: no cover (numba)
    n, px = tile.shape
    lows = np.empty(n, tile.dtype)
    for f in range(min(n, _MIN_CHUNK)):  # the first chunk's minima
        row = tile[f]
        low = row[0]
        for i in range(px):
            low = min(low, row[i])
        lows[f] = low
    base = np.empty(n, np.float32)
    scratch = np.empty(_BLOCK, np.float32)
    for c in range(0, n, _MIN_CHUNK):
        ce = min(n, c + _MIN_CHUNK)
        ne = min(n, ce + _MIN_CHUNK)
        for f in range(c, ce):
            base[f] = np.float32(1) - np.float32(lows[f])  # exact: |1 - low| <= 2**16
        for f in range(ce, ne):
            lows[f] = tile[f, 0]
        for b in range(0, px, _BLOCK):
            k = min(_BLOCK, px - b)
            f = ce
            while f + 4 <= ne:
                r0, r1 = tile[f, b:b + k], tile[f + 1, b:b + k]
                r2, r3 = tile[f + 2, b:b + k], tile[f + 3, b:b + k]
                l0, l1, l2, l3 = lows[f], lows[f + 1], lows[f + 2], lows[f + 3]
                for i in range(k):
                    l0 = min(l0, r0[i])
                    l1 = min(l1, r1[i])
                    l2 = min(l2, r2[i])
                    l3 = min(l3, r3[i])
                lows[f], lows[f + 1], lows[f + 2], lows[f + 3] = l0, l1, l2, l3
                f += 4
            for f in range(f, ne):
                row = tile[f, b:b + k]
                low = lows[f]
                for i in range(k):
                    low = min(low, row[i])
                lows[f] = low
            prod = product[b:b + k]
            q = scratch[:k]
            if fresh and c == 0:
                prod[:] = 1.0
            f = c
            while f + 4 <= ce:
                r0, r1 = tile[f, b:b + k], tile[f + 1, b:b + k]
                r2, r3 = tile[f + 2, b:b + k], tile[f + 3, b:b + k]
                b0, b1, b2, b3 = base[f], base[f + 1], base[f + 2], base[f + 3]
                for i in range(k):
                    q[i] = ((np.float32(r0[i]) + b0) * (np.float32(r1[i]) + b1)) * (
                        (np.float32(r2[i]) + b2) * (np.float32(r3[i]) + b3))
                for i in range(k):
                    prod[i] *= np.float64(q[i])
                f += 4
            for f in range(f, ce):
                row = tile[f, b:b + k]
                bf = base[f]
                for i in range(k):
                    prod[i] *= np.float64(np.float32(row[i]) + bf)
    for f in range(1, n):  # (a hint for the next tile: see multiply_frames_into)
        if lows[f] != lows[0]:
            return False
    return True


# Frames whose minimum is the first frame's (counting detectors: 0 in every frame) need no pass for the
# minima before their terms: each group of four frames is read once, its terms taken with the first frame's
# minimum and multiplied in float32 (as in _multiply_frames) into a frame-sized scratch while the group's
# minima are found; the scratch goes into the float64 product block by block during the next group's pass,
# once those minima were all the first frame's. The first group whose minima differ is left out: the product
# holds the groups before it, and _multiply_frames takes the rest. Same roundings in the same order as
# _multiply_frames: equal products, bit for bit. Measured on 256x256 uint16 from the page cache:
# 12.4 us/frame against 15.7 for _multiply_frames (the sum kernel 10.4); hot in cache 7.2 against 10.6
# (sum 4.7). Tried: committing two groups a float64 multiply (no faster), the product as a float32 mantissa
# and an int32 exponent (faster hot, the same from the page cache, one more rounding a group).
@cached_njit(nogil=True, fastmath=True)
def _multiply_frames_one_min(tile, product, fresh):  # pragma: no cover (numba)
    n, px = tile.shape
    groups = n // 4
    if groups == 0:
        return 0
    row = tile[0]
    low = row[0]
    for i in range(px):
        low = min(low, row[i])
    base = np.float32(1) - np.float32(low)  # exact: |1 - low| <= 2**16
    pending = np.empty(px, np.float32)
    for g in range(groups):
        f = 4 * g
        l0, l1, l2, l3 = tile[f, 0], tile[f + 1, 0], tile[f + 2, 0], tile[f + 3, 0]
        for b in range(0, px, _BLOCK):
            k = min(_BLOCK, px - b)
            q = pending[b:b + k]
            if g > 0:  # the group before, its minima checked
                prod = product[b:b + k]
                if fresh and g == 1:
                    for i in range(k):
                        prod[i] = np.float64(q[i])
                else:
                    for i in range(k):
                        prod[i] *= np.float64(q[i])
            r0, r1 = tile[f, b:b + k], tile[f + 1, b:b + k]
            r2, r3 = tile[f + 2, b:b + k], tile[f + 3, b:b + k]
            for i in range(k):
                v0, v1, v2, v3 = r0[i], r1[i], r2[i], r3[i]
                l0 = min(l0, v0)
                l1 = min(l1, v1)
                l2 = min(l2, v2)
                l3 = min(l3, v3)
                q[i] = ((np.float32(v0) + base) * (np.float32(v1) + base)) * (
                    (np.float32(v2) + base) * (np.float32(v3) + base))
        if l0 != low or l1 != low or l2 != low or l3 != low:
            return f
    if fresh and groups == 1:
        for i in range(px):
            product[i] = np.float64(pending[i])
    else:
        for i in range(px):
            product[i] *= np.float64(pending[i])
    return 4 * groups


# Bits of a positive, finite, normal float64: the exponent field is taken out whole (a power of two: exact)
# and the mantissa kept with exponent 0. About 15 us for 65536 values against 60 for numpy's log.
# Returns how many values were not (sign bit or an exponent below 0, or inf/NaN): those are left as they are.
@cached_njit(nogil=True)
def _split_exponents(product, exponents):  # pragma: no cover (numba)
    bits = product.view(np.int64)
    bad = 0
    for i in range(bits.shape[0]):
        b = bits[i]
        field = (b >> 52) & 0xFFF  # with the sign bit: >= 0x800 for negative values
        good = field >= 1023 and field < 0x7FF
        bad += not good
        if good:
            exponents[i] += field - 1023
            bits[i] = (b & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000
    return bad


# One pass over each frame: per row the weighted sum and the x-weighted sum (two multiply-adds a
# pixel, in float64); the y moment is each row's sum times its y.
@cached_njit(nogil=True, fastmath=_FLOAT_FASTMATH)
def _frame_moments(tile, weights, xweights, y0, out):  # pragma: no cover (numba)
    n, h, w = tile.shape
    for f in range(n):
        total = 0.0
        ymom = 0.0
        xmom = 0.0
        for y in range(h):
            row = tile[f, y]
            m = weights[y]
            mx = xweights[y]
            rs = 0.0
            rx = 0.0
            for x in range(w):
                v = np.float64(row[x])
                rs += v * m[x]
                rx += v * mx[x]
            total += rs
            ymom += np.float64(y0 + y) * rs
            xmom += rx
        out[f, 0] += total
        out[f, 1] += ymom
        out[f, 2] += xmom


# A 0/1 region as lane masks (-1 inside, 0 outside): a pixel is masked by a bitwise and. Column sums
# stay in int32 (h * 65535 < 2**31 for h < 32768) in L1; row sums too; both exact, then weighed by x
# and y in float64 (exact below 2**53). Every step is cast back to int32: numba widens int32 + int32
# to int64, which halves the lanes of a vector (2x the time hot in cache). Four frames a pass, row by
# row: four streams from memory at once (a frame at a time is one, at a third less bandwidth), and
# each lane mask serves four frames. Measured on 256x256 uint16 from the page cache: 13-14 us/frame
# against 28 before (the sum kernel 12-13); hot in cache 5.9 against 11 (sum 5.9).
@cached_njit(nogil=True, fastmath=True)
def _region_moments(tile, lanes, y0, x0, out):  # pragma: no cover (numba)
    n, h, w = tile.shape
    cols = np.empty((4, w), np.int32)
    f = 0
    while f + 4 <= n:
        cols[:] = 0
        c0, c1, c2, c3 = cols[0], cols[1], cols[2], cols[3]
        t0 = t1 = t2 = t3 = 0.0
        m0 = m1 = m2 = m3 = 0.0
        for y in range(h):
            r0, r1, r2, r3 = tile[f, y], tile[f + 1, y], tile[f + 2, y], tile[f + 3, y]
            inside = lanes[y]
            s0 = s1 = s2 = s3 = _i32(0)
            for x in range(w):
                m = inside[x]
                v0 = _i32(_i32(r0[x]) & m)
                v1 = _i32(_i32(r1[x]) & m)
                v2 = _i32(_i32(r2[x]) & m)
                v3 = _i32(_i32(r3[x]) & m)
                c0[x] = _i32(c0[x] + v0)
                c1[x] = _i32(c1[x] + v1)
                c2[x] = _i32(c2[x] + v2)
                c3[x] = _i32(c3[x] + v3)
                s0 = _i32(s0 + v0)
                s1 = _i32(s1 + v1)
                s2 = _i32(s2 + v2)
                s3 = _i32(s3 + v3)
            yy = np.float64(y0 + y)
            t0 += np.float64(s0)
            t1 += np.float64(s1)
            t2 += np.float64(s2)
            t3 += np.float64(s3)
            m0 += yy * np.float64(s0)
            m1 += yy * np.float64(s1)
            m2 += yy * np.float64(s2)
            m3 += yy * np.float64(s3)
        for q in range(4):
            xmom = 0.0
            for x in range(w):
                xmom += np.float64(x0 + x) * np.float64(cols[q, x])
            out[f + q, 2] += xmom
        out[f, 0] += t0
        out[f + 1, 0] += t1
        out[f + 2, 0] += t2
        out[f + 3, 0] += t3
        out[f, 1] += m0
        out[f + 1, 1] += m1
        out[f + 2, 1] += m2
        out[f + 3, 1] += m3
        f += 4
    c = cols[0]
    for f in range(f, n):
        c[:] = 0
        total = 0.0
        ymom = 0.0
        for y in range(h):
            row = tile[f, y]
            inside = lanes[y]
            rs = _i32(0)
            for x in range(w):
                v = _i32(_i32(row[x]) & inside[x])
                c[x] = _i32(c[x] + v)
                rs = _i32(rs + v)
            total += np.float64(rs)
            ymom += np.float64(y0 + y) * np.float64(rs)
        xmom = 0.0
        for x in range(w):
            xmom += np.float64(x0 + x) * np.float64(c[x])
        out[f, 0] += total
        out[f, 1] += ymom
        out[f, 2] += xmom


# A block's (n, sum, M2) from its deviations' sums, merged into the running values by Chan et al.'s formula.
# When the block's pixels have all seen the same frames (dense tiles), without a division a pixel: 2.3x
# less time than a division or two a pixel (measured per pixel, 1.2 against 2.8 ns).
@cached_njit(nogil=True, fastmath=_FLOAT_FASTMATH)
def _merge_moments(first, s1, s2, n, count, sums, m2):  # pragma: no cover (numba)
    k = s1.shape[0]
    inv_n = 1.0 / n
    same = count[0]
    for i in range(k):
        if count[i] != same:
            same = -1
            break
    if same > 0:
        inv_a = 1.0 / same
        weight = same * n / (same + n)
        for i in range(k):
            sum_b = np.float64(first[i]) * n + s1[i]
            delta = sum_b * inv_n - sums[i] * inv_a
            sums[i] += sum_b
            m2[i] += (s2[i] - s1[i] * s1[i] * inv_n) + delta * delta * weight
    else:
        for i in range(k):
            sum_b = np.float64(first[i]) * n + s1[i]
            m2_b = s2[i] - s1[i] * s1[i] * inv_n
            n_a = count[i]
            if n_a == 0:
                sums[i] = sum_b
                m2[i] = m2_b
            else:
                delta = sum_b * inv_n - sums[i] / n_a
                sums[i] += sum_b
                m2[i] += m2_b + delta * delta * (n_a * n / (n_a + n))
    for i in range(k):
        count[i] += n


# Per block of pixels (their running values stay in L1), the tile's frames as deviations from its
# first frame: sum d and sum d**2 in float64 (exact for integer data below 2**53), four frames a
# pass; then the tile's M2 = sum d**2 - (sum d)**2 / n, merged into the running (count, sum, M2) by
# Chan et al.'s formula (:func:`_merge_moments`). The shift is one of the tile's own values, so
# (sum d)**2 / n is at most n times M2: the subtraction loses no more than log2(n + 1) bits, and a large
# offset none. Blocks of _MOMENT_BLOCK pixels: each frame's part of a block is 16 KiB (blocks of 1024
# pixels read 2 KiB from each of 32 frames in turn, which memory serves at less bandwidth). Measured on
# 256x256 uint16, 32 frames a tile: 15.7 us/frame hot, 19-20 from the page cache (blocks of 1024 pixels
# 14.8 and 25; with the merge's two divisions a pixel 18.5 and 26-30; the sum kernel 5.5 and 12).
@cached_njit(nogil=True, fastmath=_FLOAT_FASTMATH)
def _pixel_moments(tile, count, sums, m2):  # pragma: no cover (numba)
    n, px = tile.shape
    s1 = np.empty(_MOMENT_BLOCK)
    s2 = np.empty(_MOMENT_BLOCK)
    for b in range(0, px, _MOMENT_BLOCK):
        k = min(_MOMENT_BLOCK, px - b)
        first = tile[0, b:b + k]
        for i in range(k):
            s1[i] = 0.0
            s2[i] = 0.0
        f = 1
        while f + 4 <= n:
            r0, r1 = tile[f, b:b + k], tile[f + 1, b:b + k]
            r2, r3 = tile[f + 2, b:b + k], tile[f + 3, b:b + k]
            for i in range(k):
                shift = np.float64(first[i])
                d0 = np.float64(r0[i]) - shift
                d1 = np.float64(r1[i]) - shift
                d2 = np.float64(r2[i]) - shift
                d3 = np.float64(r3[i]) - shift
                s1[i] += (d0 + d1) + (d2 + d3)
                s2[i] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
            f += 4
        for f in range(f, n):
            row = tile[f, b:b + k]
            for i in range(k):
                d = np.float64(row[i]) - np.float64(first[i])
                s1[i] += d
                s2[i] += d * d
        _merge_moments(first, s1[:k], s2[:k], n, count[b:b + k], sums[b:b + k], m2[b:b + k])


#: Frames a pixel's exact integer sums (:func:`pixel_sums_into`) hold before they are merged into its float
#: moments. For 16-bit values, n * sum(v**2) and sum(v)**2 stay below 2**62 (2**63 up to 46340 frames), so
#: that n * M2 = n * sum(v**2) - sum(v)**2 is exact in int64; a call adds at most _SUMS_CHUNK frames to sums
#: that hold at most INT_MOMENT_FRAMES - _SUMS_CHUNK.
INT_MOMENT_FRAMES = 2**15
#: Frames a :func:`_pixel_sums` call at most (deeper tiles are cut).
_SUMS_CHUNK = 2**12


# A pixel's exact integer sums (frames, sum v, sum v**2) into its running float (count, sum, M2), by Chan et
# al.'s formula; the integer sums start again from 0. M2 of the integer part is (n * sum v**2 - (sum v)**2) / n:
# the numerator is an exact integer (see INT_MOMENT_FRAMES), rounded once to float64 and divided. No fastmath:
# true divisions, so that the means of constant frames are exact and their M2 stays exactly 0 (the loop is
# bound by memory: 0.15 ms for 65536 pixels).
@cached_njit(nogil=True)
def _merge_pixel_sums(frames, sums, squares, count, total, m2):  # pragma: no cover (numba)
    for i in range(frames.shape[0]):
        n_b = frames[i]
        if n_b == 0:
            continue
        s = sums[i]
        sum_b = np.float64(s)
        m2_b = np.float64(n_b * squares[i] - s * s) / n_b
        n_a = count[i]
        if n_a == 0:
            total[i] = sum_b
            m2[i] = m2_b
        else:
            delta = sum_b / n_b - total[i] / n_a
            total[i] += sum_b
            m2[i] += m2_b + delta * delta * (n_a * n_b / (n_a + n_b))
        count[i] = n_a + n_b
        frames[i] = 0
        sums[i] = 0
        squares[i] = 0


# Per block of pixels (their running sums, 2 x 64 KiB of int64, stay in L2), sum v and sum v**2 of the
# tile's 8- or 16-bit frames added in int64, four frames a pass: exact, and no float work a frame (a square
# of a 16-bit value is one 32 x 32 -> 64-bit multiply). The float moments are only touched when a block's
# integer sums are nearly full (more than INT_MOMENT_FRAMES - _SUMS_CHUNK frames, checked after the block's
# frames are added: checked before, with the merge's call ahead of the loop, the kernel took 1.3 us/frame
# more) or at the end of a partition (merge_pixel_sums_into); _pixel_moments merges once a tile (3 us of its
# 16 a frame at 32 frames a tile). Measured on 256x256 uint16, 32 frames a tile, through pixel_sums_into:
# 9.5-9.9 us/frame hot, 14.9-15.2 from the page cache, against 16.1-16.4 and 19.3-19.8 for _pixel_moments
# (the sum kernel 5.1-5.3 and 11.7-11.9), in the same process. Tried and dropped: sums and squares in
# uint32 lanes a tile and block (exact while a pixel's sum stays below 65537, else the block again in
# int64): 8.3-8.7 hot but 14.4-14.8 from the page cache against 13.8-14.2 for the same loop in int64;
# blocks of 2048 to 65536 pixels (8192-16384 best).
@cached_njit(nogil=True, fastmath=True)
def _pixel_sums(tile, frames, sums, squares, count, total, m2):  # pragma: no cover (numba)
    n, px = tile.shape
    for b in range(0, px, _MOMENT_BLOCK):
        k = min(_MOMENT_BLOCK, px - b)
        fr, s, q = frames[b:b + k], sums[b:b + k], squares[b:b + k]
        f = 0
        while f + 4 <= n:
            r0, r1 = tile[f, b:b + k], tile[f + 1, b:b + k]
            r2, r3 = tile[f + 2, b:b + k], tile[f + 3, b:b + k]
            for i in range(k):
                v0, v1 = np.int64(r0[i]), np.int64(r1[i])
                v2, v3 = np.int64(r2[i]), np.int64(r3[i])
                s[i] += (v0 + v1) + (v2 + v3)
                q[i] += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3)
            f += 4
        for f in range(f, n):
            row = tile[f, b:b + k]
            for i in range(k):
                v = np.int64(row[i])
                s[i] += v
                q[i] += v * v
        most = 0
        for i in range(k):
            fr[i] += n
            most = max(most, fr[i])
        if most > INT_MOMENT_FRAMES - _SUMS_CHUNK:
            _merge_pixel_sums(fr, s, q, count[b:b + k], total[b:b + k], m2[b:b + k])


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


#: Pixels a block of :func:`_sum_and_dot_row`'s products: 256 values of 16 bits times 0 or 1 sum to less than
#: 2**24, exactly in float32.
_DOT_BLOCK = 256


# SumUDF and a one-mask ApplyMasksUDF in one pass over a tile (run together by the run loop, see
# raytile.udf.fused_tiles): the sum's operations are those of _sum_frames; the products are summed in
# float32 per block of _DOT_BLOCK pixels and the blocks in float64, then rounded once into ``products``
# (exact for masks of 0s and 1s, as the products of runs). Each value is read once. Measured on 256x256
# uint16 32-frame tiles read from memory, in one process: 10.3 us a frame against 20.4 for _sum_frames and
# _dot_rows_by_frames one after the other (the sum alone 10.1: the product comes with the read); in live
# runs at 6,000 frames/s (bench_live.py) the run thread's CPU a frame went from 33-34 to 21-23 us (DECTRIS),
# 41-44 to 30-34 (Merlin R12), 40-44 to 27-30 (Merlin U16).
@cached_njit(nogil=True, fastmath=True)
def _sum_and_dot_row(tile, sums, mask, products):  # pragma: no cover (numba)
    n, px, f = tile.shape[0], sums.shape[0], 0
    while f + 4 <= n:
        t0 = t1 = t2 = t3 = 0.0
        for b in range(0, px, _DOT_BLOCK):
            e = min(b + _DOT_BLOCK, px)
            # slices, so that the loop counts from 0 (numba vectorises it; with b + i it did not)
            r0, r1, r2, r3 = tile[f, b:e], tile[f + 1, b:e], tile[f + 2, b:e], tile[f + 3, b:e]
            s, m = sums[b:e], mask[b:e]
            a0 = a1 = a2 = a3 = np.float32(0)
            for i in range(s.shape[0]):
                v0, v1, v2, v3 = np.float32(r0[i]), np.float32(r1[i]), np.float32(r2[i]), np.float32(r3[i])
                s[i] += (v0 + v1) + (v2 + v3)
                a0 += v0 * m[i]
                a1 += v1 * m[i]
                a2 += v2 * m[i]
                a3 += v3 * m[i]
            t0 += np.float64(a0)
            t1 += np.float64(a1)
            t2 += np.float64(a2)
            t3 += np.float64(a3)
        products[f] += t0
        products[f + 1] += t1
        products[f + 2] += t2
        products[f + 3] += t3
        f += 4
    for f in range(f, n):
        t0 = 0.0
        for b in range(0, px, _DOT_BLOCK):
            e = min(b + _DOT_BLOCK, px)
            r0, s, m = tile[f, b:e], sums[b:e], mask[b:e]
            a0 = np.float32(0)
            for i in range(s.shape[0]):
                v = np.float32(r0[i])
                s[i] += v
                a0 += v * m[i]
            t0 += np.float64(a0)
        products[f] += t0


def sum_and_dot_row_into(tile: np.ndarray, sums: np.ndarray, row: np.ndarray, products: np.ndarray) -> None:
    """``sums += tile.sum(axis=0)`` and ``products += tile @ row`` in one pass over ``tile``: ``tile``
    ``(frames, pixels)`` of 8- or 16-bit integers, ``sums`` ``(pixels,)``, ``row`` (one mask) ``(pixels,)``
    and ``products`` ``(frames,)`` float32. What :func:`sum_frames_into` and :func:`dot_rows_into` with one
    mask compute, for the cost of reading the tile once: the sums with the same operations, the products
    summed in float32 per block of 256 pixels and in float64 over the blocks, rounded once into
    ``products`` (exact for a mask of 0s and 1s)."""
    _check(tile, sums, "sum_and_dot_row_into")
    _check(tile, products, "sum_and_dot_row_into")
    px = tile.shape[1]
    if sums.shape != (px,) or row.shape != (px,) or products.shape != (tile.shape[0],):
        raise ValueError(f"sum_and_dot_row_into: tile {tile.shape}, sums {sums.shape}, row {row.shape} and "
                         f"products {products.shape} do not fit")
    if row.dtype != np.float32:
        raise ValueError(f"sum_and_dot_row_into: row must be float32, not {row.dtype}")
    _sum_and_dot_row(tile, sums, row, products)


def mask_spans(rows: np.ndarray) -> np.ndarray:
    """Where each of ``rows`` (``(n, pixels)`` float32 masks) is not zero, per block of pixels of
    :func:`dot_rows_into`: pass it as ``spans`` to calls with the same (unchanged) ``rows``, so that
    the masks are scanned once, not once a tile. (An array of ``(blocks, n, 2)`` ranges.)"""
    if not (isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.dtype == np.float32):
        raise ValueError(f"mask_spans: rows ({rows.dtype}, {rows.shape}) must be 2D float32")
    return _mask_spans(rows)


def dot_rows_into(tile: np.ndarray, rows: np.ndarray, out: np.ndarray, spans: np.ndarray | None = None) -> None:
    """``out += tile @ rows.T``: ``tile`` ``(frames, pixels)``, ``rows`` ``(n, pixels)`` float32 (one
    mask a row), ``out`` ``(frames, n)`` float32; each product is accumulated in float32 per block of
    2048 pixels, the blocks' sums in float64 (a tile of many frames a call: the masks' blocks are read
    once for all its frames). Pixels outside a mask's non-zero range in a block are skipped: ``spans``
    from :func:`mask_spans` of these ``rows`` (computed here if None)."""
    _check(tile, out, "dot_rows_into")
    if rows.ndim != 2 or rows.shape[1] != tile.shape[1] or out.shape != (tile.shape[0], rows.shape[0]):
        raise ValueError(f"dot_rows_into: tile {tile.shape}, rows {rows.shape} and out {out.shape} do not fit")
    if rows.dtype != np.float32:
        raise ValueError(f"dot_rows_into: rows must be float32, not {rows.dtype}")
    nb = -(-tile.shape[1] // _MASK_BLOCK)
    if spans is not None and (spans.shape != (nb, rows.shape[0], 2) or spans.dtype != np.int64):
        raise ValueError(f"dot_rows_into: spans ({spans.dtype}, {spans.shape}) are not mask_spans of rows "
                         f"{rows.shape}")
    if rows.shape[0] == 1:
        _dot_rows_by_frames(tile, rows, out)
    else:
        _dot_rows(tile, rows, mask_spans(rows) if spans is None else spans, out)


@dataclass(frozen=True)
class MaskRuns:
    """Masks as runs of pixels of one value, from :func:`mask_runs`: ``bounds`` ``(runs, 3)`` int64 rows of
    (first pixel, pixel after the last, mask), ordered by first pixel; ``values`` ``(runs,)`` float64, each
    run's value; ``shape`` the ``(masks, pixels)`` of the masks."""

    bounds: np.ndarray
    values: np.ndarray
    shape: tuple[int, int]


#: What a run costs :func:`sum_runs_into` beyond its pixels, in non-zero pixels, and what a pixel costs the
#: dense kernels, in the same unit, for one mask and per mask for several (dot_rows_into's register blocks
#: make each mask cheaper). Fitted to hot-cache times a frame on 256x256 uint16 (1 ring: runs 3.5 us,
#: dense 5.5; 16 adjacent rings: runs 11, dense with spans 23, 16 dense masks 40). Checked on nine more mask
#: sets, each kernel timed (disks of radius 128 and 60, 4 small disks, 3 wide rings, 64 and 128 radial bins
#: of 2 and 1 pixels, a half-frame rectangle, random masks of 30 % and 3 %): it picked the faster one in all.
_RUN_COST, _DENSE_ONE, _DENSE_EACH = 11, 0.75, 0.36


def runs_pay(nonzero: int, runs: int, masks: int, pixels: int) -> bool:
    """True if ``masks`` masks over ``pixels`` pixels, with ``nonzero`` non-zero pixels in all in ``runs``
    runs of one value, are multiplied faster as runs (:func:`sum_runs_into`) than densely
    (:func:`dot_rows_into`): virtual detectors (rings, disks, rectangles) yes; soft masks (a value a
    pixel) and scattered pixels (runs of one or two) no."""
    dense = pixels * (_DENSE_ONE if masks == 1 else _DENSE_EACH * masks)
    return runs > 0 and nonzero + _RUN_COST * runs < dense


def mask_runs(rows: np.ndarray) -> MaskRuns | None:
    """``rows`` (``(n, pixels)`` float32 masks) as :class:`MaskRuns` for :func:`sum_runs_into`, or None if
    the dense :func:`dot_rows_into` is faster for them (:func:`runs_pay`; all-zero masks go there too).
    Scans the masks once: call it once per (unchanged) ``rows``, not once a tile."""
    if not (isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.dtype == np.float32):
        raise ValueError(f"mask_runs: rows ({rows.dtype}, {rows.shape}) must be 2D float32")
    runs, nonzero = _count_runs(rows)
    if not runs_pay(int(nonzero), int(runs), rows.shape[0], rows.shape[1]):
        return None
    bounds = np.empty((runs, 3), np.int64)
    values = np.empty(runs, np.float64)
    _fill_runs(rows, bounds, values)
    order = np.lexsort((bounds[:, 2], bounds[:, 0]))
    return MaskRuns(np.ascontiguousarray(bounds[order]), values[order], (rows.shape[0], rows.shape[1]))


def sum_runs_into(tile: np.ndarray, runs: MaskRuns, out: np.ndarray) -> None:
    """``out += tile @ rows.T`` for the masks ``rows`` that ``runs`` (:func:`mask_runs`) describes: ``tile``
    ``(frames, pixels)`` of 8- or 16-bit integers, ``out`` ``(frames, n)`` float32. Each run's pixels are
    summed exactly in integers and times its value in float64; each product is rounded once into ``out``:
    exact for masks of integers while the products stay integers below 2**24."""
    _check(tile, out, "sum_runs_into")
    masks, pixels = runs.shape
    if out.shape != (tile.shape[0], masks) or tile.shape[1] != pixels:
        raise ValueError(f"sum_runs_into: tile {tile.shape} and out {out.shape} do not fit runs of "
                         f"{masks} masks of {pixels} pixels")
    _sum_runs(tile, runs.bounds, runs.values, out)


def sum_pixels_into(tile: np.ndarray, out: np.ndarray) -> None:
    """``out += tile.sum(axis=1)``: ``tile`` ``(frames, pixels)`` of 8- or 16-bit integers, ``out``
    ``(frames,)`` float32 or float64; each frame's sum is exact (int64) before it is added to ``out``."""
    if not (isinstance(tile, np.ndarray) and tile.ndim == 2 and tile.dtype.kind in "ui" and tile.dtype.itemsize <= 2
            and tile.flags.c_contiguous):
        raise ValueError(f"sum_pixels_into: tile ({tile.dtype}, {tile.shape}) must be 2D C-contiguous 8- or "
                         "16-bit integers")
    if not (out.dtype in (np.float32, np.float64) and out.shape == tile.shape[:1] and out.flags.c_contiguous):
        raise ValueError(f"sum_pixels_into: out ({out.dtype}, {out.shape}) must be C-contiguous float32 or "
                         f"float64 shaped ({tile.shape[0]},)")
    _sum_pixels(tile, out)


def multiply_frames_into(tile: np.ndarray, product: np.ndarray, fresh: bool, one_min: bool = True) -> bool:
    """``product *= prod(tile[f] - tile[f].min() + 1 for each frame f)`` per pixel (``=`` if ``fresh``):
    ``tile`` ``(frames, pixels)`` of 8- or 16-bit integers, at most :data:`PRODUCT_FRAMES` of them,
    ``product`` ``(pixels,)`` float64. ``log(product)`` is then the sum of the frames' logs to about
    float32 rounding (relative 1e-7: four terms are multiplied in float32 before they go into the
    float64 product), for up to :data:`PRODUCT_FRAMES` frames in all.

    ``one_min``: first try the one-pass kernel for frames that share the first frame's minimum (a
    counting detector's 0); from the first group of four frames where they do not, the two-pass kernel
    takes over (both give the same product, bit for bit). Returns False if the frames were seen not to
    share one minimum: a hint for the next tile's ``one_min``, so that data whose minima differ from
    frame to frame does not pay for a try on every tile."""
    if not (isinstance(tile, np.ndarray) and tile.ndim == 2 and tile.dtype.kind in "ui"
            and tile.dtype.itemsize <= 2 and tile.flags.c_contiguous):
        raise ValueError(f"multiply_frames_into: tile ({tile.dtype}, {tile.shape}) must be 2D C-contiguous "
                         "8- or 16-bit integers")
    if tile.shape[0] > PRODUCT_FRAMES:
        raise ValueError(f"multiply_frames_into: {tile.shape[0]} frames, a product holds {PRODUCT_FRAMES}")
    if not (product.dtype == np.float64 and product.shape == tile.shape[1:] and product.flags.c_contiguous):
        raise ValueError(f"multiply_frames_into: product ({product.dtype}, {product.shape}) must be C-contiguous "
                         f"float64 shaped {tile.shape[1:]}")
    if not tile.size:
        return True
    done = _multiply_frames_one_min(tile, product, bool(fresh)) if one_min else 0
    if done == tile.shape[0]:
        return True
    same = _multiply_frames(tile[done:], product, bool(fresh) and done == 0)
    return bool(same) and done in (0, tile.shape[0] - tile.shape[0] % 4)


def split_exponents_into(product: np.ndarray, exponents: np.ndarray) -> None:
    """``product = m * 2**e`` with ``1 <= m < 2``: ``product`` becomes ``m`` and ``exponents`` grows by ``e``,
    per value, exactly: a product of :func:`multiply_frames_into` (values >= 1, finite) can then take
    another :data:`PRODUCT_FRAMES` frames, and ``log(product) + exponents * log(2)`` is the log of all of
    them (LogsumUDF: one log per pixel per partition)."""
    if not (isinstance(product, np.ndarray) and product.dtype == np.float64 and product.ndim == 1
            and product.flags.c_contiguous):
        raise ValueError(f"split_exponents_into: product ({product.dtype}, {product.shape}) must be 1D "
                         "C-contiguous float64")
    if not (isinstance(exponents, np.ndarray) and exponents.dtype == np.int64 and exponents.shape == product.shape):
        raise ValueError(f"split_exponents_into: exponents ({exponents.dtype}, {exponents.shape}) must be int64 "
                         f"shaped {product.shape}")
    bad = _split_exponents(product, exponents)
    if bad:
        raise ValueError(f"split_exponents_into: {bad} product values are not finite and >= 1")


def frame_moments_into(tile: np.ndarray, weights: np.ndarray, xweights: np.ndarray, y0: int,
                       out: np.ndarray) -> None:
    """``out[f] += (sum(I * weights), sum((y0 + y) * I * weights), sum(I * xweights))`` for each frame ``I``
    of ``tile``: ``tile`` ``(frames, h, w)`` of a real dtype, ``weights`` and ``xweights`` ``(h, w)``
    float64 (a region, and the region times each pixel's x), ``out`` ``(frames, 3)`` float64.

    ``y0`` is the y of the tile's first row, so that a tile cut in the
    signal weighs its rows with their y in the whole frame.
    """
    if not is_real_tile(tile, 3):
        raise ValueError(f"frame_moments_into: tile ({tile.dtype}, {tile.shape}) must be a C-contiguous "
                         "3D array of integers or floats")
    for name, arr in (("weights", weights), ("xweights", xweights)):
        if not (isinstance(arr, np.ndarray) and arr.dtype == np.float64 and arr.shape == tile.shape[1:]
                and arr.flags.c_contiguous):
            raise ValueError(f"frame_moments_into: {name} ({arr.dtype}, {arr.shape}) must be C-contiguous "
                             f"float64 of the tile's frame shape {tile.shape[1:]}")
    if not (out.dtype == np.float64 and out.shape == (tile.shape[0], 3) and out.flags.c_contiguous):
        raise ValueError(f"frame_moments_into: out ({out.dtype}, {out.shape}) must be C-contiguous float64 "
                         f"shaped ({tile.shape[0]}, 3)")
    _frame_moments(tile, weights, xweights, int(y0), out)


def region_lanes(region: np.ndarray) -> np.ndarray | None:
    """``region`` as the lane masks :func:`region_moments_into` takes (int32, -1 inside, 0 outside), or
    None if ``region`` holds anything but 0s and 1s."""
    region = np.asarray(region)
    if region.ndim != 2 or not np.all((region == 0) | (region == 1)):
        return None
    return np.where(region == 1, np.int32(-1), np.int32(0)).astype(np.int32)


def region_moments_into(tile: np.ndarray, lanes: np.ndarray, y0: int, x0: int, out: np.ndarray) -> None:
    """:func:`frame_moments_into` for 8- or 16-bit frames and a region of 0s and 1s, exactly:
    ``lanes`` ``(h, w)`` from :func:`region_lanes`, ``(y0, x0)`` the tile's first pixel in the frame,
    ``out`` ``(frames, 3)`` float64 += (intensity, y moment, x moment) inside the region."""
    if not (is_real_tile(tile, 3) and tile.dtype.kind in "ui" and tile.dtype.itemsize <= 2):
        raise ValueError(f"region_moments_into: tile ({tile.dtype}, {tile.shape}) must be a C-contiguous 3D "
                         "array of 8- or 16-bit integers")
    if not (isinstance(lanes, np.ndarray) and lanes.dtype == np.int32 and lanes.shape == tile.shape[1:]
            and lanes.flags.c_contiguous):
        raise ValueError(f"region_moments_into: lanes ({lanes.dtype}, {lanes.shape}) must be C-contiguous int32 "
                         f"of the tile's frame shape {tile.shape[1:]}")
    if max(tile.shape[1:], default=0) >= 2**15:
        raise ValueError(f"region_moments_into: frames {tile.shape[1:]} too large for int32 row and column sums")
    if not (out.dtype == np.float64 and out.shape == (tile.shape[0], 3) and out.flags.c_contiguous):
        raise ValueError(f"region_moments_into: out ({out.dtype}, {out.shape}) must be C-contiguous float64 "
                         f"shaped ({tile.shape[0]}, 3)")
    _region_moments(tile, lanes, int(y0), int(x0), out)


def _check_pixel_arrays(name: str, px: int, arrays: tuple) -> None:
    for label, arr, dtype in arrays:
        if not (isinstance(arr, np.ndarray) and arr.dtype == dtype and arr.shape == (px,)
                and arr.flags.c_contiguous):
            raise ValueError(f"{name}: {label} ({getattr(arr, 'dtype', type(arr).__name__)}, "
                             f"{getattr(arr, 'shape', '?')}) must be C-contiguous {np.dtype(dtype)} shaped ({px},)")


def pixel_moments_into(tile: np.ndarray, count: np.ndarray, sums: np.ndarray, m2: np.ndarray) -> None:
    """Merge the frames of ``tile`` ``(frames, pixels)`` (a real dtype) into running per-pixel moments:
    ``count`` (int64) frames seen, ``sums`` (float64) their sum, ``m2`` (float64) their sum of squared
    deviations from the mean, all ``(pixels,)`` and updated in place.

    Pixels with ``count == 0`` take the tile's values. The result equals
    numpy's two-pass ``sum``/``var * n`` of all frames seen to float64
    rounding, also for data with a large offset (see the comment above
    ``_pixel_moments``).
    """
    if not is_real_tile(tile, 2):
        raise ValueError(f"pixel_moments_into: tile ({tile.dtype}, {tile.shape}) must be a C-contiguous "
                         "2D array of integers or floats")
    _check_pixel_arrays("pixel_moments_into", tile.shape[1],
                        (("count", count, np.int64), ("sums", sums, np.float64), ("m2", m2, np.float64)))
    if tile.shape[0]:
        _pixel_moments(tile, count, sums, m2)


def pixel_sums_into(tile: np.ndarray, frames: np.ndarray, sums: np.ndarray, squares: np.ndarray,
                    count: np.ndarray, total: np.ndarray, m2: np.ndarray) -> None:
    """Add the frames of ``tile`` ``(frames, pixels)`` of 8- or 16-bit integers to exact per-pixel integer
    sums: ``frames`` (frames held), ``sums`` (sum of the values) and ``squares`` (sum of their squares), all
    int64 ``(pixels,)``, in place.

    A pixel's integer sums hold :data:`INT_MOMENT_FRAMES` frames (start
    them at 0); where they come near that, they are merged into the float
    moments ``count`` (int64), ``total`` and ``m2`` (float64) as
    :func:`merge_pixel_sums_into` does. Call that at the end to have all
    frames in ``count``, ``total`` and ``m2`` (:func:`pixel_moments_into`'s
    running values, which the two functions share).
    """
    if not (is_real_tile(tile, 2) and tile.dtype.kind in "ui" and tile.dtype.itemsize <= 2):
        raise ValueError(f"pixel_sums_into: tile ({tile.dtype}, {tile.shape}) must be a C-contiguous 2D array "
                         "of 8- or 16-bit integers")
    px = tile.shape[1]
    _check_pixel_arrays("pixel_sums_into", px, (
        ("frames", frames, np.int64), ("sums", sums, np.int64), ("squares", squares, np.int64),
        ("count", count, np.int64), ("total", total, np.float64), ("m2", m2, np.float64)))
    for start in range(0, tile.shape[0], _SUMS_CHUNK):
        _pixel_sums(tile[start:start + _SUMS_CHUNK], frames, sums, squares, count, total, m2)


def merge_pixel_sums_into(frames: np.ndarray, sums: np.ndarray, squares: np.ndarray,
                          count: np.ndarray, total: np.ndarray, m2: np.ndarray) -> None:
    """Merge the integer sums of :func:`pixel_sums_into` into the running per-pixel float moments
    (``count`` frames, ``total`` their sum, ``m2`` their sum of squared deviations from the mean) and set
    them to 0. ``m2`` gains the integer frames' exact ``n * M2`` divided by ``n`` (two roundings) and
    their deviation from the running mean, by Chan et al.'s formula; sums stay exact below 2**53."""
    px = frames.shape[0] if isinstance(frames, np.ndarray) and frames.ndim == 1 else -1
    _check_pixel_arrays("merge_pixel_sums_into", px, (
        ("frames", frames, np.int64), ("sums", sums, np.int64), ("squares", squares, np.int64),
        ("count", count, np.int64), ("total", total, np.float64), ("m2", m2, np.float64)))
    _merge_pixel_sums(frames, sums, squares, count, total, m2)


def load_kernels() -> None:
    """Compile the kernels for uint8 and uint16 tiles, or load them from numba's on-disk cache.

    Worker actors call this when they start, with their other start-up
    imports, so that the first run's first tile does not wait for it (about
    0.2 s with the cache, 0.6 s without; the demo's first run was 0.1 s
    slower before). Other dtypes compile on first use.
    """
    mask_spans(np.zeros((1, 1), np.float32))
    _count_runs(np.ones((1, 1), np.float32))  # mask_runs' kernels (it calls the second only where runs pay)
    _fill_runs(np.ones((1, 1), np.float32), np.zeros((1, 3), np.int64), np.zeros(1))
    frames, sums, squares, count = (np.zeros(1, np.int64) for _ in range(4))
    for dtype in (np.uint8, np.uint16):
        tile = np.zeros((1, 1), dtype)
        sum_frames_into(tile, np.zeros(1, np.float32))
        sum_and_dot_row_into(tile, np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32))
        for masks in (1, 2):  # two kernels: one mask, several
            dot_rows_into(tile, np.zeros((masks, 1), np.float32), np.zeros((1, masks), np.float32))
        _sum_runs(tile, np.zeros((1, 3), np.int64), np.ones(1), np.zeros((1, 1), np.float32))
        frame_moments_into(tile.reshape(1, 1, 1), np.zeros((1, 1)), np.zeros((1, 1)), 0, np.zeros((1, 3)))
        region_moments_into(tile.reshape(1, 1, 1), np.zeros((1, 1), np.int32), 0, 0, np.zeros((1, 3)))
        sum_pixels_into(tile, np.zeros(1, np.float32))
        for one_min in (True, False):  # LogsumUDF's one-pass kernel, and the two-pass one it hands over to
            multiply_frames_into(tile, np.zeros(1), True, one_min=one_min)
        pixel_sums_into(tile, frames, sums, squares, count, np.zeros(1), np.zeros(1))  # StdDevUDF's exact sums
    split_exponents_into(np.ones(1), np.zeros(1, np.int64))
    merge_pixel_sums_into(frames, sums, squares, count, np.zeros(1), np.zeros(1))
