"""The ``k2is`` format on files written by raytile.io.testing.k2is, against numpy and LiberTEM's reader."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raytile as rt
from raytile.common.errors import DataSetException
from raytile.io.formats.k2is import K2ISDataSet
from raytile.io.testing.k2is import BLOCK_SIZE, write_k2is
from raytile.udf import PickUDF, SumSigUDF, SumUDF

SIG = (1860, 2048)
LEAD = [0, 3, 5, 0, 0, 0, 0, 7]  # sectors start at different blocks of an incomplete frame
TAIL = [1, 0, 0, 4, 0, 0, 0, 0]


class SmallTilesSumUDF(rt.UDF):
    """Sum over frames in tiles of at most 64 KiB: single 930 x 16 blocks and a few frames deep."""

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="sig", dtype="int64")}

    def get_tiling_preferences(self):
        return {"depth": 4, "total_size": 64 * 1024}

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def process_tile(self, tile):
        assert tile.shape[1] % 930 == 0 and tile.shape[2] % 16 == 0
        self.results.intensity[:] += tile.sum(axis=0, dtype=np.int64)

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity


class FrameSumUDF(rt.UDF):
    """Whole frames: sum of each frame's pixels (nav)."""

    def get_result_buffers(self):
        return {"total": self.buffer(kind="nav", dtype="int64")}

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def process_frame(self, frame):
        assert frame.shape == self.meta.dataset_shape.sig.to_tuple()
        self.results.total[:] = frame.sum(dtype=np.int64)


def _frames(n, seed):
    return np.random.default_rng(seed).integers(0, 4096, (n,) + SIG, dtype=np.uint16)


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """A time series of 6 frames (no scan size in the .gtg), sectors out of step by a few blocks."""
    frames = _frames(6, 1)
    path = write_k2is(tmp_path_factory.mktemp("k2is_series"), frames, lead_blocks=LEAD, tail_blocks=TAIL)
    return path, frames


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """A 2 x 3 scan in the .gtg; 7 frames, the first 2 before the shutter flag."""
    frames = _frames(7, 2)
    path = write_k2is(tmp_path_factory.mktemp("k2is_scan"), frames, scan_shape=(2, 3), inactive_frames=2,
                      lead_blocks=LEAD[::-1], tail_blocks=TAIL)
    return path, frames


def _expected(frames, n, shift):
    """Nav position i reads frames[i + shift], zeros outside."""
    out = np.zeros((n,) + SIG, dtype=np.int64)
    for i in range(n):
        if 0 <= i + shift < len(frames):
            out[i] = frames[i + shift]
    return out


def test_sum_and_roi_exact(ctx, series):
    path, frames = series
    ds = ctx.load("k2is", path=path, num_partitions=2)
    assert ds.shape.to_tuple() == (6,) + SIG and ds.dtype == np.uint16
    res = ctx.run_udf(dataset=ds, udf=SumUDF(dtype="int64"))
    np.testing.assert_array_equal(res["intensity"].data, frames.sum(axis=0, dtype=np.int64))
    roi = np.array([False, True, False, False, True, True])
    picked = ctx.run_udf(dataset=ds, udf=PickUDF(), roi=roi)["intensity"].data
    np.testing.assert_array_equal(picked, frames[roi])


@pytest.mark.parametrize("io_backend", ["mmap", "buffered", "direct"])
def test_backends_partitions_tilings(inline_ctx, series, io_backend):
    path, frames = series
    ds = inline_ctx.load("k2is", path=path, nav_shape=(2, 3), num_partitions=3, io_backend=io_backend)
    small, whole, sums = inline_ctx.run_udf(dataset=ds, udf=[SmallTilesSumUDF(), FrameSumUDF(), SumSigUDF()])
    np.testing.assert_array_equal(small["intensity"].data, frames.sum(axis=0, dtype=np.int64))
    expected = frames.reshape(2, 3, -1).sum(axis=-1, dtype=np.int64)
    np.testing.assert_array_equal(whole["total"].data, expected)
    np.testing.assert_allclose(sums["intensity"].data, expected, rtol=1e-5)  # float32 sums


