"""The ``dectris`` format: a master file and its linked data files, against numpy on the data written.

Files come from :mod:`raytile.io.testing.dectris`, compressed by HDF5 through
``hdf5plugin``'s filters (not by raytile's decoder). Where LiberTEM reads the
same bytes (its ``hdf5`` reader on one linked data file), results are
compared with LiberTEM's own.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raytile as rt
from raytile.common.errors import DataSetException
from raytile.io import bslz4
from raytile.io.formats.dectris import DectrisDataSet
from raytile.io.testing.dectris import write_dectris
from raytile.udf import SumSigUDF, SumUDF

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")

NAV = (5, 12)
SIG = (15, 17)  # 255 pixels: 31 whole groups of 8 and 7 left over, stored raw by bitshuffle


def _data(rng, n=60, sig=SIG, dtype=np.uint16, high=3000):
    return rng.integers(0, high, size=(n,) + sig).astype(dtype)


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """60 frames in 5 data files of 13 (the last 8), per compression; nimages x ntrigger = 12 x 5."""
    rng = np.random.default_rng(7)
    data = _data(rng)
    mask = np.zeros(SIG, np.uint32)
    mask[3, 4] = 1
    mask[10, 0] = 4
    root = tmp_path_factory.mktemp("dectris")
    masters = {
        str(comp): write_dectris(str(root / str(comp)), data, frames_per_file=13, compression=comp,
                                 pixel_mask=mask, nimages=12, ntrigger=5)
        for comp in ("bslz4", "lz4", None)
    }
    return data, mask, masters


def _sum_sig(data):
    return data.reshape(data.shape[0], -1).sum(axis=1, dtype=np.int64)


@pytest.mark.parametrize("comp", ["bslz4", "lz4", "None"])
def test_frames_exact_across_files(ctx, series, comp):
    """Integer sums exact, 4 partitions of 15 frames crossing the 13-frame files, nav from nimages x ntrigger."""
    data, _, masters = series
    ds = ctx.load("dectris", path=masters[comp], num_partitions=4)
    assert ds.shape.to_tuple() == NAV + SIG and ds.dtype == np.uint16
    res = ctx.run_udf(dataset=ds, udf=[SumUDF(dtype="int64"), SumSigUDF()])
    assert np.array_equal(res[0]["intensity"].data, data.sum(axis=0, dtype=np.int64))
    assert np.array_equal(res[1]["intensity"].data.reshape(-1), _sum_sig(data))


def test_roi_and_partitions(ctx, series):
    data, _, masters = series
    roi = np.random.default_rng(3).random(NAV) < 0.4
    roi[0, 11] = roi[1, 0] = True  # the last image of file 1 and the first of file 2 (images 12, 13)
    for io_backend in ("mmap", "buffered", "direct"):
        ds = ctx.load("dectris", path=masters["bslz4"], num_partitions=7, io_backend=io_backend)
        res = ctx.run_udf(dataset=ds, udf=[SumUDF(dtype="int64"), SumSigUDF()], roi=roi)
        assert np.array_equal(res[0]["intensity"].data, data[roi.reshape(-1)].sum(axis=0, dtype=np.int64))
        got = res[1]["intensity"].data.reshape(-1)
        assert np.array_equal(got[roi.reshape(-1)], _sum_sig(data)[roi.reshape(-1)])


class _ThreeFrameTiles(SumSigUDF):
    """SumSigUDF on tiles of 3 frames: many tiles cut from one decoded block, a short one at the end."""

    def get_tiling_preferences(self):
        return {"depth": 3, "total_size": 1 << 30}


def test_small_tiles_from_large_reads(inline_ctx, series, monkeypatch):
    """Blocks of decoded frames (here 6, two tiles) are cut into the scheme's tiles, ROI and files crossed."""
    from raytile.io.formats import dectris

    data, _, masters = series
    monkeypatch.setattr(dectris, "READ_BYTES", 6 * 255 * 2)
    roi = np.ones(60, bool)
    roi[[5, 17, 40, 41]] = False
    ds = inline_ctx.load("dectris", path=masters["bslz4"], nav_shape=(60,), num_partitions=2)
    got = inline_ctx.run_udf(dataset=ds, udf=_ThreeFrameTiles(dtype="int64"), roi=roi)["intensity"].data
    assert np.array_equal(got[roi], _sum_sig(data)[roi])
    assert np.array_equal(inline_ctx.run_udf(dataset=ds, udf=_ThreeFrameTiles(dtype="int64"))["intensity"].data,
                          _sum_sig(data))


