"""Integer detector frames summed and masked without a float copy of each tile (issue #21's bound).

The kernels of :mod:`raytile.udf.integer_tiles` against numpy in float64;
SumUDF and ApplyMasksUDF on integer data against numpy and against
LiberTEM's own results (same values, same result dtypes as LiberTEM, which
converts every tile to float32 first); the run reads integer tiles as they
are when SumUDF and ApplyMasksUDF are its UDFs, and falls back where the
kernels do not apply (sparse masks, tiles cut in the signal, shifts).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raytile.runtime.plan import input_dtype
from raytile.udf import UDF, ApplyMasksUDF, CoMUDF, LogsumUDF, StdDevUDF, SumSigUDF, SumUDF
from raytile.udf import integer_tiles
from raytile.udf.integer_tiles import (
    INT_MOMENT_FRAMES, dot_rows_into, frame_moments_into, is_integer_tile, load_kernels, merge_pixel_sums_into,
    multiply_frames_into, pixel_moments_into, pixel_sums_into, region_lanes, region_moments_into, split_exponents_into,
    sum_frames_into, sum_pixels_into,
)

SMALL_INTS = ["uint8", "int8", "uint16", "int16"]


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("frames", [1, 4, 7])  # the kernels take four frames a pass, then the rest
def test_kernels_match_numpy(rng, dtype, frames):
    info = np.iinfo(dtype)
    tile = rng.integers(info.min, info.max, size=(frames, 300), endpoint=True).astype(dtype)
    start = rng.integers(-1000, 1000, size=300).astype(np.float32)
    out = start.copy()
    sum_frames_into(tile, out)
    np.testing.assert_array_equal(out, start + tile.sum(axis=0, dtype=np.int64))  # integers: exact
    for masks in (1, 3, 9):  # one mask (its own kernel), fewer than four, four and more and a rest
        rows = rng.normal(size=(masks, 300)).astype(np.float32)
        prod = np.ones((frames, masks), np.float32)
        dot_rows_into(tile, rows, prod)
        ref = 1 + tile.astype(np.float64) @ rows.T.astype(np.float64)
        np.testing.assert_allclose(prod, ref, rtol=1e-5, atol=1e-3 * np.abs(ref).max())
    wide = rng.integers(0, 4000, size=(frames, 5000)).astype(dtype)  # more than one block of pixels
    rows = rng.random((6, 5000)).astype(np.float32)
    prod = np.zeros((frames, 6), np.float32)
    dot_rows_into(wide, rows, prod)
    ref = wide.astype(np.float64) @ rows.T.astype(np.float64)
    np.testing.assert_allclose(prod, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("out_dtype", ["float32", "float64"])
def test_frame_sums_and_logs_match_numpy(rng, dtype, out_dtype):
    info = np.iinfo(dtype)
    tile = rng.integers(info.min, info.max, size=(5, 300), endpoint=True).astype(dtype)
    tile[0, :2] = info.min, info.max  # the whole table: log(2**bits)
    sums = np.full(5, 3, out_dtype)
    sum_pixels_into(tile, sums)
    exact = tile.astype(np.int64).sum(axis=1) + 3
    np.testing.assert_array_equal(sums, exact.astype(out_dtype))  # the exact sum, rounded once
    f = tile.astype(np.float64)
    terms = f - f.min(axis=1, keepdims=True) + 1
    # four terms multiplied in float32 (rounded 3 times to 2**-24) before the float64 product
    for split in ([5], [1, 4], [2, 3], [1, 1, 1, 1, 1]):
        product = np.full(300, np.nan)
        start = 0
        for i, n in enumerate(split):
            multiply_frames_into(tile[start:start + n], product, fresh=i == 0)  # fresh: drops what was there
            start += n
        np.testing.assert_allclose(product, terms.prod(axis=0), rtol=4e-7)
        np.testing.assert_allclose(np.log(product), np.log(terms).sum(axis=0), rtol=1e-7, atol=4e-7)
    big = rng.integers(0, 2**16, size=(13, 40), endpoint=False).astype(np.uint16)  # chunks and groups of 4
    product = np.zeros(40)
    multiply_frames_into(big, product, fresh=True)
    wide = big.astype(np.float64)
    np.testing.assert_allclose(np.log(product), np.log(wide - wide.min(axis=1, keepdims=True) + 1).sum(axis=0),
                               rtol=1e-7)


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("frames", [1, 4, 7, 9])  # four frames a pass, then the rest
@pytest.mark.parametrize("pixels", [256, 700, 65536])  # runs of 256 pixels, then the rest
def test_frame_sums_are_exact(rng, dtype, frames, pixels):
    info = np.iinfo(dtype)
    tile = rng.integers(info.min, info.max, size=(frames, pixels), endpoint=True).astype(dtype)
    tile[0] = info.max  # every run at the top (and the bottom): the int32 run sums' extremes
    tile[-1, :pixels // 2] = info.min
    for out_dtype in ("float64", "float32"):
        sums = np.full(frames, -5, out_dtype)
        sum_pixels_into(tile, sums)
        exact = tile.astype(np.int64).sum(axis=1) - 5
        np.testing.assert_array_equal(sums, exact.astype(out_dtype))  # the exact sum, rounded once


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("frames", [1, 3, 4, 5, 8, 9, 13])
def test_products_over_blocks_and_chunks_match_numpy(rng, dtype, frames):
    # 2500 pixels: three blocks, the last short; each frame's minimum sits in another block (the minima of
    # the next four frames are found block by block while the products of the four before are taken)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -3000), min(info.max, 3000)
    tile = rng.integers(lo, hi, size=(frames, 2500), endpoint=True).astype(dtype)
    for f in range(frames):
        tile[f, (f * 977) % 2500] = info.min
    wide = tile.astype(np.float64)
    terms = wide - wide.min(axis=1, keepdims=True) + 1
    start = rng.integers(1, 5, size=2500).astype(np.float64)
    for fresh in (True, False):
        product = start.copy()
        multiply_frames_into(tile, product, fresh=fresh)
        want = terms.prod(axis=0) * (1 if fresh else start)
        np.testing.assert_allclose(product, want, rtol=4e-7)


def test_split_exponents_are_exact_and_refuse_what_is_no_product(rng):
    product = np.exp(rng.uniform(0, 700, size=1000))
    product[:4] = 1.0, 2.0, np.nextafter(2.0, 0), 2.0**1000 * 1.5  # both ends of a binade, a large power
    m, e = np.frexp(product)
    exponents = np.full(1000, 7, np.int64)
    split = product.copy()
    split_exponents_into(split, exponents)
    np.testing.assert_array_equal(split, 2 * m)  # [1, 2)
    np.testing.assert_array_equal(exponents, 7 + e - 1)
    np.testing.assert_array_equal(split * 2.0 ** (exponents - 7), product)  # exact
    for bad in (0.5, np.inf, np.nan, -2.0, 0.0):
        with pytest.raises(ValueError, match="split_exponents_into"):
            split_exponents_into(np.array([2.0, bad]), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="exponents"):
        split_exponents_into(np.ones(3), np.zeros(3, np.int32))


def test_products_of_as_many_frames_as_promised_stay_finite():
    top = np.array([0, 65535], np.uint16)  # terms 1 and 2**16, the largest a 16-bit frame gives
    product = np.empty(2)
    multiply_frames_into(np.tile(top, (integer_tiles.PRODUCT_FRAMES, 1)), product, fresh=True)
    assert np.isfinite(product).all()
    np.testing.assert_allclose(np.log(product), [0.0, integer_tiles.PRODUCT_FRAMES * np.log(2.0**16)], rtol=1e-14)



def _shared_minimum_tile(rng, dtype, frames, pixels, low):
    """Frames of ``dtype`` whose minimum is ``low`` in every frame (each at another pixel), the rest above."""
    info = np.iinfo(dtype)
    tile = rng.integers(low, info.max, size=(frames, pixels), endpoint=True).astype(dtype)
    for f in range(frames):
        tile[f, (f * 977 + 3) % pixels] = low
    return tile


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("frames", [1, 3, 4, 5, 8, 13, 60, 63])  # groups of four, rests, a whole flush
@pytest.mark.parametrize("pixels", [1, 7, 2500])  # one pixel, less than a block, three blocks
def test_one_pass_products_equal_the_two_pass_kernel_bit_for_bit(rng, dtype, frames, pixels):
    info = np.iinfo(dtype)
    lows = sorted({info.min, 0, info.max - info.max // 8, info.max})  # 0, large, the top, negatives (int)
    for low in lows:
        tile = _shared_minimum_tile(rng, dtype, frames, pixels, low)
        if low == info.max:  # constant frames at the top: every term is 1
            tile[:] = low
        elif frames > 1:
            tile[frames - 1, : pixels // 2] = info.max  # terms up to 2**bits
            tile[frames - 1, ((frames - 1) * 977 + 3) % pixels] = low
        wide = tile.astype(np.float64)
        terms = wide - wide.min(axis=1, keepdims=True) + 1
        for fresh in (True, False):
            start = rng.integers(1, 5, size=pixels).astype(np.float64)
            one, two = start.copy(), start.copy()
            assert multiply_frames_into(tile, one, fresh=fresh) is True  # one minimum: the hint says so
            multiply_frames_into(tile, two, fresh=fresh, one_min=False)
            np.testing.assert_array_equal(one, two)  # same roundings in the same order
            want = terms.prod(axis=0) * (1 if fresh else start)
            if frames <= 13:  # (as test_products_over_blocks_and_chunks_match_numpy)
                np.testing.assert_allclose(one, want, rtol=4e-7)
            # (as test_frame_sums_and_logs_match_numpy; 60 frames are rounded 45 times, to 7e-7 relative)
            np.testing.assert_allclose(np.log(one), np.log(want), rtol=1e-7, atol=4e-7)
        product = np.empty(pixels)  # the one-pass kernel took every group of four
        assert integer_tiles._multiply_frames_one_min(tile, product, True) == frames - frames % 4


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("odd", [0, 1, 4, 6, 9, 12])  # the frame whose minimum differs: in the first group,
def test_one_pass_products_hand_over_where_a_minimum_differs(rng, dtype, odd):  # a later one, the rest
    info = np.iinfo(dtype)
    tile = _shared_minimum_tile(rng, dtype, 13, 2500, max(info.min, -20))
    tile[odd] = np.maximum(tile[odd], tile[odd].min() + 3)  # its minimum 3 above the others'
    if odd == 6:
        tile[odd, 100] = info.min  # or below them (int8/int16: below -20; uint: the same 0, so no hand-over)
    wide = tile.astype(np.float64)
    terms = wide - wide.min(axis=1, keepdims=True) + 1
    shared = len(set(tile.min(axis=1).tolist())) == 1
    product = np.empty(2500)
    done = integer_tiles._multiply_frames_one_min(tile, product, True)
    assert done == (12 if shared else 4 * (odd // 4) if odd < 12 else 12)  # the groups before the odd frame
    for fresh in (True, False):
        start = rng.integers(1, 5, size=2500).astype(np.float64)
        one, two = start.copy(), start.copy()
        hint = multiply_frames_into(tile, one, fresh=fresh)
        assert hint is (shared or odd == 12)  # (the rest's frames are only compared with each other)
        multiply_frames_into(tile, two, fresh=fresh, one_min=False)
        np.testing.assert_array_equal(one, two)
        np.testing.assert_allclose(one, terms.prod(axis=0) * (1 if fresh else start), rtol=4e-7)
    assert multiply_frames_into(tile[:8], np.empty(2500), True, one_min=False) is (shared or odd >= 8)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int16"])
def test_logsum_of_shared_and_changing_minima_equals_numpy(ctx, rng, dtype):
    # a counting detector's frames (0 in every frame: the one-pass path), then frames whose minima differ
    # (the two-pass path, and back once a tile shares one minimum again); 1-frame tiles at the end
    info = np.iinfo(dtype)
    low = -7 if info.min < 0 else 0
    data = rng.integers(low, min(info.max, 70000), size=(12, 25, 9, 11), endpoint=True).astype(dtype)
    data[..., 4, 5] = low
    data[3:5] = np.maximum(data[3:5], low + rng.integers(1, 5, size=(2, 25, 1, 1)).astype(dtype))
    data[0, 0, 0, :2] = low, info.max  # the widest terms
    data[7] = info.max  # constant frames
    roi = rng.random((12, 25)) > 0.2
    ds = ctx.load("memory", data=data, num_partitions=3)
    for sel in (None, roi):
        res = ctx.run_udf(dataset=ds, udf=LogsumUDF(), roi=sel)
        frames = data[sel if sel is not None else np.ones((12, 25), bool)].astype(np.float64)
        want = np.log(frames - frames.min(axis=(1, 2), keepdims=True) + 1).sum(axis=0)
        np.testing.assert_allclose(res["logsum"].data, want, rtol=1e-5)
    single = ctx.load("memory", data=data[:2], num_partitions=2, tileshape=(1, 9, 11))  # 1-frame tiles
    res = ctx.run_udf(dataset=single, udf=LogsumUDF())
    frames = data[:2].reshape(-1, 9, 11).astype(np.float64)
    want = np.log(frames - frames.min(axis=(1, 2), keepdims=True) + 1).sum(axis=0)
    np.testing.assert_allclose(res["logsum"].data, want, rtol=1e-5)


REAL = ["uint8", "uint16", "int16", "uint32", "int64", "float32", "float64"]


def _frames(rng, dtype, shape):
    if np.dtype(dtype).kind == "f":
        return (1e6 + rng.normal(0, 3, size=shape)).astype(dtype)  # a large offset: cancellation shows
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -2**40), min(info.max, 2**40), size=shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("frames", [1, 4, 6])
def test_frame_moments_match_numpy(rng, dtype, frames):
    tile = _frames(rng, dtype, (frames, 5, 7))
    region = rng.random((5, 7)) * (rng.random((5, 7)) > 0.3)
    xregion = region * np.arange(7)
    out = np.ones((frames, 3))
    frame_moments_into(tile, region, xregion, 3, out)
    f = tile.astype(np.float64)
    ys = (3 + np.arange(5))[:, None]
    ref = 1 + np.stack([(f * region).sum(axis=(1, 2)), (f * region * ys).sum(axis=(1, 2)),
                        (f * xregion).sum(axis=(1, 2))], axis=1)
    np.testing.assert_allclose(out, ref, rtol=1e-12)


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("frames", [1, 3, 4, 9])  # four frames a pass, then the rest one by one
def test_region_moments_are_exact(rng, dtype, frames):
    info = np.iinfo(dtype)
    tile = rng.integers(info.min, info.max, size=(frames, 40, 37), endpoint=True).astype(dtype)
    tile[-1, :3] = info.max  # whole rows at the extremes: row and column sums far from 0
    tile[0, 3:6] = info.min
    region = (rng.random((40, 37)) > 0.4).astype(np.float64)
    region[:3] = 1
    for weights in (region, np.ones_like(region)):
        out = np.full((frames, 3), 2.0)
        region_moments_into(tile, region_lanes(weights), 5, 7, out)
        v = tile.astype(np.int64) * weights.astype(np.int64)  # exact integers
        y, x = np.mgrid[5:45, 7:44]
        ref = np.stack([v.sum(axis=(1, 2)), (v * y).sum(axis=(1, 2)), (v * x).sum(axis=(1, 2))], axis=1) + 2
        np.testing.assert_array_equal(out, ref.astype(np.float64))


def test_region_moments_of_wide_frames_at_the_top_of_uint16_are_exact():
    # 2000 x 2000 pixels of 65535: each row sum and column sum (1.3e8) near int32's range, still exact
    tile = np.full((5, 2000, 2000), 65535, np.uint16)
    tile[1, ::3, ::7] = 0
    out = np.zeros((5, 3))
    region_moments_into(tile, region_lanes(np.ones((2000, 2000))), 1, 2, out)
    v = tile.astype(np.int64)
    y, x = np.mgrid[1:2001, 2:2002]
    ref = np.stack([v.sum(axis=(1, 2)), (v * y).sum(axis=(1, 2)), (v * x).sum(axis=(1, 2))], axis=1)
    np.testing.assert_array_equal(out, ref.astype(np.float64))


def test_region_lanes_only_for_zeros_and_ones():
    assert region_lanes(np.array([[0.0, 1.0], [1.0, 0.5]])) is None
    assert region_lanes(np.ones(3)) is None  # not 2D
    np.testing.assert_array_equal(region_lanes(np.array([[0.0, 1.0]])), [[0, -1]])


@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("split", [(9,), (1, 8), (4, 1, 4), (6, 3)])  # tiles of these depths, in turn
def test_pixel_moments_match_numpy(rng, dtype, split):
    data = _frames(rng, dtype, (9, 300))
    count, sums, m2 = np.zeros(300, np.int64), np.zeros(300), np.zeros(300)
    start = 0
    for depth in split:
        pixel_moments_into(data[start:start + depth], count, sums, m2)
        start += depth
    f = data.astype(np.float64)
    assert np.all(count == 9)
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(sums, f.sum(axis=0), rtol=1e-14)
    else:  # integer sums below 2**53: exact
        np.testing.assert_array_equal(sums, data.astype(object).sum(axis=0).astype(np.float64))
    np.testing.assert_allclose(m2 / 9, f.var(axis=0), rtol=1e-9)


@pytest.mark.parametrize("dtype", ["uint16", "float64"])
def test_pixel_moments_merge_into_pixels_that_saw_different_frames(rng, dtype):
    # running values where the pixels have seen 0, 3 or 5 frames (within one block of pixels and across
    # blocks), then a tile of 6 frames for all: per pixel the moments of all its frames
    px = 20000  # blocks of 8192 pixels: two whole ones and a short one
    before = _frames(rng, dtype, (5, px)).astype(np.float64)
    seen = np.where(np.arange(px) % 3 == 0, 0, np.where(np.arange(px) < 13000, 3, 5))
    seen[8192:16384] = 3  # one block where all pixels have seen the same frames
    count = seen.astype(np.int64)
    sums = np.array([before[:c, j].sum() for j, c in enumerate(seen)])
    m2 = np.array([((before[:c, j] - before[:c, j].mean()) ** 2).sum() if c else 0.0 for j, c in enumerate(seen)])
    tile = _frames(rng, dtype, (6, px))
    pixel_moments_into(tile, count, sums, m2)
    np.testing.assert_array_equal(count, seen + 6)
    for j in range(0, px, 7):
        frames = np.concatenate([before[:seen[j], j], tile[:, j].astype(np.float64)])
        np.testing.assert_allclose(sums[j], frames.sum(), rtol=1e-14)
        np.testing.assert_allclose(m2[j], ((frames - frames.mean()) ** 2).sum(), rtol=1e-9)


def test_pixel_moments_keep_nan_and_merge_into_running_values(rng):
    data = rng.normal(5, 2, size=(8, 6))
    data[3, 2] = np.nan  # fastmath must not assume NaN away: numpy gives NaN for that pixel
    count, sums, m2 = np.zeros(6, np.int64), np.zeros(6), np.zeros(6)
    pixel_moments_into(data[:5], count, sums, m2)
    pixel_moments_into(data[5:], count, sums, m2)
    assert np.isnan(m2[2]) and np.isnan(sums[2])
    keep = np.arange(6) != 2
    np.testing.assert_allclose(m2[keep] / 8, data[:, keep].var(axis=0), rtol=1e-12)
    np.testing.assert_allclose(sums[keep], data[:, keep].sum(axis=0), rtol=1e-14)



def _pixel_sums_state(px):
    """(frames, sums, squares) int64 and (count, total, m2) for :func:`pixel_sums_into`, all zero."""
    return tuple(np.zeros(px, np.int64) for _ in range(4)) + (np.zeros(px), np.zeros(px))


def _exact_moments(frames):
    """Per pixel: the sum (exact) and n * M2 (exact) of integer ``frames``, as Python integers."""
    ints = frames.astype(object)
    n = frames.shape[0]
    s = ints.sum(axis=0)
    return s, n * (ints * ints).sum(axis=0) - s * s


def _assert_moments(count, total, m2, frames):
    """count, total and m2 are those of ``frames`` (integers): sums exact, M2 within two roundings."""
    n = frames.shape[0]
    s, nm2 = _exact_moments(frames)
    assert np.all(count == n)
    np.testing.assert_array_equal(total, s.astype(np.float64))
    want = (nm2.astype(np.float64) / n)
    np.testing.assert_allclose(m2, want, rtol=4e-16, atol=0)
    np.testing.assert_allclose(m2 / n, frames.astype(np.float64).var(axis=0), rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("split", [(1,), (4,), (9,), (1, 8), (4, 1, 4), (6, 3), (1, 1, 1, 1, 1, 1, 1, 1, 1)])
def test_pixel_sums_match_numpy(rng, dtype, split):
    # 20001 pixels: two whole blocks of 8192 and a short one, an odd count; tiles of 1 frame, of a multiple
    # of four frames and of others (four frames a pass, then the rest)
    info = np.iinfo(dtype)
    data = rng.integers(info.min, info.max, size=(sum(split), 20001), endpoint=True).astype(dtype)
    data[:, :50] = info.max  # a constant pixel at the top of the dtype: M2 exactly 0
    data[:, 50:100] = info.min
    data[:, 100] = info.max * (np.arange(sum(split)) % 2)  # the largest spread there is
    state = _pixel_sums_state(20001)
    start = 0
    for depth in split:
        pixel_sums_into(data[start:start + depth], *state)
        start += depth
    frames, sums, squares, count, total, m2 = state
    assert np.all(frames == sum(split)) and np.all(count == 0)  # nothing merged yet
    np.testing.assert_array_equal(sums, data.astype(np.int64).sum(axis=0))
    np.testing.assert_array_equal(squares, (data.astype(np.int64) ** 2).sum(axis=0))
    merge_pixel_sums_into(*state)
    assert not frames.any() and not sums.any() and not squares.any()  # ready for the next frames
    _assert_moments(count, total, m2, data)
    assert np.all(m2[:100] == 0.0)


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_pixel_sums_merge_into_running_moments_of_other_frames(rng, dtype):
    # float moments from pixel_moments_into (0, 3 or 5 frames per pixel), then integer sums of 6 more frames,
    # merged: the moments of all frames of each pixel
    px = 20000
    info = np.iinfo(dtype)
    data = rng.integers(info.max - 300, info.max, size=(11, px), endpoint=True).astype(dtype)
    seen = np.where(np.arange(px) % 3 == 0, 0, np.where(np.arange(px) < 13000, 3, 5))
    state = _pixel_sums_state(px)
    frames, sums, squares, count, total, m2 = state
    for c in (3, 5):
        part = seen == c
        sub = (np.zeros(part.sum(), np.int64), np.zeros(part.sum()), np.zeros(part.sum()))
        pixel_moments_into(np.ascontiguousarray(data[:c, part]), *sub)
        count[part], total[part], m2[part] = sub
    pixel_sums_into(data[5:], *state)
    merge_pixel_sums_into(*state)
    np.testing.assert_array_equal(count, seen + 6)
    for j in range(0, px, 7):
        f = np.concatenate([data[:seen[j], j], data[5:, j]]).astype(np.float64)
        assert total[j] == f.sum()  # integers: exact
        np.testing.assert_allclose(m2[j], ((f - f.mean()) ** 2).sum(), rtol=1e-12)


def test_pixel_sums_of_many_frames_at_the_top_of_uint16_stay_exact():
    # more frames than the integer sums hold (they are merged on the way) in tiles deeper than a kernel call
    # takes, values at the top of uint16: n * sum(v**2) near 2**62 before each merge
    n = INT_MOMENT_FRAMES + 9000
    data = np.full((n, 3), 65535, np.uint16)
    data[::3, 1] = 65534
    data[1::2, 2] = 0
    state = _pixel_sums_state(3)
    frames, sums, squares, count, total, m2 = state
    for start in range(0, n, 10000):
        pixel_sums_into(data[start:start + 10000], *state)
        assert frames.max() <= INT_MOMENT_FRAMES
    assert count.max() > 0  # merged on the way
    merge_pixel_sums_into(*state)
    np.testing.assert_array_equal(count, [n] * 3)
    f = data.astype(np.float64)
    np.testing.assert_array_equal(total, f.sum(axis=0))
    assert m2[0] == 0.0  # constant: exactly 0
    np.testing.assert_allclose(m2 / n, f.var(axis=0), rtol=1e-12)


def test_pixel_sums_refuse_what_they_do_not_do():
    state = _pixel_sums_state(4)
    for bad in (np.zeros((2, 4), np.uint32), np.zeros((2, 4), np.float32), np.zeros((2, 8), np.uint16)[:, ::2]):
        with pytest.raises(ValueError, match="8- or 16-bit"):
            pixel_sums_into(bad, *state)
    with pytest.raises(ValueError, match="squares"):
        pixel_sums_into(np.zeros((2, 4), np.uint16), *state[:2], np.zeros(4), *state[3:])
    with pytest.raises(ValueError, match="total"):
        pixel_sums_into(np.zeros((2, 4), np.uint16), *state[:4], np.zeros(5), state[5])
    with pytest.raises(ValueError, match="frames"):
        merge_pixel_sums_into([0, 0, 0, 0], *state[1:])
    with pytest.raises(ValueError, match="m2"):
        merge_pixel_sums_into(*state[:5], np.zeros(4, np.float32))


def test_load_kernels_readies_the_detector_dtypes_as_runs_call_them():
    load_kernels()
    ready = {(str(sig[0].dtype), sig[0].layout, str(sig[1].dtype), sig[1].layout)
             for sig in integer_tiles._sum_frames.signatures}
    assert {("uint8", "C", "float32", "C"), ("uint16", "C", "float32", "C")} <= ready
    for kernel in (integer_tiles._dot_rows, integer_tiles._dot_rows_by_frames):
        ready = {str(sig[0].dtype) for sig in kernel.signatures if sig[1].layout == "C"}
        assert {"uint8", "uint16"} <= ready
    for kernel in (integer_tiles._frame_moments, integer_tiles._sum_pixels, integer_tiles._multiply_frames,
                   integer_tiles._multiply_frames_one_min, integer_tiles._region_moments, integer_tiles._pixel_sums):
        ready = {str(sig[0].dtype) for sig in kernel.signatures
                 if all(a.layout == "C" for a in sig if hasattr(a, "layout"))}
        assert {"uint8", "uint16"} <= ready
    assert ("float64", "C") in {(str(sig[0].dtype), sig[0].layout) for sig in integer_tiles._split_exponents.signatures}


def test_kernels_refuse_what_they_do_not_do():
    tile = np.zeros((2, 4), np.uint16)
    with pytest.raises(ValueError, match="does not fit"):
        sum_frames_into(tile, np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="float32"):
        sum_frames_into(tile, np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="16-bit"):
        sum_frames_into(tile.astype(np.int32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="rows must be float32"):
        dot_rows_into(tile, np.zeros((1, 4), np.float64), np.zeros((2, 1), np.float32))
    with pytest.raises(ValueError, match="do not fit"):
        dot_rows_into(tile, np.zeros((1, 5), np.float32), np.zeros((2, 1), np.float32))
    with pytest.raises(ValueError, match="16-bit"):
        sum_pixels_into(tile.astype(np.int32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="shaped"):
        sum_pixels_into(tile, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="16-bit"):
        multiply_frames_into(tile.astype(np.float32), np.zeros(4), True)
    with pytest.raises(ValueError, match="shaped"):
        multiply_frames_into(tile, np.zeros(2), True)
    with pytest.raises(ValueError, match="a product holds 63"):
        multiply_frames_into(np.zeros((64, 4), np.uint16), np.zeros(4), True)
    with pytest.raises(ValueError, match="C-contiguous 3D"):
        frame_moments_into(tile, np.zeros((2, 4)), np.zeros((2, 4)), 0, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="xweights"):
        frame_moments_into(tile.reshape(2, 2, 2), np.zeros((2, 2)), np.zeros((2, 3)), 0, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="out"):
        frame_moments_into(tile.reshape(2, 2, 2), np.zeros((2, 2)), np.zeros((2, 2)), 0, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="8- or 16-bit"):
        region_moments_into(tile.reshape(2, 2, 2).astype(np.float32), np.zeros((2, 2), np.int32), 0, 0,
                            np.zeros((2, 3)))
    with pytest.raises(ValueError, match="lanes"):
        region_moments_into(tile.reshape(2, 2, 2), np.zeros((2, 2), np.int64), 0, 0, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="C-contiguous 2D"):
        pixel_moments_into(tile.astype(np.complex64), np.zeros(4, np.int64), np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match="count"):
        pixel_moments_into(tile, np.zeros(4), np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match="m2"):
        pixel_moments_into(tile, np.zeros(4, np.int64), np.zeros(4), np.zeros(8)[::2])
    assert not is_integer_tile(tile.astype(np.float32), np.float32)
    assert not is_integer_tile(tile[:, ::2], np.float32)  # not contiguous
    assert not is_integer_tile(tile, np.float64)


class TileCounter(UDF):
    """Counts the tiles it gets: in float32 (the default preference) unless ``native``; with ``small``, tiles
    of two frames cut in the signal (the sum's result view per tile is then not contiguous)."""

    def __init__(self, native: bool = False, small: bool = False):
        super().__init__(native=native, small=small)

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE if self.params.native else super().get_preferred_input_dtype()

    def get_tiling_preferences(self):
        return {"depth": 2, "total_size": 64} if self.params.small else super().get_tiling_preferences()

    def get_result_buffers(self):
        return {"n": self.buffer(kind="single", dtype="int64")}

    def process_tile(self, tile):
        self.results.n[:] += 1

    def merge(self, dest, src):
        dest.n[:] += src.n


def _ring(sig):
    y, x = np.indices(sig)
    r = np.hypot(y - sig[0] / 2, x - sig[1] / 2)
    return (r >= 3) & (r < 7)  # bool, as users' masks often are


def test_sum_and_masks_read_integer_frames_as_they_are(inline_ctx):
    masks = ApplyMasksUDF(mask_factories=[lambda: _ring((16, 16))])
    assert input_dtype([SumUDF(), masks], np.uint16) == np.uint16
    assert input_dtype([SumUDF(), masks, TileCounter()], np.uint16) == np.float32  # a float UDF still gets float32
    shifted = ApplyMasksUDF(mask_factories=[lambda: _ring((16, 16))], shifts=(1, 0))
    assert input_dtype([shifted], np.uint16) == np.float32
    assert input_dtype([ApplyMasksUDF(mask_factories=[lambda: _ring((16, 16))], preferred_dtype=np.int64)],
                       np.uint16) == np.int64
    assert input_dtype([SumUDF(), StdDevUDF(), CoMUDF.with_params(r=5.0), SumSigUDF(), LogsumUDF()],
                       np.uint16) == np.uint16


@pytest.mark.parametrize("dtype", ["uint16", "uint8", "int32"])
@pytest.mark.parametrize("mask_kind", ["bool", "float32", "float64", "csr"])
def test_integer_data_equals_numpy(inline_ctx, rng, dtype, mask_kind):
    check_integer_data(inline_ctx, rng, dtype, mask_kind)


@pytest.mark.ray
def test_integer_data_on_ray_equals_numpy(ray_context, rng):
    check_integer_data(ray_context, rng, "uint16", "bool")


def check_integer_data(ctx, rng, dtype, mask_kind):
    sig = (16, 16)
    # values near the top of uint16: products that would overflow if multiplied in the data's dtype
    data = rng.integers(0, 60000 if dtype == "uint16" else 200, size=(6, 5) + sig).astype(dtype)
    ring = _ring(sig)
    second = rng.random(sig) * (rng.random(sig) > 0.7)
    factories = {
        "bool": [lambda: ring],
        "float32": [lambda: ring.astype(np.float32), lambda: second.astype(np.float32)],
        "float64": [lambda: ring.astype(np.float64), lambda: second],
        "csr": [lambda: sp.csr_matrix(ring.reshape(1, -1).astype(np.float32))],
    }[mask_kind]
    ds = ctx.load("memory", data=data, num_partitions=3)
    sums, products = ctx.run_udf(dataset=ds, udf=[SumUDF(), ApplyMasksUDF(mask_factories=factories)])
    flat = data.reshape(-1, 256).astype(np.float64)
    stack = np.stack([np.asarray(f().todense() if sp.issparse(f()) else f(), np.float64).reshape(-1)
                      for f in factories])
    want_dtype = np.result_type(np.float32, dtype, "float64" if mask_kind == "float64" else "float32")
    assert products["intensity"].data.dtype == want_dtype  # as LiberTEM: float32 tiles times the masks
    assert sums["intensity"].data.dtype == np.result_type(dtype, np.float32)
    rtol = 1e-6 if want_dtype == np.float32 else 1e-12
    np.testing.assert_allclose(products["intensity"].data.reshape(-1, len(factories)), flat @ stack.T, rtol=rtol)
    np.testing.assert_allclose(sums["intensity"].data, flat.sum(axis=0).reshape(sig), rtol=rtol)


def test_signal_tiles_and_roi_fall_back_exactly(inline_ctx, rng):
    data = rng.integers(0, 4000, size=(4, 5, 16, 16)).astype(np.uint16)
    roi = rng.random((4, 5)) > 0.4
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    ring = _ring((16, 16))
    sums, products, tiles = inline_ctx.run_udf(
        dataset=ds, udf=[SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring]),
                                      TileCounter(native=True, small=True)], roi=roi)
    assert tiles["n"].data > roi.sum()  # several tiles a frame: the signal was cut
    picked = data[roi].reshape(-1, 256).astype(np.float64)
    np.testing.assert_array_equal(sums["intensity"].data, picked.sum(axis=0).reshape(16, 16))
    np.testing.assert_allclose(products["intensity"].raw_data[:, 0], picked @ ring.reshape(-1), rtol=1e-6)


