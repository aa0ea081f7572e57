"""The ``mib`` format: exact frames of every pixel mode against numpy (the frames the writer was given)
and against LiberTEM's own MIB reader on the same files; sequences, sync_offset, ROI, backends,
auto detection and bad files."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raytile as rt
from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.io.decoders_mib import decode_frames, parse_frame_header
from raytile.io.testing.mib import write_mib

MAXV = {"U08": 255, "U16": 65535, "U32": 2**32 - 1, "R1": 1, "R6": 63, "R12": 4095, "R24": 2**24 - 1}
#: (mode, quad): every pixel mode, single chip and raw 2x2 quads (U quads are stored assembled).
CASES = [("U08", False), ("U16", False), ("U32", False), ("R1", False), ("R6", False), ("R12", False),
         ("R24", False), ("R1", True), ("R6", True), ("R12", True), ("U16", True)]
NAV = (3, 5)


def _frames(rng, mode, quad, n=15):
    h, w = (128, 128) if quad else (32, 64)
    return rng.integers(0, MAXV[mode] + 1, size=(n, h, w), dtype=np.int64)


def _write(tmp_path, rng, mode, quad, **kw):
    frames = _frames(rng, mode, quad, kw.pop("n", 15))
    kw.setdefault("nav_shape", NAV)
    kw.setdefault("frames_per_file", 4)
    hdr = write_mib(tmp_path / f"scan_{mode}_{quad}", frames, mode=mode, quad=quad, **kw)
    return hdr, frames


def _sum(ctx, ds, roi=None):
    return ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(dtype="float64"), roi=roi)["intensity"].data


def _pick(ctx, ds, roi):
    return np.asarray(ctx.run_udf(dataset=ds, udf=rt.udf.PickUDF(), roi=roi)["intensity"].raw_data)


@pytest.mark.parametrize("mode,quad", CASES)
def test_modes_exact_inline(inline_ctx, tmp_path, rng, mode, quad):
    hdr, frames = _write(tmp_path, rng, mode, quad)
    ds = inline_ctx.load("mib", path=hdr, num_partitions=3)
    assert ds.shape.to_tuple() == NAV + frames.shape[1:]
    assert np.array_equal(_sum(inline_ctx, ds), frames.sum(axis=0))
    roi = np.zeros(NAV, dtype=bool)
    roi.flat[[0, 4, 5, 11, 14]] = True
    picked = _pick(inline_ctx, ds, roi)
    assert picked.dtype == ds.dtype
    assert np.array_equal(picked, frames[roi.reshape(-1)])


@pytest.mark.ray
@pytest.mark.parametrize("mode,quad", [("U16", False), ("R12", False), ("R1", True), ("R24", False)])
def test_modes_exact_ray(ray_context, tmp_path, rng, mode, quad):
    hdr, frames = _write(tmp_path, rng, mode, quad)
    ds = ray_context.load("mib", path=hdr, num_partitions=4, sync_offset=2)
    roi = np.ones(NAV, dtype=bool)
    roi.flat[[1, 7]] = False
    expected = np.zeros(frames.shape[1:])
    for i in np.flatnonzero(roi):
        if i + 2 < len(frames):
            expected += frames[i + 2]
    assert np.array_equal(_sum(ray_context, ds, roi), expected)


@pytest.mark.parametrize("sync_offset", [0, 3, -2])
@pytest.mark.parametrize("backend", ["mmap", "buffered", "direct"])
@pytest.mark.parametrize("mode,quad", [("U16", False), ("R12", True)])
def test_sync_offset_and_backends(inline_ctx, tmp_path, rng, mode, quad, sync_offset, backend):
    hdr, frames = _write(tmp_path, rng, mode, quad)
    ds = inline_ctx.load("mib", path=hdr, sync_offset=sync_offset, io_backend=backend, num_partitions=2)
    expected = np.zeros((15,) + frames.shape[1:], dtype=np.int64)
    for i in range(15):
        if 0 <= i + sync_offset < 15:
            expected[i] = frames[i + sync_offset]
    roi = np.ones(NAV, dtype=bool)
    assert np.array_equal(_pick(inline_ctx, ds, roi), expected)


# -- against LiberTEM's reader --------------------------------------------------------------------

@pytest.fixture(scope="module")
def lt_ctx():
    lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")
    return lt_api.Context.make_with("inline")


def _lt_load(lt_ctx, mode, **kw):
    if mode == "R1":  # LiberTEM 0.16's mmap backend asserts on 1-bit raw files; its buffered one reads them
        from libertem.io.dataset.base import BufferedBackend

        kw["io_backend"] = BufferedBackend()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lt_ctx.load("mib", **kw)


@pytest.mark.parametrize("mode,quad", CASES)
def test_same_as_libertem(inline_ctx, lt_ctx, tmp_path, rng, mode, quad):
    from libertem.udf.raw import PickUDF as LTPick
    from libertem.udf.sum import SumUDF as LTSum

    # LiberTEM 0.16 steps through 24-bit raw files by half a frame, so it reads only their first frame
    n = 1 if mode == "R24" else 15
    nav = (1, 1) if mode == "R24" else NAV
    hdr, frames = _write(tmp_path, rng, mode, quad, n=n, nav_shape=nav)
    for sync_offset in ([0] if mode == "R24" else [0, 2, -1]):
        ours = inline_ctx.load("mib", path=hdr, sync_offset=sync_offset)
        theirs = _lt_load(lt_ctx, mode, path=hdr, sync_offset=sync_offset)
        assert ours.shape.to_tuple() == tuple(theirs.shape)
        lt_sum = lt_ctx.run_udf(dataset=theirs, udf=LTSum(dtype="float64"))["intensity"].data
        assert np.array_equal(_sum(inline_ctx, ours), lt_sum)
        roi = np.zeros(nav, dtype=bool)
        roi.flat[[0, -1]] = True
        lt_pick = lt_ctx.run_udf(dataset=theirs, udf=LTPick(), roi=roi)["intensity"].raw_data
        ours_pick = _pick(inline_ctx, ours, roi)
        if mode == "R24":  # LiberTEM 0.16 picks 24-bit raw pixels as uint16 (the low 16 bits)
            ours_pick = ours_pick.astype(np.uint16)
        assert np.array_equal(ours_pick, np.asarray(lt_pick))


# -- files, shapes, auto ------------------------------------------------------------------------

def test_sequence_sorted_by_sequence_number_not_name(inline_ctx, tmp_path, rng):
    frames = _frames(rng, "R6", False, n=24)
    hdr = write_mib(tmp_path / "seq", frames, mode="R6", nav_shape=(4, 6), frames_per_file=2)  # seq1..seq12.mib
    assert os.path.exists(tmp_path / "seq12.mib")
    for path in (hdr, str(tmp_path / "seq7.mib")):
        ds = inline_ctx.load("mib", path=path, nav_shape=(4, 6))
        assert np.array_equal(_pick(inline_ctx, ds, np.ones((4, 6), bool)), frames)
    one = inline_ctx.load("mib", path=str(tmp_path / "seq7.mib"), nav_shape=(2,), disable_glob=True)
    assert np.array_equal(_pick(inline_ctx, one, np.ones(2, bool)), frames[12:14])


def test_nav_from_hdr_scan_xy_and_extra_trigger_frames(inline_ctx, tmp_path, rng):
    frames = _frames(rng, "U16", False, n=14)
    hdr = write_mib(tmp_path / "xy", frames, mode="U16", nav_shape=(14,), scan_xy=(4, 3))  # 12 + 2 extra frames
    ds = inline_ctx.load("mib", path=hdr)
    assert ds.shape.nav.to_tuple() == (3, 4)
    assert np.array_equal(_sum(inline_ctx, ds), frames[:12].sum(axis=0))
    per_trigger = write_mib(tmp_path / "fpt", frames, mode="U16", nav_shape=(2, 7))
    assert inline_ctx.load("mib", path=per_trigger).shape.nav.to_tuple() == (2, 7)


@pytest.mark.parametrize("mode", ["R12", "U16"])
def test_sig_shape_reshaped(inline_ctx, tmp_path, rng, mode):
    hdr, frames = _write(tmp_path, rng, mode, True)
    ds = inline_ctx.load("mib", path=hdr, sig_shape=(128 * 128,))
    assert np.array_equal(_sum(inline_ctx, ds), frames.sum(axis=0).reshape(-1))
    with pytest.raises(DataSetException, match="sig_shape"):
        inline_ctx.load("mib", path=hdr, sig_shape=(100, 100))


def test_auto_detects_hdr_and_mib(inline_ctx, tmp_path, rng):
    hdr, frames = _write(tmp_path, rng, "R12", False, n=16, nav_shape=(4, 4))
    ds = inline_ctx.load("auto", path=hdr)
    assert type(ds).__name__ == "MIBDataSet" and ds.shape.to_tuple() == (4, 4, 32, 64)
    mib = hdr[:-4] + "1.mib"
    ds = inline_ctx.load("auto", path=mib)
    assert ds.shape.to_tuple() == (4, 4, 32, 64)  # 16 frames, no .hdr read: a square scan
    assert np.array_equal(_sum(inline_ctx, ds), frames.sum(axis=0))
    assert inline_ctx.load("auto", path=mib, nav_shape=(16,), sync_offset=1).shape.nav.to_tuple() == (16,)


@pytest.mark.parametrize("neighbour_mode", ["R12", "U16"])
def test_two_acquisitions_in_one_folder(inline_ctx, tmp_path, rng, neighbour_mode):
    """X.hdr/X.mib beside XRAW.hdr/XRAW.mib: "mib" on X.hdr (LiberTEM's glob X*.mib takes both) fails
    saying to pass disable_glob=True, which then works; auto takes the files named after the header."""
    frames = _frames(rng, "U16", False, 6)
    other = _frames(rng, neighbour_mode, False, 6)
    hdr = write_mib(tmp_path / "X", frames, mode="U16", nav_shape=(2, 3))
    write_mib(tmp_path / "XRAW", other, mode=neighbour_mode, nav_shape=(2, 3))
    with pytest.raises(DataSetException, match="XRAW.mib.*disable_glob=True"):
        inline_ctx.load("mib", path=hdr)
    for ds in (inline_ctx.load("mib", path=hdr, disable_glob=True), inline_ctx.load("auto", path=hdr)):
        assert ds.shape.to_tuple() == (2, 3, 32, 64)
        assert np.array_equal(_sum(inline_ctx, ds), frames.sum(axis=0))
    ds = inline_ctx.load("auto", path=str(tmp_path / "XRAW.hdr"))  # the neighbour's own header: its file
    assert np.array_equal(_sum(inline_ctx, ds), other.sum(axis=0))


def test_auto_on_a_hdr_of_numbered_files_beside_another_acquisition(inline_ctx, tmp_path, rng):
    """X1.mib..X4.mib belong to X.hdr; with XRAW.mib beside them auto says what is in the way."""
    hdr, frames = _write(tmp_path, rng, "U16", False, n=15)
    ds = inline_ctx.load("auto", path=hdr)
    assert np.array_equal(_sum(inline_ctx, ds), frames.sum(axis=0))
    write_mib(str(hdr)[:-4] + "RAW", _frames(rng, "U16", False, 3), mode="U16", nav_shape=(1, 3))
    with pytest.raises(DataSetException, match="other acquisitions.*RAW.mib"):
        inline_ctx.load("auto", path=hdr)


def test_decode_frames_on_a_stream_buffer(rng):
    """The decoders on bytes of stacked frames with headers, as a live receiver holds them."""
    for mode, quad in CASES:
        frames = _frames(rng, mode, quad, n=3)
        buf = bytearray()
        from raytile.io.testing.mib import encode_frame_data, mib_header

        data, x, y = encode_frame_data(frames, mode, quad)
        depth = int(mode[1:])
        counter = depth if mode[0] == "R" else {8: 6, 16: 12, 32: 24}[depth]
        for i, d in enumerate(data):
            buf += mib_header(i + 1, 768 if quad else 384, 4 if quad else 1, x, y,
                              "R64" if mode[0] == "R" else mode, "2x2" if quad else "1x1", counter) + d
        header = parse_frame_header(buf)
        out = decode_frames(buf, header)
        assert out.dtype == header.dtype and np.array_equal(out, frames), (mode, quad)
        assert np.array_equal(decode_frames(bytes(buf), header, dtype=np.float32), frames.astype(np.float32))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mode=st.sampled_from(["U08", "U16", "R1", "R6", "R12", "R24"]), quad=st.booleans(),
       rows=st.integers(1, 3), cols=st.integers(1, 2), n=st.integers(1, 7), per_file=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_round_trip_tiny(inline_ctx, tmp_path_factory, mode, quad, rows, cols, n, per_file, seed):
    quad = quad and mode != "R24"
    group = 64 if mode == "R1" else 8
    h, w = 2 * rows * (2 if quad else 1), group * cols * (2 if quad else 1)
    frames = np.random.default_rng(seed).integers(0, MAXV[mode] + 1, size=(n, h, w))
    d = tmp_path_factory.mktemp("rt")
    hdr = write_mib(d / "t", frames, mode=mode, quad=quad, nav_shape=(n,), frames_per_file=per_file)
    ds = inline_ctx.load("mib", path=hdr, num_partitions=min(n, 2))
    assert np.array_equal(_pick(inline_ctx, ds, np.ones(n, bool)), frames)


# -- bad files ------------------------------------------------------------------------------------

def test_bad_files(inline_ctx, tmp_path, rng):
    hdr, frames = _write(tmp_path, rng, "U16", False)
    # wrong nav shape: more frames than the files hold
    with pytest.raises(DataSetException, match="holds 15 frames"):
        inline_ctx.load("mib", path=hdr, nav_shape=(4, 4))
    # nav shape needed without a .hdr
    with pytest.raises(ConfigValidationError, match="nav_shape"):
        inline_ctx.load("mib", path=hdr[:-4] + "1.mib")
    # another format's file with a .mib name
    npy = tmp_path / "other.mib"
    np.save(tmp_path / "x.npy", frames)
    os.replace(tmp_path / "x.npy", npy)
    with pytest.raises(DataSetException, match=r"other\.mib.*not a valid MIB frame header"):
        inline_ctx.load("mib", path=str(npy), nav_shape=(15,))
    # a wrong extension
    with pytest.raises(DataSetException, match=r"\.hdr or a \.mib"):
        inline_ctx.load("mib", path=str(tmp_path / "x.raw"), nav_shape=(15,))


def test_truncated_corrupt_and_missing(inline_ctx, tmp_path, rng):
    hdr, frames = _write(tmp_path, rng, "R12", False)  # files 1..4: 4, 4, 4, 3 frames
    stride = 384 + 32 * 64 * 2
    second = hdr[:-4] + "2.mib"
    data = open(second, "rb").read()
    # truncated in the middle of the sequence
    open(second, "wb").write(data[:-100])
    with pytest.raises(DataSetException, match=r"2\.mib.*not a whole number"):
        inline_ctx.load("mib", path=hdr)
    # a corrupt header in the last frame of a file
    bad = bytearray(data)
    bad[3 * stride:3 * stride + 4] = b"XXXX"
    open(second, "wb").write(bytes(bad))
    with pytest.raises(DataSetException, match=r"2\.mib \(frame 3.*not a valid MIB frame header"):
        inline_ctx.load("mib", path=hdr)
    # a corrupt pixel depth in the first header
    bad = bytearray(data)
    bad[bad.index(b"R64")] = ord("Q")
    open(second, "wb").write(bytes(bad))
    with pytest.raises(DataSetException, match="pixel depth 'Q64'"):
        inline_ctx.load("mib", path=hdr)
    # a missing file in the sequence
    os.remove(second)
    with pytest.raises(DataSetException, match="missing frames"):
        inline_ctx.load("mib", path=hdr)
    # the last file truncated: its whole frames are read, too few for the nav shape
    last = hdr[:-4] + "4.mib"
    open(second, "wb").write(data)
    last_data = open(last, "rb").read()
    open(last, "wb").write(last_data[:-10])
    with pytest.warns(UserWarning, match="partial frame"):
        with pytest.raises(DataSetException, match="holds 14 frames"):
            inline_ctx.load("mib", path=hdr)
    # a .hdr without a scan size
    open(hdr, "w").write("HDR,\t\nCounter Depth (number):\t12\nEnd\t\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the truncated last file again
        with pytest.raises(DataSetException, match="Frames in Acquisition"):
            inline_ctx.load("mib", path=hdr)


def test_info_lists_formats_with_parameters():
    from raytile.cli import format_lines

    lines = {line.split()[0]: line for line in format_lines(["mib", "raw_csr", "auto"])}
    assert "path*" in lines["mib"] and "sync_offset=0" in lines["mib"] and "disable_glob=False" in lines["mib"]
    assert "path*" in lines["raw_csr"] and "path*" in lines["auto"]


def test_served_schema_has_the_new_formats():
    """Serve builds its JSON schemas from the declared parameters: mib's bool parameter has a JSON form."""
    from raytile.serve.datasets import served_formats

    formats = served_formats()
    assert formats["mib"]["properties"]["disable_glob"] == {"type": "boolean"}
    assert formats["mib"]["required"] == ["path"] and formats["raw_csr"]["required"] == ["path"]
    assert "auto" in formats


def test_corrections_on_raw_frames(inline_ctx, tmp_path, rng):
    """Dark frame and gain applied to decoded raw quad frames, as on any other format (float32)."""
    hdr, frames = _write(tmp_path, rng, "R12", True)
    dark = rng.integers(0, 10, size=(128, 128)).astype(np.float32)
    gain = rng.uniform(0.5, 1.5, size=(128, 128)).astype(np.float32)
    ds = inline_ctx.load("mib", path=hdr)
    res = inline_ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF(), corrections=rt.io.CorrectionSet(dark=dark, gain=gain))
    expected = ((frames.astype(np.float32) - dark) * gain).sum(axis=0)
    assert np.allclose(res["intensity"].data, expected, rtol=1e-5)


def test_diagnostics_and_pickled_partitions(inline_ctx, tmp_path, rng):
    import pickle

    hdr, frames = _write(tmp_path, rng, "R12", True)
    ds = inline_ctx.load("mib", path=hdr, num_partitions=2)
    diag = {d["name"]: d["value"] for d in ds.get_diagnostics()}
    assert diag["MIB frames"].startswith("R64 counter depth 12, 4 chip(s) 2x2, 128x128")
    assert diag["decoder"] == "MIB raw 12-bit quad" and diag["files"] == "4"
    part = pickle.loads(pickle.dumps(ds.get_partitions()[1]))  # what Ray ships to a worker
    tiles = [np.array(t.data) for t in part.get_tiles(rt.common.tiling.TilingScheme.make_for_shape(
        rt.common.shape.Shape((3, 128, 128), sig_dims=2), ds.shape))]  # tiles reuse buffers: copies
    got = np.concatenate(tiles)
    assert np.array_equal(got, frames[part.start:part.stop].reshape(got.shape))