@pytest.mark.parametrize("sync_offset", [3, -2])
def test_sync_offset(inline_ctx, series, sync_offset):
    """Nav position i reads image i + sync_offset; images outside the series read as zeros."""
    data, _, masters = series
    ds = inline_ctx.load("dectris", path=masters["bslz4"], nav_shape=(60,), sync_offset=sync_offset,
                         num_partitions=3)
    got = inline_ctx.run_udf(dataset=ds, udf=SumSigUDF())["intensity"].data
    want = np.zeros(60, np.int64)
    idx = np.arange(60) + sync_offset
    ok = (idx >= 0) & (idx < 60)
    want[ok] = _sum_sig(data)[idx[ok]]
    assert np.array_equal(got, want)


def test_every_frame_and_reshape(inline_ctx, series):
    """Each partition's frames equal the data written; sig_shape reshapes the frame."""
    data, _, masters = series
    ds = inline_ctx.load("dectris", path=masters["lz4"], nav_shape=(60,), sig_shape=(255,), num_partitions=5)
    got = np.concatenate([p._source() for p in ds.get_partitions()])
    assert np.array_equal(got, data.reshape(60, 255))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.integers(1, 20), height=st.integers(1, 9), width=st.integers(1, 13),
       per_file=st.integers(1, 8), dtype=st.sampled_from(["uint8", "uint16", "uint32", ">u2", "int16", "float32"]),
       comp=st.sampled_from(["bslz4", "lz4", None]), parts=st.integers(1, 4), seed=st.integers(0, 2 ** 16))
def test_round_trip_tiny_shapes(inline_ctx, frames, height, width, per_file, dtype, comp, parts, seed):
    """Any small series written by HDF5 reads back frame for frame (blocks shorter than 8, one pixel, ...)."""
    import tempfile

    data = np.random.default_rng(seed).integers(0, 120, size=(frames, height, width)).astype(dtype)
    with tempfile.TemporaryDirectory() as d:
        master = write_dectris(d, data, frames_per_file=per_file, compression=comp)
        ds = inline_ctx.load("dectris", path=master, num_partitions=parts)
        got = np.concatenate([p._source() for p in ds.get_partitions()])
    assert got.dtype == np.dtype(dtype).newbyteorder("=")
    assert np.array_equal(got, data)


@pytest.mark.parametrize("dtype,sig", [(np.uint16, (96, 96)), (np.uint32, (40, 36)), (np.uint8, (33, 31))])
def test_decoder_against_hdf5plugin(tmp_path, dtype, sig):
    """decode_chunks gives what HDF5's filter pipeline (hdf5plugin) gives: several blocks, leftovers, dtypes."""
    pytest.importorskip("bitshuffle")
    rng = np.random.default_rng(1)
    data = rng.poisson(2.0, size=(9,) + sig).astype(dtype)
    data[3] = np.iinfo(dtype).max  # incompressible extremes and a constant frame
    data[4] = 0
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=data, chunks=(1,) + sig, **hdf5plugin.Bitshuffle(nelems=0, cname="lz4"))
    with h5py.File(path, "r") as f:
        ds = f["d"]
        want = ds[()]
        info = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
    offsets = np.array([c.byte_offset for c in info], np.int64)
    sizes = np.array([c.size for c in info], np.int64)
    buf = np.fromfile(path, np.uint8)
    out = np.zeros_like(want)
    status = bslz4.decode_chunks(buf, offsets, sizes, np.zeros(9, np.bool_), bslz4.CODEC_BSLZ4,
                                 np.dtype(dtype).itemsize, out.view(np.uint8).reshape(9, -1))
    assert status == 0
    assert np.array_equal(out, want)
    assert np.array_equal(want, data)
    short = sizes.copy()
    short[5] -= 3
    status = bslz4.decode_chunks(buf, offsets, short, np.zeros(9, np.bool_), bslz4.CODEC_BSLZ4,
                                 np.dtype(dtype).itemsize, out.view(np.uint8).reshape(9, -1))
    assert bslz4.split_status(status) == (5, bslz4.ERRORS[1])