def test_integer_results_equal_libertem(rng):
    import libertem.api as lt
    from libertem.udf.masks import ApplyMasksUDF as LtApplyMasksUDF
    from libertem.udf.sum import SumUDF as LtSumUDF

    import raytile as rt

    data = rng.integers(0, 50000, size=(5, 6, 24, 20)).astype(np.uint16)
    ring = _ring((24, 20))
    lt_ctx = lt.Context.make_with("inline")
    rt_ctx = rt.Context(executor="inline")
    try:
        lt_ds = lt_ctx.load("memory", data=data, num_partitions=3)
        want_sum, want_masks = lt_ctx.run_udf(dataset=lt_ds, udf=[LtSumUDF(), LtApplyMasksUDF(mask_factories=[lambda: ring])])
        rt_ds = rt_ctx.load("memory", data=data, num_partitions=3)
        got_sum, got_masks = rt_ctx.run_udf(dataset=rt_ds, udf=[SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring])])
    finally:
        lt_ctx.close()
        rt_ctx.close()
    assert got_masks["intensity"].data.dtype == want_masks["intensity"].data.dtype
    assert got_sum["intensity"].data.dtype == want_sum["intensity"].data.dtype
    np.testing.assert_allclose(got_masks["intensity"].data, want_masks["intensity"].data, rtol=1e-6)
    np.testing.assert_array_equal(got_sum["intensity"].data, want_sum["intensity"].data)  # integers < 2**24


