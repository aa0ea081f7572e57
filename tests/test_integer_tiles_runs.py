"""Masks as runs of one value (:func:`raytile.udf.integer_tiles.mask_runs` / ``sum_runs_into``).

Virtual detectors (rings, disks, rectangles, the rings of a radial profile) are runs of pixels of one
value; ApplyMasksEngine multiplies integer tiles with them by summing each run's pixels exactly in
integers, where :func:`runs_pay` says that is faster than the dense kernel. Checked against numpy in
float64 (exactly, where the masks' values are integers or halves: each product rounded once), against
the dense kernel, and through ApplyMasksUDF with tiles cut in the signal, an ROI and partitions of
frame counts that are not multiples of four.
"""

from __future__ import annotations

import numpy as np
import pytest

from test_integer_tiles import TileCounter

from raytile.udf import ApplyMasksUDF, masks
from raytile.udf import integer_tiles
from raytile.udf.integer_tiles import MaskRuns, dot_rows_into, load_kernels, mask_runs, runs_pay, sum_runs_into

SMALL_INTS = ["uint8", "int8", "uint16", "int16"]


def rings(sig: tuple[int, int], count: int) -> np.ndarray:
    """``count`` adjacent rings out to the edge, ``(count, pixels)`` float32 (the benchmark's 16 rings)."""
    edges = np.linspace(0, min(sig) / 2, count + 1)
    return np.stack([masks.ring(sig[0] / 2, sig[1] / 2, a, b, sig).reshape(-1)
                     for a, b in zip(edges[:-1], edges[1:])]).astype(np.float32)


def stepped(sig: tuple[int, int]) -> np.ndarray:
    """Piecewise-constant masks that are not 0/1: a ring of 2.5 around a disk of -3, a rectangle of 7
    overlapping it (pixels in two masks), and a mask of zeros."""
    ring = 2.5 * masks.ring(sig[0] / 2, sig[1] / 2, 6, 14, sig) - 3 * masks.disk(sig[0] / 2, sig[1] / 2, 6, sig)
    rect = np.zeros(sig, np.float32)
    rect[3:20, 5:30] = 7
    return np.stack([ring.reshape(-1), rect.reshape(-1), np.zeros(sig[0] * sig[1])]).astype(np.float32)