def test_against_libertem_hdf5(tmp_path):
    """One linked data file: raytile's dectris reader and LiberTEM's hdf5 reader (with hdf5plugin) agree,
    with and without the pixel mask as excluded pixels."""
    lt_api = pytest.importorskip("libertem.api")
    from libertem.corrections import CorrectionSet as LTCorrectionSet
    from libertem.udf.sum import SumUDF as LTSumUDF

    rng = np.random.default_rng(5)
    data = _data(rng, n=24, sig=(32, 32), high=500)
    mask = np.zeros((32, 32), np.uint32)
    mask[[2, 9, 30], [5, 17, 31]] = 1
    master = write_dectris(str(tmp_path), data, frames_per_file=100, pixel_mask=mask)
    ctx = rt.Context(executor="inline")
    ds = ctx.load("dectris", path=master, nav_shape=(4, 6), num_partitions=3)
    lt = lt_api.Context.make_with("inline")
    lt_ds = lt.load("hdf5", path=os.path.join(tmp_path, "series_1_data_000001.h5"), ds_path="/entry/data/data",
                    nav_shape=(4, 6))
    ours = ctx.run_udf(dataset=ds, udf=SumUDF())["intensity"].data
    theirs = lt.run_udf(dataset=lt_ds, udf=LTSumUDF())["intensity"].data
    assert np.array_equal(ours, theirs)
    corr = ds.get_correction_data()
    assert np.array_equal(corr.get_excluded_pixels().todense(), mask != 0)
    ours = ctx.run_udf(dataset=ds, udf=SumUDF(), corrections=corr)["intensity"].data
    theirs = lt.run_udf(dataset=lt_ds, udf=LTSumUDF(),
                        corrections=LTCorrectionSet(excluded_pixels=mask != 0))["intensity"].data
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_hdf5_format_opens_compressed_data(tmp_path, rng):
    """The hdf5 format registers hdf5plugin's filters itself: a fresh process that never imports it reads
    bitshuffle-LZ4 data."""
    data = _data(rng, n=12, sig=(8, 10))
    path = tmp_path / "bslz4.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=data, chunks=(1, 8, 10), **hdf5plugin.Bitshuffle(nelems=0, cname="lz4"))
    code = (
        "import sys, raytile as rt\n"
        "ctx = rt.Context(executor='inline')\n"
        f"ds = ctx.load('hdf5', path={str(path)!r}, ds_path='d')\n"
        "print(int(ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(dtype='int64'))['intensity'].data.sum()))\n"
        "print('hdf5plugin' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    total, imported = out.stdout.split()
    assert int(total) == int(data.sum(dtype=np.int64)) and imported == "True"


def test_detect_params(series, tmp_path):
    _, _, masters = series
    master = masters["bslz4"]
    assert DectrisDataSet.detect_params(master)["parameters"] == {"path": master}
    data_file = master.replace("_master.h5", "_data_000001.h5")
    assert DectrisDataSet.detect_params(data_file) is False
    other = tmp_path / "x.raw"
    other.write_bytes(b"\0" * 64)
    assert DectrisDataSet.detect_params(str(other)) is False


def test_pixel_mask_offered(inline_ctx, series):
    data, mask, masters = series
    ds = inline_ctx.load("dectris", path=masters["bslz4"])
    assert np.array_equal(ds.pixel_mask, mask)
    assert np.array_equal(ds.get_correction_data().get_excluded_pixels().todense(), mask != 0)
    assert ds.corrections is None  # offered, not applied unless asked for: raw sums stay exact


# -- bad files ---------------------------------------------------------------------------------------


def _copy_series(src_master: str, dst) -> str:
    import shutil

    src = os.path.dirname(src_master)
    for name in os.listdir(src):
        shutil.copy(os.path.join(src, name), dst / name)
    return str(dst / os.path.basename(src_master))


def test_missing_data_file(inline_ctx, series, tmp_path):
    master = _copy_series(series[2]["bslz4"], tmp_path)
    os.remove(tmp_path / "series_1_data_000003.h5")
    with pytest.raises(DataSetException, match=r"series_1_master\.h5: data file of link data_000003 is missing: "
                                               r".*series_1_data_000003\.h5"):
        inline_ctx.load("dectris", path=master)


def test_truncated_data_file(inline_ctx, series, tmp_path):
    master = _copy_series(series[2]["bslz4"], tmp_path)
    victim = tmp_path / "series_1_data_000002.h5"
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    with pytest.raises(DataSetException, match=r"series_1_master\.h5: data file .*series_1_data_000002\.h5: "
                                               r"cannot open as HDF5"):
        inline_ctx.load("dectris", path=master)


def _corrupt_chunk(data_file: str, frame: int, how: str) -> None:
    with h5py.File(data_file, "r") as f:
        info = f["/entry/data/data"].id.get_chunk_info(frame)
    with open(data_file, "r+b") as fh:
        if how == "size":  # the first block's compressed length, far past the chunk
            fh.seek(info.byte_offset + 12)
            fh.write((10 ** 6).to_bytes(4, "big"))
        else:  # the header's uncompressed size
            fh.seek(info.byte_offset)
            fh.write((12345).to_bytes(8, "big"))


def test_corrupt_chunk_at_load(inline_ctx, series, tmp_path):
    master = _copy_series(series[2]["bslz4"], tmp_path)
    _corrupt_chunk(str(tmp_path / "series_1_data_000001.h5"), 0, "header")
    with pytest.raises(DataSetException, match=r"series_1_data_000001\.h5:/entry/data/data: cannot decode the "
                                               r"chunk of frame 0 \(image 1 of the series\): .*uncompressed size"):
        inline_ctx.load("dectris", path=master)
    with pytest.raises(DataSetException, match=r"series_1_data_000001\.h5:/entry/data/data: cannot read frames "
                                               r"0\.\.0"):
        inline_ctx.load("dectris", path=master, decoder="hdf5plugin")


def test_corrupt_chunk_in_a_task(ctx, series, tmp_path):
    """A chunk whose block length points past it fails its task with the file and frame, on both executors."""
    master = _copy_series(series[2]["bslz4"], tmp_path)
    _corrupt_chunk(str(tmp_path / "series_1_data_000004.h5"), 2, "size")
    ds = ctx.load("dectris", path=master, num_partitions=3)
    with pytest.raises(DataSetException, match=r"series_1_data_000004\.h5:/entry/data/data: cannot decode the chunk "
                                               r"of frame 2 \(image 42 of the series\): .*truncated"):
        ctx.run_udf(dataset=ds, udf=SumUDF())


def test_wrong_shapes_and_files(inline_ctx, series, tmp_path):
    _, _, masters = series
    with pytest.raises(DataSetException, match=r"series_1_master\.h5: the series holds 60 images, nav_shape "
                                               r"\(8, 8\) needs 64"):
        inline_ctx.load("dectris", path=masters["bslz4"], nav_shape=(8, 8))
    with pytest.raises(DataSetException, match=r"sig_shape \(16, 16\) does not hold frames of \(15, 17\)"):
        inline_ctx.load("dectris", path=masters["bslz4"], sig_shape=(16, 16))
    with pytest.raises(DataSetException, match=r"sync_offset 70 reads no frame"):
        inline_ctx.load("dectris", path=masters["bslz4"], nav_shape=(60,), sync_offset=70)
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(DataSetException, match=r"plain\.h5: not a DECTRIS master file"):
        inline_ctx.load("dectris", path=plain)
    with pytest.raises(DataSetException, match=r"file not found: .*nothere_master\.h5"):
        inline_ctx.load("dectris", path=tmp_path / "nothere_master.h5")
    text = tmp_path / "text_master.h5"
    text.write_text("not hdf5")
    with pytest.raises(DataSetException, match=r"text_master\.h5: cannot open as HDF5"):
        inline_ctx.load("dectris", path=text)