def test_whole_frames_is_asked_for_by_frame_udfs_and_tile_udfs_that_say_so():
    from raytile.io.negotiator import wants_whole_frames

    assert wants_whole_frames("frame", {})
    assert wants_whole_frames("tile", {"whole_frames": True, "depth": 4})
    assert not wants_whole_frames("tile", {"depth": 4})
    assert not wants_whole_frames("tile", {"whole_frames": False})
    assert not wants_whole_frames("partition", {"whole_frames": True})  # whole partitions anyway


def test_logsum_gets_tiles_of_whole_frames(inline_ctx):
    from raytile.io.negotiator import Negotiator

    data = np.zeros((4, 50, 64, 64), np.uint16)
    part = inline_ctx.load("memory", data=data, num_partitions=2).get_partitions()[0]
    small = TileCounter(native=True, small=True)
    assert LogsumUDF().get_method() == "tile"
    scheme = Negotiator().get_scheme([LogsumUDF()], part, np.dtype("uint16"))
    assert scheme.sig_shape == (64, 64) and scheme.depth > 1  # whole frames, several a call
    # with a UDF that asks for 64-byte tiles: still whole frames (one a tile: its byte budget)
    assert Negotiator().get_scheme([small, LogsumUDF()], part, np.dtype("uint16")).sig_shape == (64, 64)
    assert Negotiator().get_scheme([small], part, np.dtype("uint16")).sig_shape != (64, 64)  # cut without it
    # two products' worth of frames a tile (120: two kernel calls a tile), in at most 16 MiB
    for frames, sig, depth in ((80, (256, 256), 80), (130, (256, 256), 120), (9, (1024, 1024), 8)):
        data = np.zeros((2, frames) + sig, np.uint16)
        part = inline_ctx.load("memory", data=data, num_partitions=2).get_partitions()[0]
        scheme = Negotiator().get_scheme([LogsumUDF()], part, np.dtype("uint16"))
        assert (scheme.depth, scheme.sig_shape) == (depth, sig)


