"""The ``frms6`` format on files written by raytile.io.testing.frms6, against numpy and LiberTEM's reader."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.io.formats.frms6 import FRMS6DataSet
from raytile.io.testing.frms6 import write_frms6, write_gain_csv, write_gain_mat
from raytile.udf import PickUDF, SumUDF

import raytile as rt
from test_format_k2is import FrameSumUDF  # whole frames: sum of each frame's pixels (nav)

SCAN = (2, 3)


class RowBandSumUDF(rt.UDF):
    """Sum over frames in tiles of at most 100 bytes: one frame deep, bands of a few rows."""

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="sig", dtype="int64")}

    def get_tiling_preferences(self):
        return {"depth": 1, "total_size": 100}

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def process_tile(self, tile):
        assert tile.shape[2] == self.meta.dataset_shape.sig[1] and tile.shape[1] < self.meta.dataset_shape.sig[0]
        self.results.intensity[:] += tile.sum(axis=0, dtype=np.int64)

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity


def _data(binning, seed=0, n=6, shape=(16, 12)):
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 4000, (n,) + shape, dtype=np.uint16)
    dark = rng.integers(0, 200, (3,) + shape, dtype=np.uint16)
    return frames, dark


@pytest.fixture(scope="module", params=[1, 2])
def dataset(request, tmp_path_factory):
    """6 frames (2 x 3 scan) over two data files, 3 dark frames; binning 1 and 2."""
    binning = request.param
    frames, dark = _data(binning)
    d = tmp_path_factory.mktemp(f"frms6_b{binning}")
    hdr = write_frms6(d, frames, dark, scan_shape=SCAN, binning=binning, frames_per_file=4)
    # what the detector saw: each stored row stands for `binning` rows
    return hdr, np.repeat(frames, binning, axis=1), np.repeat(dark, binning, axis=1), d


def _pick_all(ctx, ds):
    return ctx.run_udf(dataset=ds, udf=PickUDF(), roi=np.ones(ds.shape.nav.to_tuple(), bool))["intensity"].data


def test_raw_frames_exact(ctx, dataset):
    hdr, frames, _, _ = dataset
    ds = ctx.load("frms6", path=hdr, enable_offset_correction=False, num_partitions=2)
    assert ds.shape.to_tuple() == SCAN + frames.shape[1:] and ds.dtype == np.uint16
    res = ctx.run_udf(dataset=ds, udf=SumUDF(dtype="int64"))
    np.testing.assert_array_equal(res["intensity"].data, frames.sum(axis=0, dtype=np.int64))
    roi = np.array([[True, False, True], [False, False, True]])
    np.testing.assert_array_equal(ctx.run_udf(dataset=ds, udf=PickUDF(), roi=roi)["intensity"].data,
                                  frames[roi.reshape(-1)])


@pytest.mark.parametrize("io_backend", ["mmap", "buffered", "direct"])
def test_backends_tilings_sync_offset(inline_ctx, dataset, io_backend):
    hdr, frames, _, d = dataset
    ds = inline_ctx.load("frms6", path=os.path.join(d, "frms6_002.frms6"), enable_offset_correction=False,
                         sync_offset=-1, num_partitions=3, io_backend=io_backend)
    bands = inline_ctx.run_udf(dataset=ds, udf=RowBandSumUDF())
    whole = inline_ctx.run_udf(dataset=ds, udf=FrameSumUDF())
    shifted = np.concatenate([np.zeros_like(frames[:1]), frames[:-1]])
    np.testing.assert_array_equal(whole["total"].data.reshape(-1), shifted.reshape(6, -1).sum(axis=-1))
    np.testing.assert_array_equal(bands["intensity"].data, shifted.sum(axis=0, dtype=np.int64))
    ds = inline_ctx.load("frms6", path=hdr, enable_offset_correction=False, sync_offset=2, nav_shape=(4,),
                         io_backend=io_backend)
    np.testing.assert_array_equal(_pick_all(inline_ctx, ds), frames[2:])


def test_row_bands(inline_ctx, dataset):
    """Tiles of a few rows (multiples of the binning), with the unfolded bottom half inside one band."""
    hdr, frames, _, _ = dataset
    ds = inline_ctx.load("frms6", path=hdr, enable_offset_correction=False)
    res = inline_ctx.run_udf(dataset=ds, udf=RowBandSumUDF())
    np.testing.assert_array_equal(res["intensity"].data, frames.sum(axis=0, dtype=np.int64))


def test_offset_and_gain_correction(ctx, dataset):
    hdr, frames, dark, d = dataset
    gain = np.random.default_rng(5).uniform(0.5, 2.0, frames.shape[1:]).astype(np.float32)
    write_gain_mat(d / "gain.mat", gain)
    write_gain_csv(d / "gain.csv", gain)
    expected = frames.astype(np.float64) - dark.mean(axis=0)
    ds = ctx.load("frms6", path=hdr)
    assert ds.dtype == np.float32
    np.testing.assert_allclose(_pick_all(ctx, ds), expected, rtol=1e-5, atol=1e-3)
    for name in ("gain.mat", "gain.csv"):
        ds = ctx.load("frms6", path=hdr, gain_map_path=str(d / name))
        np.testing.assert_allclose(_pick_all(ctx, ds), expected * gain, rtol=1e-5, atol=1e-3)


def test_same_as_libertem(inline_ctx, dataset):
    lt = pytest.importorskip("libertem.api")
    from libertem.udf.raw import PickUDF as LTPick

    hdr, _, _, d = dataset
    gain = np.random.default_rng(6).uniform(0.5, 2.0, dataset[1].shape[1:])
    write_gain_mat(d / "gain_lt.mat", gain)
    lt_ctx = lt.Context.make_with("inline")
    for kwargs in ({"enable_offset_correction": False}, {}, {"gain_map_path": str(d / "gain_lt.mat")},
                   {"sync_offset": 1, "enable_offset_correction": False}):
        lt_ds = lt_ctx.load("frms6", path=hdr, **kwargs)
        theirs = lt_ctx.run_udf(dataset=lt_ds, udf=LTPick(), roi=np.ones(SCAN, bool))["intensity"].data
        ds = inline_ctx.load("frms6", path=hdr, **kwargs)
        assert ds.shape.to_tuple() == tuple(lt_ds.shape)
        np.testing.assert_allclose(_pick_all(inline_ctx, ds), theirs, rtol=1e-5, atol=1e-3, err_msg=str(kwargs))


def test_detect_params(dataset, tmp_path):
    hdr, _, _, d = dataset
    assert FRMS6DataSet.detect_params(hdr)["parameters"] == {"path": hdr, "nav_shape": SCAN}
    merlin = tmp_path / "scan.hdr"
    merlin.write_text("HDR,\nFrames in Acquisition (Number):\t16\n")
    assert FRMS6DataSet.detect_params(str(merlin)) is False
    assert FRMS6DataSet.detect_params(str(tmp_path / "x.raw")) is False


@pytest.fixture
def small(tmp_path):
    frames, dark = _data(1, seed=3, n=4)
    return write_frms6(tmp_path, frames, dark, scan_shape=(2, 2)), tmp_path


def test_bad_files(inline_ctx, small):
    hdr, d = small
    with pytest.raises(DataSetException, match="nav_shape \\(3, 3\\) needs 9 frames"):
        inline_ctx.load("frms6", path=hdr, nav_shape=(3, 3))
    with pytest.raises(DataSetException, match="sig_shape \\(5, 5\\) must have 192 pixels"):
        inline_ctx.load("frms6", path=hdr, sig_shape=(5, 5))
    with pytest.raises(DataSetException, match="gain map.*nope.mat"):
        inline_ctx.load("frms6", path=hdr, gain_map_path=str(d / "nope.mat"))
    with pytest.raises(ConfigValidationError, match="enable_offset_correction"):
        inline_ctx.load("frms6", path=hdr, enable_offset_correction="yes")
    good_hdr = (d / "frms6.hdr").read_text()
    (d / "frms6.hdr").write_text("[other]\na=1\n")
    with pytest.raises(DataSetException, match="frms6.hdr: no \\[measurementInfo\\]"):
        inline_ctx.load("frms6", path=str(d / "frms6_000.frms6"))
    (d / "frms6.hdr").write_text(good_hdr)
    data = d / "frms6_001.frms6"
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(DataSetException, match="frms6_001.frms6: file is too short"):
        inline_ctx.load("frms6", path=hdr)
    with open(data, "r+b") as f:
        f.write(b"\x00\x01")  # header size 256
    with pytest.raises(DataSetException, match="frms6_001.frms6: not an FRMS6 file"):
        inline_ctx.load("frms6", path=hdr)
    os.remove(data)
    with pytest.raises(DataSetException, match="frms6_001.frms6"):
        inline_ctx.load("frms6", path=hdr)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=st.integers(1, 4), half_w=st.integers(1, 5), binning=st.sampled_from([1, 2, 4]), n=st.integers(1, 5),
       per_file=st.integers(1, 5), sync_offset=st.integers(-3, 3), seed=st.integers(0, 2**16))
def test_round_trip_tiny(inline_ctx, tmp_path_factory, h, half_w, binning, n, per_file, sync_offset, seed):
    """Any tiny frame shape, binning, split over files and sync offset reads back what was written."""
    frames, dark = _data(binning, seed=seed, n=n, shape=(2 * h, half_w))
    hdr = write_frms6(tmp_path_factory.mktemp("frms6_rt"), frames, dark, scan_shape=(n, 1), binning=binning,
                      frames_per_file=per_file, num_frames_in_header=bool(seed % 2))
    if not -n < sync_offset < n:
        with pytest.raises(DataSetException, match="sync_offset"):
            inline_ctx.load("frms6", path=hdr, enable_offset_correction=False, sync_offset=sync_offset)
        return
    ds = inline_ctx.load("frms6", path=hdr, enable_offset_correction=False, sync_offset=sync_offset,
                         num_partitions=min(n, 2))
    expected = np.zeros((n, 2 * h * binning, half_w), dtype=np.uint16)
    for i in range(n):
        if 0 <= i + sync_offset < n:
            expected[i] = np.repeat(frames[i + sync_offset], binning, axis=0)
    np.testing.assert_array_equal(_pick_all(inline_ctx, ds).reshape(expected.shape), expected)
