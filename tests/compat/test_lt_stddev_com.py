"""StdDev and CoM names LiberTEM's test suite uses (tests/udf/test_stddev.py, tests/analysis/test_analysis_com.py),
each against LiberTEM's own result on the same data: StdDevUDF on complex data, memory data sets of sparse
arrays read with an ROI, ``libertem.udf.stddev.process_tile``/``merge`` and ``guess_corrections`` at
``libertem.analysis.com``.
"""

from __future__ import annotations

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import raytile as rt  # noqa: E402


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


def _complex_data():
    rng = np.random.default_rng(11)
    return (rng.random((6, 5, 3, 7)) + 1j * rng.random((6, 5, 3, 7)) - 0.3j).astype(np.complex64)


@pytest.mark.parametrize("with_roi", [False, True])
def test_stddev_of_complex_data_as_libertem(lt_ctx, ctx, with_roi):
    from libertem.udf.stddev import run_stddev as lt_run_stddev

    from raytile.udf.stddev import run_stddev

    data = _complex_data()
    roi = None
    if with_roi:
        roi = np.random.default_rng(2).random((6, 5)) > 0.4
    ref = lt_run_stddev(lt_ctx, lt_ctx.load("memory", data=data, num_partitions=3), roi=roi)
    got = run_stddev(ctx, ctx.load("memory", data=data, num_partitions=3), roi=roi)
    assert got["num_frames"] == ref["num_frames"]
    for key in ("sum", "mean", "var", "std", "varsum"):
        assert np.iscomplexobj(got[key]) == np.iscomplexobj(ref[key]), key
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-5, err_msg=key)
    frames = data.reshape(-1, 3, 7) if roi is None else data[roi]
    np.testing.assert_allclose(got["var"], frames.astype(np.complex128).var(axis=0), rtol=1e-6)
    assert abs(got["sum"].imag).max() > 0
    # outside a run (declarations listed without data) the sum is declared float64, as before
    assert rt.StdDevUDF().get_result_buffers()["sum"].dtype == np.float64


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int16"])
def test_stddev_of_small_integers_as_libertem(lt_ctx, ctx, dtype):
    # raytile adds 8- and 16-bit frames up in exact integers (LiberTEM: float deviations a tile)
    from libertem.udf.stddev import run_stddev as lt_run_stddev

    from raytile.udf.stddev import run_stddev

    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    low = info.max - 500 if dtype == "uint16" else info.min  # uint16 near its top
    data = rng.integers(low, info.max, size=(7, 5, 6, 9), endpoint=True).astype(dtype)
    data[..., 0, :3] = info.max  # constant: variance 0
    roi = rng.random((7, 5)) > 0.4
    ref = lt_run_stddev(lt_ctx, lt_ctx.load("memory", data=data, num_partitions=3), roi=roi)
    got = run_stddev(ctx, ctx.load("memory", data=data, num_partitions=3), roi=roi)
    assert got["num_frames"] == ref["num_frames"] == roi.sum()
    for key in ("sum", "mean", "var", "std", "varsum"):
        assert got[key].dtype == ref[key].dtype, key
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-9, atol=1e-12, err_msg=key)
    np.testing.assert_array_equal(got["sum"], data[roi].astype(np.int64).sum(axis=0))
    assert np.all(got["var"][0, :3] == 0)  # exactly (LiberTEM's: within 1e-29 of it)