def test_com_tiles_hold_64_frames_within_8_mib_and_equal_numpy_cut_or_whole(inline_ctx, rng):
    from raytile.io.negotiator import Negotiator

    # 64 frames of 256x256 uint16 (8 MiB), 4 of 1024x1024, one of 2048x2048; larger frames are cut
    for frames, sig, depth in ((80, (256, 256), 64), (8, (1024, 1024), 4), (2, (2048, 2048), 1),
                               (1, (4096, 4096), 1)):
        data = np.zeros((2, frames) + sig, np.uint16)
        part = inline_ctx.load("memory", data=data, num_partitions=2).get_partitions()[0]
        scheme = Negotiator().get_scheme([CoMUDF.with_params()], part, np.dtype("uint16"))
        assert scheme.depth == depth and (scheme.sig_shape == sig) == (sig[0] < 4096)
    data = rng.integers(0, 65536, size=(3, 70, 16, 12), dtype=np.uint16)  # more than a tile a partition
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    frames = data.reshape(-1, 16, 12).astype(np.float64)
    y, x = np.indices((16, 12))
    total = frames.sum(axis=(1, 2))
    want = np.stack([(frames * y).sum(axis=(1, 2)) / total, (frames * x).sum(axis=(1, 2)) / total], axis=1)
    for others in ([], [TileCounter(native=True, small=True)]):  # whole frames; tiles cut in the signal
        res = inline_ctx.run_udf(dataset=ds, udf=[CoMUDF.with_params(r=100.0)] + others)
        np.testing.assert_allclose(res[0]["raw_com"].data.reshape(-1, 2), want, rtol=1e-12)
        if others:
            assert res[1]["n"].data[0] > 2 * len(frames)  # (cut: more tiles than frames)


