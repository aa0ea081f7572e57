"""SumUDF and a one-mask ApplyMasksUDF given each tile in one pass (raytile.udf.fused_tiles).

The one-pass kernel against numpy (float64) and against the two kernels it
stands for; runs of the pair against numpy, where the pass is taken (integer
tiles, one dense mask, signal cut in tiles, an ROI, frame counts that are
not a multiple of four) and where the run falls back to calling the UDFs one
by one (other data, several or sparse masks, shifts, subclasses).
"""

from __future__ import annotations

import numpy as np
import pytest

from raytile.udf import ApplyMasksUDF, SumUDF, UDF, masks
from raytile.udf import fused_tiles
from raytile.udf import integer_tiles
from raytile.udf.integer_tiles import dot_rows_into, load_kernels, sum_and_dot_row_into, sum_frames_into

SIG = (16, 12)


@pytest.fixture
def passes(monkeypatch):
    """How many times the run took the one-pass kernel."""
    calls = []
    kernel = fused_tiles.sum_and_dot_row_into

    def counted(*args):
        calls.append(args[0].shape[0])
        return kernel(*args)

    monkeypatch.setattr(fused_tiles, "sum_and_dot_row_into", counted)
    return calls


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
@pytest.mark.parametrize("frames", [1, 4, 7, 33])  # four frames a pass, then the rest
def test_one_pass_matches_numpy_and_the_two_kernels(rng, dtype, frames):
    info = np.iinfo(dtype)
    tile = rng.integers(info.min, info.max, size=(frames, 301), endpoint=True).astype(dtype)
    tile[0, :3] = info.max  # the top of the range
    row = rng.normal(size=301).astype(np.float32)
    start = rng.integers(-1000, 1000, size=301).astype(np.float32)
    sums, dots = start.copy(), np.ones(frames, np.float32)
    sum_and_dot_row_into(tile, sums, row, dots)
    np.testing.assert_array_equal(sums, start + tile.sum(axis=0, dtype=np.int64))  # integers: exact
    ref = 1 + tile.astype(np.float64) @ row.astype(np.float64)
    np.testing.assert_allclose(dots, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    apart, products = start.copy(), np.ones((frames, 1), np.float32)
    sum_frames_into(tile, apart)
    dot_rows_into(tile, row.reshape(1, -1), products)
    np.testing.assert_array_equal(sums, apart)
    np.testing.assert_allclose(dots, products[:, 0], rtol=1e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("frames", [1, 5])
@pytest.mark.parametrize("pixels", [256 * 256, 1000])
def test_products_with_a_mask_of_zeros_and_ones_are_exact_at_the_top_of_uint16(rng, frames, pixels):
    tile = np.full((frames, pixels), 65535, np.uint16)
    tile[:, ::7] = rng.integers(0, 65535, size=tile[:, ::7].shape)
    row = (rng.random(pixels) > 0.3).astype(np.float32)
    sums, dots = np.zeros(pixels, np.float32), np.zeros(frames, np.float32)
    sum_and_dot_row_into(tile, sums, row, dots)
    exact = tile.astype(np.int64) @ row.astype(np.int64)  # beyond 2**24: float32 sums would round
    assert exact.max() > 2**24
    np.testing.assert_array_equal(dots, exact.astype(np.float32))  # the exact sum, rounded once


def test_one_pass_refuses_what_it_does_not_do():
    tile = np.zeros((3, 10), np.uint16)
    ok = (np.zeros(10, np.float32), np.zeros(10, np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="8- or 16-bit"):
        sum_and_dot_row_into(tile.astype(np.uint32), *ok)
    with pytest.raises(ValueError, match="float32"):
        sum_and_dot_row_into(tile, np.zeros(10), ok[1], ok[2])
    with pytest.raises(ValueError, match="do not fit"):
        sum_and_dot_row_into(tile, ok[0], np.zeros(9, np.float32), ok[2])
    with pytest.raises(ValueError, match="do not fit"):
        sum_and_dot_row_into(tile, ok[0], ok[1], np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="row must be float32"):
        sum_and_dot_row_into(tile, ok[0], ok[1].astype(np.float64), ok[2])


def _ring():
    return masks.ring(8, 6, 2, 5, SIG)


def _run(ctx, data, udfs, roi=None):
    ds = ctx.load("memory", data=data, num_partitions=3)
    return ctx.run_udf(dataset=ds, udf=udfs, roi=roi)


@pytest.mark.parametrize("dtype", ["uint16", "uint8", "int16"])
def test_sum_and_one_ring_in_one_pass_equal_numpy(inline_ctx, rng, dtype, passes):
    info = np.iinfo(dtype)
    data = rng.integers(info.min, info.max, size=(5, 7) + SIG, endpoint=True).astype(dtype)  # 35 frames
    ring = _ring()
    sums, products = _run(inline_ctx, data, [SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring])])
    assert sum(passes) == 35  # every frame went through the one pass
    flat = data.reshape(35, -1).astype(np.float64)
    np.testing.assert_array_equal(sums["intensity"].data, flat.sum(axis=0).reshape(SIG))  # exact below 2**24
    assert products["intensity"].data.dtype == np.float32
    exact = data.reshape(35, -1).astype(np.int64) @ ring.reshape(-1).astype(np.int64)  # a ring of 0s and 1s
    np.testing.assert_array_equal(products["intensity"].data[..., 0], exact.astype(np.float32).reshape(5, 7))


def test_the_pair_in_any_order_beside_other_udfs_with_an_roi(inline_ctx, rng, passes):
    data = rng.integers(0, 4000, size=(4, 5) + SIG).astype(np.uint16)
    roi = rng.random((4, 5)) > 0.4
    ring = _ring()
    products, other, sums = _run(inline_ctx, data, [ApplyMasksUDF(mask_factories=[lambda: ring]),
                                                    ApplyMasksUDF(mask_factories=[lambda: ring, lambda: ring]),
                                                    SumUDF()], roi=roi)
    assert sum(passes) == roi.sum()
    picked = data[roi].reshape(-1, SIG[0] * SIG[1]).astype(np.float64)
    np.testing.assert_array_equal(sums["intensity"].data, picked.sum(axis=0).reshape(SIG))
    want = picked @ ring.reshape(-1)
    np.testing.assert_allclose(products["intensity"].raw_data[:, 0], want, rtol=1e-6)
    np.testing.assert_allclose(other["intensity"].raw_data, np.stack([want, want], axis=1), rtol=1e-6)


class _MySum(SumUDF):
    pass


@pytest.mark.parametrize("case", ["uint32", "float32", "two masks", "sparse", "shifts", "subclass", "sum alone"])
def test_the_run_falls_back_to_one_udf_after_the_other(inline_ctx, rng, passes, case):
    dtype = {"uint32": np.uint32, "float32": np.float32}.get(case, np.uint16)
    data = rng.integers(0, 4000, size=(3, 4) + SIG).astype(dtype)
    ring, second = _ring(), rng.random(SIG).astype(np.float32)
    factories = [lambda: ring, lambda: second] if case == "two masks" else [lambda: ring]
    kwargs = {"use_sparse": True} if case == "sparse" else {"shifts": (0, 0)} if case == "shifts" else {}
    udfs: list[UDF] = [_MySum() if case == "subclass" else SumUDF()]
    if case != "sum alone":
        udfs.append(ApplyMasksUDF(mask_factories=factories, **kwargs))
    results = _run(inline_ctx, data, udfs)
    assert passes == []
    flat = data.reshape(12, -1).astype(np.float64)
    np.testing.assert_allclose(results[0]["intensity"].data, flat.sum(axis=0).reshape(SIG), rtol=1e-6)
    if case != "sum alone":
        stack = np.stack([f().reshape(-1) for f in factories]).astype(np.float64)
        np.testing.assert_allclose(results[1]["intensity"].data.reshape(12, -1), flat @ stack.T, rtol=1e-5)


def test_fused_pair_finds_the_classes_themselves_on_numpy_whole_tiles():
    ring = _ring()
    s, m = SumUDF(), ApplyMasksUDF(mask_factories=[lambda: ring])
    assert fused_tiles.fused_pair([s, m], ["tile", "tile"], ["numpy", "numpy"]) == (0, 1)
    assert fused_tiles.fused_pair([m, SumUDF(), s], ["tile"] * 3, ["numpy"] * 3) == (1, 0)
    assert fused_tiles.fused_pair([s, m], ["tile", "tile"], ["numpy", "cupy"]) is None
    assert fused_tiles.fused_pair([s, m], ["tile", "frame"], ["numpy", "numpy"]) is None
    assert fused_tiles.fused_pair([_MySum(), m], ["tile", "tile"], ["numpy", "numpy"]) is None
    assert fused_tiles.fused_pair([s], ["tile"], ["numpy"]) is None
    shifted = ApplyMasksUDF(mask_factories=[lambda: ring], shifts=(1, 0))
    assert fused_tiles.fused_pair([s, shifted], ["tile", "tile"], ["numpy", "numpy"]) is None


def test_load_kernels_readies_the_one_pass_for_the_detector_dtypes():
    load_kernels()
    ready = {str(sig[0].dtype) for sig in integer_tiles._sum_and_dot_row.signatures
             if all(a.layout == "C" for a in sig)}
    assert {"uint8", "uint16"} <= ready