@pytest.mark.parametrize("backend", ["sparse.COO", "scipy.sparse.csr_matrix"])
def test_sparse_memory_data_with_an_roi_as_libertem(lt_ctx, inline_ctx, backend):
    import sparse
    from libertem.io.dataset.memory import MemoryDataSet as LtMemoryDataSet
    from libertem.udf.stddev import run_stddev as lt_run_stddev

    from raytile.io.dataset.memory import MemoryDataSet
    from raytile.udf.stddev import run_stddev

    dense = np.random.default_rng(4).random((12, 3, 20)).astype(np.float32)
    dense[dense < 0.6] = 0
    data = sparse.COO.from_numpy(dense)
    roi = np.zeros(12, dtype=bool)
    roi[[0, 3, 4, 5, 9, 11]] = True
    ref = lt_run_stddev(lt_ctx, LtMemoryDataSet(data=data, tileshape=(3, 2, 10), num_partitions=2, sig_dims=2,
                                                array_backends=(backend,)), roi=roi)
    got = run_stddev(inline_ctx, MemoryDataSet(data=data, tileshape=(3, 2, 10), num_partitions=2, sig_dims=2,
                                               array_backends=(backend,)), roi=roi)
    assert got["num_frames"] == ref["num_frames"] == 6
    for key in ("sum", "var", "mean"):
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-5, err_msg=key)
    np.testing.assert_allclose(got["var"], dense[roi].var(axis=0), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_stddev_process_tile_and_merge_as_libertem(dtype):
    from libertem.udf.stddev import merge as lt_merge
    from libertem.udf.stddev import process_tile as lt_process_tile

    from raytile.udf.stddev import merge, process_tile

    rng = np.random.default_rng(8)
    tiles = [(rng.random((4, 300)) + (1j * rng.random((4, 300)) if dtype is np.complex128 else 0)).astype(dtype)
             for _ in range(3)]
    sums = {}
    for name, proc, mrg in (("lt", lt_process_tile, lt_merge), ("rt", process_tile, merge)):
        # LiberTEM's kernel starts from a first tile merged by hand (n_0 > 0), as its StdDevUDF does
        s = tiles[0].astype(np.complex128 if dtype is np.complex128 else np.float64).sum(axis=0)
        v = (np.abs(tiles[0] - tiles[0].mean(axis=0)) ** 2).sum(axis=0).astype(np.float64)
        n = 4
        for t in tiles[1:]:
            n = proc(t, n, s, v)
        total_s, total_v = np.zeros_like(s), np.zeros_like(v)
        total_n = mrg(0, total_s, total_v, n, s, v, s / n)
        total_n = mrg(total_n, total_s, total_v, n, s.copy(), v.copy(), s / n)
        sums[name] = (total_n, total_s, total_v)
    assert sums["rt"][0] == sums["lt"][0] == 24
    np.testing.assert_allclose(sums["rt"][1], sums["lt"][1], rtol=1e-5)
    np.testing.assert_allclose(sums["rt"][2], sums["lt"][2], rtol=1e-4)
    joint = np.concatenate(tiles + tiles).astype(np.complex128)
    np.testing.assert_allclose(sums["rt"][2] / 24, joint.var(axis=0), rtol=1e-6)


def test_guess_corrections_at_libertems_analysis_path():
    from libertem.analysis.com import guess_corrections as lt_guess

    from raytile.analysis.com import GuessResult, guess_corrections

    # a field of point charges rotated by 30 degrees and flipped: what a CoM run of atomic-resolution data gives
    yy, xx = np.mgrid[0:24, 0:24].astype(np.float64)
    y, x = np.zeros_like(yy), np.zeros_like(xx)
    for cy, cx in [(6, 6), (6, 17), (17, 6), (17, 17), (12, 12)]:
        dy, dx = yy - cy + 0.5, xx - cx + 0.5
        r2 = dy ** 2 + dx ** 2 + 1
        y -= dy / r2
        x -= dx / r2
    a = np.deg2rad(30)
    y_obs, x_obs = -(np.cos(a) * y - np.sin(a) * x) + 0.3, np.sin(a) * y + np.cos(a) * x - 0.2
    got, ref = guess_corrections(y_obs, x_obs), lt_guess(y_obs, x_obs)
    assert isinstance(got, GuessResult)
    assert got._asdict().keys() == ref._asdict().keys()
    assert (got.scan_rotation, got.flip_y) == (ref.scan_rotation, ref.flip_y)
    assert got.cy == pytest.approx(ref.cy) and got.cx == pytest.approx(ref.cx)