@pytest.mark.parametrize("dtype", ["uint16", "int16", "uint8", "int32", "float32"])
def test_logsum_over_tiles_equals_numpy(inline_ctx, rng, dtype):
    # 150 frames a partition: products flushed at 63 frames in the middle of tiles; a ROI leaves gaps
    if np.dtype(dtype).kind == "f":
        data = rng.normal(100, 30, size=(10, 30, 12, 10)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        data = rng.integers(max(info.min, -40000), min(info.max, 70000), size=(10, 30, 12, 10),
                            endpoint=True).astype(dtype)
    data[0, 0, 0, :2] = np.iinfo(dtype).min if dtype != "float32" else 0  # the widest terms
    roi = rng.random((10, 30)) > 0.2
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    for sel in (None, roi):
        res = inline_ctx.run_udf(dataset=ds, udf=LogsumUDF(), roi=sel)
        frames = data[sel if sel is not None else np.ones((10, 30), bool)].astype(np.float64)
        want = np.log(frames - frames.min(axis=(1, 2), keepdims=True) + 1).sum(axis=0)
        assert res["logsum"].data.dtype == np.result_type(dtype, np.float32)
        np.testing.assert_allclose(res["logsum"].data, want, rtol=1e-5)


def test_logsum_of_a_long_partition_at_the_top_of_uint16_equals_numpy(inline_ctx, rng):
    # 250 frames a partition, terms up to 2**16: a product of all would be 2**4000; its powers of two are
    # split off every 60 frames, one log at the end of the partition
    data = rng.integers(0, 3, size=(2, 250, 6, 5)).astype(np.uint16)
    data[..., 0, 0] = 65535
    data[..., 1, 1] = 0
    data[0, 7, 2, 2] = 40000
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    res = inline_ctx.run_udf(dataset=ds, udf=LogsumUDF())
    frames = data.reshape(-1, 6, 5).astype(np.float64)
    want = np.log(frames - frames.min(axis=(1, 2), keepdims=True) + 1).sum(axis=0)
    assert np.isfinite(res["logsum"].data).all()
    np.testing.assert_allclose(res["logsum"].data, want, rtol=1e-6)


def test_masks_zero_in_whole_blocks_or_parts_of_them_are_skipped_exactly(rng):
    tile = rng.integers(0, 4000, size=(9, 5000)).astype(np.uint16)  # three blocks of pixels, the last short
    rows = np.zeros((6, 5000), np.float32)
    rows[0, 10:20] = 1  # a short run in the first block
    rows[1, 2048:4096] = rng.random(2048)  # the whole second block
    rows[2, [5, 4999]] = 2  # two pixels far apart
    rows[4, 3000:3001] = -1  # one pixel; rows[3] and rows[5] stay zero
    rows[5, ::7] = 0.5
    spans = integer_tiles.mask_spans(rows)
    assert spans.shape == (3, 6, 2) and tuple(spans[0, 0]) == (10, 20) and spans[1, 3, 0] >= spans[1, 3, 1]
    ref = tile.astype(np.float64) @ rows.T.astype(np.float64)
    for given in (None, spans):
        out = np.zeros((9, 6), np.float32)
        dot_rows_into(tile, rows, out, spans=given)
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
        assert not out[:, 3].any()
    with pytest.raises(ValueError, match="spans"):
        dot_rows_into(tile, rows, np.zeros((9, 6), np.float32), spans=spans[:2])