def exact(tile: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``tile @ rows.T`` in float64, rounded once to float32."""
    return (tile.astype(np.float64) @ rows.T.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("dtype", SMALL_INTS)
@pytest.mark.parametrize("frames", [1, 3, 4, 7, 8, 13, 17])  # eight frames a pass, then four, then one
def test_runs_equal_numpy_exactly_and_the_dense_kernel(rng, dtype, frames):
    sig = (37, 41)  # odd pixel count, rows not a multiple of anything
    info = np.iinfo(dtype)
    tile = rng.integers(info.min, info.max, size=(frames,) + sig, endpoint=True).astype(dtype).reshape(frames, -1)
    tile[0, :50] = info.max  # the top of the range, and its bottom
    tile[-1, -50:] = info.min
    for rows in (rings(sig, 6), stepped(sig), rings(sig, 1)):
        built = integer_tiles._count_runs(rows)
        runs = MaskRuns(*_all_runs(rows))
        assert runs.bounds.shape == (built[0], 3) and built[1] == np.count_nonzero(rows)
        out = np.zeros((frames, len(rows)), np.float32)
        sum_runs_into(tile, runs, out)
        np.testing.assert_array_equal(out, exact(tile, rows))  # integer sums, values exact: rounded once
        dense = np.zeros_like(out)
        dot_rows_into(tile, rows, dense)
        np.testing.assert_allclose(dense, out, rtol=1e-6, atol=1e-6 * np.abs(out).max())
        start = rng.normal(size=out.shape).astype(np.float32)  # adds to what out holds
        more = start.copy()
        sum_runs_into(tile, runs, more)
        np.testing.assert_allclose(more, start.astype(np.float64) + out, rtol=1e-6, atol=1e-6)


def _all_runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """The runs of ``rows`` whether or not they pay (mask_runs' own kernels)."""
    count, _ = integer_tiles._count_runs(rows)
    bounds = np.empty((count, 3), np.int64)
    values = np.empty(count)
    integer_tiles._fill_runs(rows, bounds, values)
    return bounds, values, rows.shape


def test_runs_of_a_small_mask_worked_out_by_hand():
    rows = np.array([[0, 1, 1, 2, 0, 0, -1, -1],
                     [3, 3, 0, 0, 0, 0, 0, 3]], np.float32)
    bounds, values, _ = _all_runs(rows)
    assert bounds.tolist() == [[1, 3, 0], [3, 4, 0], [6, 8, 0], [0, 2, 1], [7, 8, 1]]
    assert values.tolist() == [1, 2, -1, 3, 3]
    tile = np.arange(16, dtype=np.uint8).reshape(2, 8)
    out = np.zeros((2, 2), np.float32)
    sum_runs_into(tile, MaskRuns(bounds, values, rows.shape), out)
    assert out.tolist() == [[1 + 2 + 2 * 3 - 6 - 7, 3 * (0 + 1 + 7)], [9 + 10 + 22 - 14 - 15, 3 * (8 + 9 + 15)]]


def test_nan_and_infinite_mask_values_meet_each_pixel_as_numpy_does():
    rows = np.zeros((2, 12), np.float32)
    rows[0, 2:6] = np.inf  # over pixels 0 and 5: inf x 0 is NaN, inf x 5 is inf
    rows[0, 8:10] = -np.inf
    rows[1, 3:7] = np.nan
    rows[1, 9:11] = 1
    bounds, values, _ = _all_runs(rows)
    assert bounds[:, 1].tolist() == [3, 4, 5, 6, 9, 10, 4, 5, 6, 7, 11]  # one run a pixel, but for the 1s
    tile = np.array([[0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 7, 0], [1] * 12, [0] * 12], np.uint16)
    out = np.zeros((3, 2), np.float32)
    sum_runs_into(tile, MaskRuns(bounds, values, rows.shape), out)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(out, exact(tile, rows))  # NaN where numpy has NaN


@pytest.mark.parametrize("dtype, value", [("uint16", 65535), ("int16", -32768), ("int16", 32767)])
def test_long_runs_are_cut_so_that_integer_sums_cannot_overflow(dtype, value):
    tile = np.full((5, 70000), value, dtype)  # one run would sum to 4.6e9 > 2**31
    rows = np.ones((1, 70000), np.float32)
    runs = MaskRuns(*_all_runs(rows))  # (the dense kernel is as fast for one mask of ones: runs_pay says no)
    lengths = runs.bounds[:, 1] - runs.bounds[:, 0]
    assert lengths.max() <= 2**15 and lengths.sum() == 70000
    out = np.zeros((5, 1), np.float32)
    sum_runs_into(tile, runs, out)
    np.testing.assert_array_equal(out, np.full((5, 1), np.float32(value * 70000.0)))


def test_runs_pay_for_virtual_detectors_not_for_soft_or_scattered_masks(rng):
    sig = (256, 256)
    px = sig[0] * sig[1]
    bench_rings = rings(sig, 16)
    assert mask_runs(bench_rings) is not None
    assert mask_runs(masks.ring(128, 128, 40, 100, sig).reshape(1, -1)) is not None
    assert mask_runs(masks.disk(20, 30, 5, sig).reshape(1, -1)) is not None  # small: a few runs
    y, x = np.indices(sig)
    soft = np.exp(-((y - 128.0) ** 2 + (x - 128.0) ** 2) / 2000).astype(np.float32).reshape(1, -1)
    assert mask_runs(soft) is None  # a value a pixel: the dense kernel
    assert mask_runs((rng.random((4, px)) > 0.5).astype(np.float32)) is None  # runs of one or two pixels
    assert mask_runs(np.zeros((2, px), np.float32)) is None
    # the decision alone: work by non-zero pixels and runs against masks x pixels
    assert runs_pay(nonzero=28300, runs=282, masks=1, pixels=px)
    assert not runs_pay(nonzero=px, runs=px, masks=1, pixels=px)
    assert runs_pay(nonzero=51430, runs=4127, masks=16, pixels=px)
    assert not runs_pay(nonzero=51430, runs=30000, masks=16, pixels=px)
    assert not runs_pay(nonzero=0, runs=0, masks=3, pixels=px)


def test_runs_refuse_what_they_do_not_do():
    rows = rings((16, 16), 1)
    runs = MaskRuns(*_all_runs(rows))
    with pytest.raises(ValueError, match="rows must be 2D float32|must be 2D float32"):
        mask_runs(rows.astype(np.float64))
    with pytest.raises(ValueError, match="do not fit"):
        sum_runs_into(np.zeros((2, 255), np.uint16), runs, np.zeros((2, 1), np.float32))
    with pytest.raises(ValueError, match="do not fit"):
        sum_runs_into(np.zeros((2, 256), np.uint16), runs, np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="16-bit"):
        sum_runs_into(np.zeros((2, 256), np.int32), runs, np.zeros((2, 1), np.float32))


def test_load_kernels_readies_the_runs_kernels():
    load_kernels()
    ready = {str(sig[0].dtype) for sig in integer_tiles._sum_runs.signatures
             if all(a.layout == "C" for a in sig if hasattr(a, "layout"))}
    assert {"uint8", "uint16"} <= ready
    assert integer_tiles._count_runs.signatures and integer_tiles._fill_runs.signatures


@pytest.mark.parametrize("dtype", ["uint16", "int16", "uint8"])
@pytest.mark.parametrize("cut", [False, True])
def test_applymasks_with_rings_equals_numpy_exactly(inline_ctx, rng, dtype, cut):
    sig = (64, 64)
    info = np.iinfo(dtype)
    lo = 60000 if dtype == "uint16" else info.min  # near the top of uint16: sums above 2**24
    data = rng.integers(lo, info.max, size=(3, 7) + sig, endpoint=True).astype(dtype)
    stack = np.concatenate([rings(sig, 8), stepped(sig)])
    assert mask_runs(stack) is not None  # the runs kernel is what this test runs
    roi = rng.random((3, 7)) > 0.3 if cut else None
    ds = inline_ctx.load("memory", data=data, num_partitions=3)  # 7 frames a partition: 4, then 3
    # the rings as bool masks (as users' masks often are), the stepped ones as float32
    udfs = [ApplyMasksUDF(mask_factories=[lambda i=i: stack[i].reshape(sig) > 0 if i < 8 else stack[i].reshape(sig)
                                          for i in range(len(stack))])]
    if cut:
        udfs.append(TileCounter(native=True, small=True))  # tiles cut in the signal, for every UDF of the run
    res = inline_ctx.run_udf(dataset=ds, udf=udfs, roi=roi)
    if cut:
        assert res[1]["n"].data > roi.sum()  # two frames a tile, so several tiles a frame: the signal was cut
    picked = (data[roi] if cut else data).reshape(-1, sig[0] * sig[1])
    got = res[0]["intensity"].raw_data
    assert got.dtype == np.float32
    if cut:  # each frame's products are sums of its tiles' products, rounded in between
        np.testing.assert_allclose(got, exact(picked, stack), rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, exact(picked, stack))


def check_rings_run(ctx, data: np.ndarray, partitions: int) -> None:
    """ApplyMasksUDF with 8 rings over ``data`` (``(ny, nx) + sig``) equals numpy exactly."""
    sig = data.shape[2:]
    stack = rings(sig, 8)
    ds = ctx.load("memory", data=data, num_partitions=partitions)
    res = ctx.run_udf(dataset=ds, udf=ApplyMasksUDF(
        mask_factories=[lambda i=i: stack[i].reshape(sig) for i in range(len(stack))]))
    np.testing.assert_array_equal(res["intensity"].raw_data, exact(data.reshape(-1, sig[0] * sig[1]), stack))


@pytest.mark.ray
def test_applymasks_with_rings_on_ray_equals_numpy_exactly(ray_context, rng):
    check_rings_run(ray_context, rng.integers(0, 65536, size=(4, 9, 64, 64)).astype(np.uint16), partitions=4)


def test_masks_are_scanned_for_runs_once_a_worker_not_once_a_partition(inline_ctx, rng, monkeypatch):
    from raytile.udf import maskengine

    scans = []

    def counting(rows):
        scans.append(rows.shape)
        return mask_runs(rows)

    monkeypatch.setattr(maskengine, "mask_runs", counting)
    check_rings_run(inline_ctx, rng.integers(0, 4096, size=(6, 5, 64, 64)).astype(np.uint16), partitions=6)
    assert scans == [(8, 64 * 64)]  # six partitions, one worker (inline), one signal region
