"""The ``raw_csr`` format: exact frames against numpy and LiberTEM's reader; sync_offset, ROI, auto, bad files."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raytile as rt
from raytile.common.errors import DataSetException
from raytile.io.testing.raw_csr import write_raw_csr

NAV = (4, 5)
SIG = (12, 10)


def _frames(rng, n=20, dtype=np.uint16):
    dense = rng.integers(0, 50, size=(n,) + SIG).astype(dtype)
    dense[rng.random(dense.shape) < 0.8] = 0
    return dense


def _expected(frames, nav_size, sync_offset):
    out = np.zeros((nav_size,) + frames.shape[1:], dtype=frames.dtype)
    for i in range(nav_size):
        if 0 <= i + sync_offset < len(frames):
            out[i] = frames[i + sync_offset]
    return out


@pytest.mark.parametrize("sync_offset", [0, 3, -4])
def test_frames_exact(ctx, tmp_path, rng, sync_offset):
    frames = _frames(rng)
    toml = write_raw_csr(tmp_path / "scan", frames, nav_shape=NAV, data_dtype=">u2")
    ds = ctx.load("raw_csr", path=toml, sync_offset=sync_offset, num_partitions=3)
    assert ds.shape.to_tuple() == NAV + SIG and ds.dtype == np.uint16
    expected = _expected(frames, 20, sync_offset)
    res = ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(dtype="float64"))["intensity"].data
    assert np.array_equal(res, expected.sum(axis=0))
    roi = np.zeros(NAV, dtype=bool)
    roi.flat[[0, 6, 7, 19]] = True
    picked = ctx.run_udf(dataset=ds, udf=rt.udf.PickUDF(), roi=roi)["intensity"].raw_data
    assert np.array_equal(np.asarray(picked), expected[roi.reshape(-1)])


def test_same_as_libertem(inline_ctx, tmp_path, rng):
    lt_api = pytest.importorskip("libertem.api")
    from libertem.udf.raw import PickUDF as LTPick
    from libertem.udf.sum import SumUDF as LTSum

    frames = _frames(rng, dtype=np.int32)
    toml = write_raw_csr(tmp_path / "lt", frames, nav_shape=NAV, indptr_dtype="<i4")
    lt = lt_api.Context.make_with("inline")
    roi = np.zeros(NAV, dtype=bool)
    roi.flat[[1, 2, 18]] = True
    for sync_offset in (0, 2, -3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = lt.load("raw_csr", path=toml, sync_offset=sync_offset)
            lt_sum = lt.run_udf(dataset=theirs, udf=LTSum(dtype="float64"))["intensity"].data
            lt_pick = lt.run_udf(dataset=theirs, udf=LTPick(), roi=roi)["intensity"].raw_data
        ours = inline_ctx.load("raw_csr", path=toml, sync_offset=sync_offset)
        assert ours.shape.to_tuple() == tuple(theirs.shape)
        assert np.array_equal(inline_ctx.run_udf(dataset=ours, udf=rt.udf.SumUDF(dtype="float64"))["intensity"].data,
                              lt_sum)
        picked = inline_ctx.run_udf(dataset=ours, udf=rt.udf.PickUDF(), roi=roi)["intensity"].raw_data
        assert np.array_equal(np.asarray(picked), _expected(frames, 20, sync_offset)[roi.reshape(-1)])
        if sync_offset >= 0:  # LiberTEM 0.16 applies an ROI before a negative offset's blank frames: it picks
            assert np.array_equal(np.asarray(picked), np.asarray(lt_pick))  # other frames than numpy then


def test_auto_and_reshape(inline_ctx, tmp_path, rng):
    frames = _frames(rng)
    toml = write_raw_csr(tmp_path / "a", frames, nav_shape=NAV)
    ds = inline_ctx.load("auto", path=toml)
    assert type(ds).__name__ == "RawCSRDataSet" and ds.shape.to_tuple() == NAV + SIG
    flat = inline_ctx.load("auto", path=toml, nav_shape=(20,), sig_shape=(120,))
    res = inline_ctx.run_udf(dataset=flat, udf=rt.udf.SumSigUDF())["intensity"].data
    assert np.array_equal(res, frames.reshape(20, -1).sum(axis=1))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 9), h=st.integers(1, 4), w=st.integers(1, 4), density=st.floats(0, 1),
       sync=st.integers(-3, 3), seed=st.integers(0, 2**16))
def test_round_trip_tiny(inline_ctx, tmp_path_factory, n, h, w, density, sync, seed):
    r = np.random.default_rng(seed)
    frames = r.integers(1, 9, size=(n, h, w)).astype(np.float32) * (r.random((n, h, w)) < density)
    toml = write_raw_csr(tmp_path_factory.mktemp("csr") / "t", frames, nav_shape=(n,))
    if sync and abs(sync) >= n:
        return
    ds = inline_ctx.load("raw_csr", path=toml, sync_offset=sync, num_partitions=min(n, 3))
    picked = inline_ctx.run_udf(dataset=ds, udf=rt.udf.PickUDF(), roi=np.ones(n, bool))["intensity"].raw_data
    assert np.array_equal(np.asarray(picked), _expected(frames, n, sync))


def test_bad_files(inline_ctx, tmp_path, rng):
    frames = _frames(rng)
    toml = write_raw_csr(tmp_path / "b", frames, nav_shape=NAV)
    with pytest.raises(DataSetException, match="nav_shape"):
        inline_ctx.load("raw_csr", path=toml, nav_shape=(5, 5))
    with pytest.raises(DataSetException, match="sig_shape"):
        inline_ctx.load("raw_csr", path=toml, sig_shape=(7, 7))
    data = tmp_path / "b_data.raw"
    full = data.read_bytes()
    data.write_bytes(full[:-2])  # one value short
    with pytest.raises(DataSetException, match="indices but .* values"):
        inline_ctx.load("raw_csr", path=toml)
    data.write_bytes(full)
    idx = tmp_path / "b_indices.raw"
    bad = np.fromfile(idx, dtype="<i4")
    bad[-1] = 10_000
    bad.tofile(idx)
    ds = inline_ctx.load("raw_csr", path=toml)
    with pytest.raises(DataSetException, match="signal index outside"):
        inline_ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF())
    os.remove(tmp_path / "b_indptr.raw")
    with pytest.raises(DataSetException, match="indptr_file .* does not exist"):
        inline_ctx.load("raw_csr", path=toml)
    other = tmp_path / "other.toml"
    other.write_text('[params]\nfiletype = "mib"\n')
    with pytest.raises(DataSetException, match="not a raw_csr descriptor"):
        inline_ctx.load("raw_csr", path=str(other))
    other.write_text("this is [not toml")
    with pytest.raises(DataSetException, match="not a valid TOML file"):
        inline_ctx.load("raw_csr", path=str(other))
    with pytest.raises(DataSetException, match="cannot detect the format"):
        inline_ctx.load("auto", path=str(other))