@pytest.mark.parametrize("sync_offset", [2, -2])
def test_sync_offset(inline_ctx, series, sync_offset):
    path, frames = series
    ds = inline_ctx.load("k2is", path=path, sync_offset=sync_offset, num_partitions=2)
    totals = inline_ctx.run_udf(dataset=ds, udf=FrameSumUDF())["total"].data
    expected = _expected(frames, 6, sync_offset).reshape(6, -1).sum(axis=-1)
    np.testing.assert_array_equal(totals, expected)


def test_flat_sig_shape(inline_ctx, series):
    path, frames = series
    ds = inline_ctx.load("k2is", path=path, sig_shape=(SIG[0] * SIG[1],))
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="int64"))
    np.testing.assert_array_equal(res["intensity"].data, frames.sum(axis=0, dtype=np.int64).reshape(-1))


def test_detect_scan(scan, tmp_path):
    path, _ = scan
    assert K2ISDataSet.detect_params(path)["parameters"] == {"path": path, "nav_shape": (2, 3), "sync_offset": 2}
    square = write_k2is(tmp_path, _frames(4, 5))
    assert K2ISDataSet.detect_params(square)["parameters"]["nav_shape"] == (2, 2)  # as LiberTEM's make_2D_square


def test_scan_from_gtg(inline_ctx, scan):
    """The .gtg's scan size is the nav shape; the data starts one frame before the shutter flag (as LiberTEM).

    LiberTEM itself cannot open small scans: it looks for the shutter flag at block 0 and then 12800
    blocks on (past the end of files under 286 MB a sector), and without frames before the flag it
    reads one frame before the file's start."""
    path, frames = scan
    ds = inline_ctx.load("k2is", path=path.replace("_.gtg", "_4.bin"))
    assert ds.shape.nav.to_tuple() == (2, 3)
    totals = inline_ctx.run_udf(dataset=ds, udf=FrameSumUDF())["total"].data
    np.testing.assert_array_equal(totals.reshape(-1), _expected(frames, 6, 1).reshape(6, -1).sum(axis=-1))
    ds = inline_ctx.load("k2is", path=path, sync_offset=0)  # from the first synced frame, one blank before
    totals = inline_ctx.run_udf(dataset=ds, udf=FrameSumUDF())["total"].data
    np.testing.assert_array_equal(totals.reshape(-1), _expected(frames, 6, -1).reshape(6, -1).sum(axis=-1))


def _libertem(path, **kwargs):
    lt = pytest.importorskip("libertem.api")
    from libertem.udf.raw import PickUDF as LTPick

    ctx = lt.Context.make_with("inline")
    ds = ctx.load("k2is", path=path, **kwargs)
    roi = np.ones(ds.shape.nav.to_tuple(), dtype=bool)
    return ds, ctx.run_udf(dataset=ds, udf=LTPick(), roi=roi)["intensity"].data


@pytest.mark.parametrize("sync_offset", [None, 1, -1])
def test_same_frames_as_libertem(inline_ctx, series, sync_offset):
    path, _ = series
    kwargs = {} if sync_offset is None else {"sync_offset": sync_offset}
    lt_ds, lt_frames = _libertem(path, **kwargs)
    ds = inline_ctx.load("k2is", path=path, **kwargs)
    assert ds.shape.to_tuple() == tuple(lt_ds.shape)
    ours = inline_ctx.run_udf(dataset=ds, udf=PickUDF(), roi=np.ones(ds.shape.nav.to_tuple(), bool))
    np.testing.assert_array_equal(ours["intensity"].data, lt_frames)


def test_detect_params(series, tmp_path):
    path, _ = series
    assert K2ISDataSet.detect_params(path)["parameters"] == {"path": path, "nav_shape": (6,), "sync_offset": 0}
    other = tmp_path / "x_1.bin"
    other.write_bytes(b"\0" * 100)
    assert K2ISDataSet.detect_params(str(other)) is False
    assert K2ISDataSet.detect_params(str(tmp_path / "scan.mib")) is False


@pytest.fixture
def small(tmp_path):
    """A fresh 2-frame data set to break."""
    return write_k2is(tmp_path, _frames(2, 4), lead_blocks=LEAD), tmp_path


def test_missing_sector_file(ctx, small):
    path, d = small
    os.remove(d / "k2is_5.bin")
    with pytest.raises(DataSetException, match="8 sector files, found 7.*k2is_"):
        ctx.load("k2is", path=path)


