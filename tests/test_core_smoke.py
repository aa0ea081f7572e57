"""End-to-end checks of the core path: memory/raw/npy data, ROI, partial results."""

import numpy as np
import pytest

import raytile as rt


@pytest.fixture
def data(rng):
    return rng.integers(0, 1000, size=(7, 9, 16, 12)).astype(np.uint16)


def test_sum_and_sumsig_memory(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()])
    np.testing.assert_allclose(res[0]["intensity"].data, data.sum(axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(res[1]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)


def test_roi_marks_invalid_positions(ctx, data, rng):
    roi = rng.random((7, 9)) > 0.5
    ds = ctx.load("memory", data=data, num_partitions=4)
    res = ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()], roi=roi)
    np.testing.assert_allclose(res[0]["intensity"].data, data[roi].sum(axis=0), rtol=1e-5)
    sumsig = res[1]["intensity"]
    np.testing.assert_allclose(sumsig.data[roi], data.sum(axis=(2, 3))[roi], rtol=1e-5)
    assert np.array_equal(sumsig.valid_mask, roi)
    assert np.all(np.isnan(sumsig.data[~roi]))  # float results are NaN outside the ROI, as in LiberTEM


def test_raw_and_npy_files(ctx, data, tmp_path):
    raw = tmp_path / "d.raw"
    data.tofile(raw)
    npy = tmp_path / "d.npy"
    np.save(npy, data)
    for ds in (
        ctx.load("raw", path=raw, nav_shape=(7, 9), sig_shape=(16, 12), dtype="uint16", num_partitions=2),
        ctx.load("npy", path=npy, num_partitions=2),
    ):
        res = ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
        assert res["intensity"].data.dtype == np.int64
        assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))


def test_partial_results_grow_damage(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=3)
    run = ctx.run_udf_iter(dataset=ds, udf=rt.SumSigUDF())
    parts = list(run)
    assert len(parts) + run.coalesced == 3  # latest wins: a partial not taken in time is folded into the next
    fractions = [p.damage.data.mean() for p in parts]
    assert fractions == sorted(set(fractions)) and fractions[-1] == 1.0
    assert parts[-1].finished
    np.testing.assert_allclose(parts[-1].buffers[0]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)