def test_corrupt_block_header(inline_ctx, small):
    path, d = small
    with open(d / "k2is_3.bin", "r+b") as f:
        f.write(b"\x12\x34\x56\x78")
    with pytest.raises(DataSetException, match="k2is_3.bin.*not a K2 IS block header"):
        inline_ctx.load("k2is", path=path)


def test_truncated_sector(inline_ctx, small):
    path, d = small
    sector = d / "k2is_6.bin"
    with open(sector, "r+b") as f:
        f.truncate(BLOCK_SIZE * 40 + 100)  # the second frame is cut short
    assert inline_ctx.load("k2is", path=path).shape.nav.to_tuple() == (1,)  # synced to the complete frame
    with pytest.raises(DataSetException, match="nav_shape \\(2,\\) needs 2 frames"):
        inline_ctx.load("k2is", path=path, nav_shape=(2,))
    with open(sector, "r+b") as f:
        f.truncate(100)
    with pytest.raises(DataSetException, match="k2is_6.bin.*holds no K2 IS block"):
        inline_ctx.load("k2is", path=path)


def test_bad_parameters(inline_ctx, small):
    path, d = small
    with pytest.raises(DataSetException, match="nav_shape \\(3, 3\\) needs 9 frames"):
        inline_ctx.load("k2is", path=path, nav_shape=(3, 3))
    with pytest.raises(DataSetException, match="sig_shape \\(100, 100\\) must have 3809280 pixels"):
        inline_ctx.load("k2is", path=path, sig_shape=(100, 100))
    with pytest.raises(DataSetException, match="sync_offset 5 must lie in"):
        inline_ctx.load("k2is", path=path, sync_offset=5)
    with pytest.raises(DataSetException, match="scan.raw.*opened by its .gtg"):
        inline_ctx.load("k2is", path=str(d / "scan.raw"))
    (d / "k2is_.gtg").write_bytes(b"\0\0\0\x04garbage")
    with pytest.raises(DataSetException, match="k2is_.gtg"):
        inline_ctx.load("k2is", path=path)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lead=st.lists(st.integers(0, 31), min_size=8, max_size=8),
       tail=st.lists(st.integers(0, 31), min_size=8, max_size=8),
       inactive=st.integers(0, 1), scan=st.booleans(), seed=st.integers(0, 2**16))
def test_sync_round_trip(inline_ctx, tmp_path_factory, lead, tail, inactive, scan, seed):
    """Sectors starting and ending anywhere inside a frame, with or without frames before the shutter flag,
    in a scan or a time series: the complete frames read back as written."""
    frames = np.random.default_rng(seed).integers(0, 4096, (3,) + SIG, dtype=np.uint16)
    frames[:, ::97, ::89] = 4095  # the extreme values too
    path = write_k2is(tmp_path_factory.mktemp("k2is_rt"), frames, scan_shape=(1, 3) if scan else None,
                      inactive_frames=inactive, lead_blocks=lead, tail_blocks=tail)
    ds = inline_ctx.load("k2is", path=path, sync_offset=inactive, nav_shape=(3,))
    totals = inline_ctx.run_udf(dataset=ds, udf=FrameSumUDF())["total"].data
    shift = inactive - 1 if scan else inactive
    np.testing.assert_array_equal(totals, _expected(frames, 3, shift).reshape(3, -1).sum(axis=-1))


def test_scheme_not_negotiated(inline_ctx, series):
    """A tiling scheme that cuts blocks (not from the partition's hooks) is refused, not misread."""
    from raytile.common.shape import Shape
    from raytile.common.tiling import TilingScheme

    path, _ = series
    ds = inline_ctx.load("k2is", path=path)
    part = ds.get_partitions()[0]
    assert part.get_base_shape(None) == (1, 930, 16)
    assert part.adjust_tileshape((1, 930, 1024), None) == (6, 930, 16)  # 6 frames: all the partition has
    assert part.adjust_tileshape((2, 1860, 2048), None) == (2, 1860, 2048)
    scheme = TilingScheme.make_for_shape(Shape((1, 100, 2048), sig_dims=2), ds.shape)
    with pytest.raises(DataSetException, match="whole 930 x 16 blocks"):
        next(iter(part.get_tiles(scheme)))
