"""Read-range arrays on small shapes with hand-checked offsets, and bad files with clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.common import Shape, TilingScheme
from raytile.io.fileset import File, FileSet
from raytile.io.read_ranges import plan_block_reads, slice_runs


def scheme(tileshape, ds_shape):
    return TilingScheme.make_for_shape(Shape(tileshape, sig_dims=2), Shape(ds_shape, sig_dims=2))


def test_whole_frames_one_file_headers():
    # 3 frames of 2x4 uint16, file header 10, frame header 6, footer 2: stride 6 + 16 + 2 = 24
    fs = FileSet([File("x", 0, 3, 10)], (2, 4), 16, frame_header_bytes=6, frame_footer_bytes=2)
    meta, rr = fs.get_read_ranges(np.array([0, 1, 2]), scheme((2, 2, 4), (3, 2, 4)))
    # (first, count, slice, n_rr, lowest file, highest file, blank frames)
    assert meta.tolist() == [[0, 2, 0, 2, 0, 0, 0], [2, 1, 0, 1, 0, 0, 0]]
    # (file, start, stop, out_start, n_px, skip)
    assert rr[0, :2].tolist() == [[0, 16, 32, 0, 8, 0], [0, 40, 56, 8, 8, 0]]
    assert rr[1, 0].tolist() == [0, 64, 80, 0, 8, 0]


def test_sig_slices_rows_and_two_files():
    # frames of 2x4 uint8; file 0 has frames 0-1, file 1 frames 2-3; tiles 1 frame x 1 row x 2 px
    fs = FileSet([File("a", 0, 2), File("b", 2, 4)], (2, 4), 8)
    meta, rr = fs.get_read_ranges(np.array([1, 2]), scheme((2, 1, 2), (4, 2, 4)))
    assert meta[:, 2].tolist() == [0, 1, 2, 3]  # four sig slices, one nav block
    assert meta[:, 4:].tolist() == [[0, 1, 0]] * 4  # every tile reads files 0..1
    # slice 3: row 1, x 2..4 -> px 6..8; frame 1 in file 0 at byte 8, frame 2 = file 1 frame 0
    assert rr[3, :2].tolist() == [[0, 14, 16, 0, 2, 0], [1, 6, 8, 2, 2, 0]]


def test_packed_12bit_ranges_start_mid_group():
    # 12-bit, frames 1x5 -> 3 groups (9 bytes) per frame; slice x 1..5 starts at the 2nd pixel of group 0
    fs = FileSet([File("p", 0, 2)], (1, 5), 12)
    assert fs.frame_stride == 9
    meta, rr = fs.get_read_ranges(np.array([1]), scheme((1, 1, 4), (2, 1, 5)))
    # slice 0: px 0..4 of frame 1 -> bytes 9..15; slice 1: px 4..5 -> group 2 -> bytes 15..18
    assert rr[0, 0].tolist() == [0, 9, 15, 0, 4, 0]
    assert rr[1, 0].tolist() == [0, 15, 18, 0, 1, 0]
    fs1 = FileSet([File("p", 0, 2)], (1, 16), 1)  # 1-bit: 8 px per byte
    meta, rr = fs1.get_read_ranges(np.array([0]), scheme((1, 1, 3), (2, 1, 16)))
    assert rr[3, 0].tolist() == [0, 1, 2, 0, 3, 1]  # px 9..12 -> byte 1, skip 1 pixel


def test_frames_outside_files_are_blank():
    fs = FileSet([File("a", 0, 2)], (1, 2), 8)
    meta, rr = fs.get_read_ranges(np.array([-1, 0]), scheme((2, 1, 2), (2, 1, 2)))
    assert rr[0, 0].tolist() == [-1, 0, 0, 0, 2, 0]
    assert rr[0, 1].tolist() == [0, 0, 2, 2, 2, 0]
    assert meta[0, 4:].tolist() == [0, 0, 1]


def test_slice_runs_merge_and_split():
    s = scheme((1, 2, 4), (1, 4, 4))
    runs, n_runs, px = slice_runs(s.sig_slices, (4, 4))
    assert n_runs.tolist() == [1, 1] and runs[1, 0].tolist() == [8, 16, 0]
    runs, n_runs, px = slice_runs(s.sig_slices, (4, 4), split_x=2)
    assert n_runs.tolist() == [4, 4]
    assert runs[0].tolist() == [[0, 2, 0], [2, 4, 2], [4, 6, 4], [6, 8, 6]]


def test_plan_block_reads_coalesces_and_aligns():
    fs = FileSet([File("a", 0, 4)], (1, 4), 8)
    meta, rr = fs.get_read_ranges(np.array([0, 3]), scheme((2, 1, 4), (4, 1, 4)))
    reads, trr = plan_block_reads(rr, meta, 0, 1, 1, 0)
    assert reads.tolist() == [[0, 0, 4, 0], [0, 12, 16, 4]]
    assert trr[0, :2, 1:3].tolist() == [[0, 4], [4, 8]]
    reads, trr = plan_block_reads(rr, meta, 0, 1, 4096, 65536)
    assert reads.tolist() == [[0, 0, 4096, 0]]
    assert trr[0, 1, 1:3].tolist() == [12, 16]


# -- bad files ----------------------------------------------------------------

def test_truncated_raw_file_in_a_set(inline_ctx, tmp_path):
    (tmp_path / "a0.raw").write_bytes(b"\0" * 50)  # not whole frames, and not the last file
    np.zeros((3, 4, 4), np.uint16).tofile(tmp_path / "a1.raw")
    with pytest.raises(DataSetException, match=r"a0\.raw.*not a multiple of the frame size"):
        inline_ctx.load("raw", path=str(tmp_path / "a*.raw"), nav_shape=(4,), sig_shape=(4, 4), dtype="uint16")


def test_missing_files(inline_ctx, tmp_path):
    with pytest.raises(DataSetException, match=r"no files match.*nothing\*\.raw"):
        inline_ctx.load("raw", path=str(tmp_path / "nothing*.raw"), nav_shape=(4,), sig_shape=(4, 4), dtype="u2")
    with pytest.raises(DataSetException, match=r"file not found: .*gone\.raw"):
        inline_ctx.load("raw", path=[str(tmp_path / "gone.raw")], nav_shape=(4,), sig_shape=(4, 4), dtype="u2")


def test_wrong_bit_depth(inline_ctx, tmp_path):
    from raytile.io.formats.packed import pack_bits

    p = tmp_path / "p12.bin"
    p.write_bytes(pack_bits(np.zeros((4, 4, 5), np.uint16), 12))  # 4 frames of 30 bytes
    with pytest.raises(DataSetException, match=r"p12\.bin.*not a multiple of the frame size"):
        inline_ctx.load("packed_raw", path=p, nav_shape=(4,), sig_shape=(4, 5), bits=10)
    with pytest.raises(ConfigValidationError, match="parameter 'dtype' uint8 cannot hold 12-bit"):
        inline_ctx.load("packed_raw", path=p, nav_shape=(4,), sig_shape=(4, 5), bits=12, dtype="uint8")


def test_tiled_wrong_header_and_truncated(inline_ctx, tmp_path):
    from raytile.io.formats.tiled import write_tiled

    p = tmp_path / "bad.rtt"
    p.write_bytes(b"NOTATILEFILE" + b"\0" * 60)
    with pytest.raises(DataSetException, match=r"bad\.rtt: not a raytile tiled file"):
        inline_ctx.load("tiled", path=p)
    q = tmp_path / "short.rtt"
    write_tiled(q, np.zeros((8, 8, 8), np.uint16), 4, 4, 4)
    q.write_bytes(q.read_bytes()[:-10])
    with pytest.raises(DataSetException, match=r"short\.rtt: file is too short"):
        inline_ctx.load("tiled", path=q)


def test_hdf5_missing_path_and_not_hdf5(inline_ctx, tmp_path):
    h5py = pytest.importorskip("h5py")
    p = tmp_path / "d.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("data", data=np.zeros((2, 4, 4)))
    with pytest.raises(DataSetException, match=r"d\.h5: no dataset '/entry/nope'.*'/data'"):
        inline_ctx.load("hdf5", path=p, ds_path="/entry/nope")
    q = tmp_path / "x.h5"
    q.write_bytes(b"garbage" * 10)
    with pytest.raises(DataSetException, match=r"x\.h5: cannot open as HDF5"):
        inline_ctx.load("hdf5", path=q, ds_path="data")


def test_unknown_backend(inline_ctx, tmp_path):
    with pytest.raises(ConfigValidationError,
                       match=r"parameter 'io_backend' must be one of \['buffered', 'direct', 'mmap'\], got 'floppy'"):
        inline_ctx.load("raw", path=tmp_path / "a", nav_shape=(1,), sig_shape=(1,), dtype="u1", io_backend="floppy")


def test_negotiator_base_shape_with_frame_and_tile_methods():
    import raytile as rt
    from raytile.io.negotiator import Negotiator

    class P:  # a partition with a (2, 4, 4) native tile
        meta = type("M", (), {"shape": Shape((8, 8, 8), sig_dims=2)})()
        shape = (8, 8, 8)

        def get_base_shape(self, roi):
            return (2, 4, 4)

        def adjust_tileshape(self, t, roi):
            return t

        def get_io_size(self):  # no read size of its own: the negotiator's default
            return None

    class T(rt.UDF):
        def get_tiling_preferences(self):
            return {"depth": 3, "total_size": 64}

        def process_tile(self, tile):
            pass

    class F(rt.UDF):
        def process_frame(self, frame):
            pass

    s = Negotiator().get_scheme([T()], P(), np.dtype("uint16"))
    assert s.tileshape.to_tuple() == (2, 4, 4)
    s = Negotiator().get_scheme([T(), F()], P(), np.dtype("uint16"))
    assert s.sig_shape == (8, 8) and s.depth % 2 == 0


# -- decoders -------------------------------------------------------------------

@pytest.mark.parametrize("bits", [1, 3, 6, 10, 12, 20])
@pytest.mark.parametrize("order", ["lsb", "msb"])
def test_packed_decoders_against_pack_bits(bits, order, rng):
    from raytile.io.decoders import PackedDecoder
    from raytile.io.formats.packed import pack_bits
    from raytile.io.read_ranges import frames_px_to_bytes

    n_px = 37
    values = rng.integers(0, 1 << bits, (1, n_px))
    packed = np.frombuffer(pack_bits(values, bits, order), dtype=np.uint8)
    decode, args = PackedDecoder(bits, order).tile_decoder()
    for px_start, px_stop in [(0, n_px), (1, n_px), (3, 4), (5, 30), (n_px - 1, n_px)]:
        start, stop, skip = frames_px_to_bytes(bits, 0, px_start, px_stop, n_px, 0, 0, 0)
        rr = np.array([[0, start, stop, 0, px_stop - px_start, skip]], dtype=np.int64)
        for out_dtype in (np.uint32, np.float32):
            out = np.zeros(px_stop - px_start, dtype=out_dtype)
            decode(packed, rr, out, *args)
            np.testing.assert_array_equal(out, values[0, px_start:px_stop])


@pytest.mark.parametrize("dtype", [">u2", ">f4", "<i4", "?", ">f8"])
def test_native_decoders(dtype, rng):
    from raytile.io.decoders import NativeDecoder

    values = (rng.random(9) * 100).astype(dtype)
    raw = np.frombuffer(values.tobytes(), dtype=np.uint8)
    decode, args = NativeDecoder(dtype).tile_decoder()
    isz = values.dtype.itemsize
    rr = np.array([[0, 2 * isz, 7 * isz, 1, 5, 0]], dtype=np.int64)
    out = np.zeros(6, dtype=np.float64)
    decode(raw, rr, out, *args)
    np.testing.assert_array_equal(out[1:], values[2:7].astype(np.float64))


# -- whole frames: numpy alone -------------------------------------------------------

@pytest.mark.parametrize("backend", ["mmap", "buffered", "direct"])
@pytest.mark.parametrize("file_dtype, dest_dtype", [
    ("<u2", "<u2"), ("<u2", "float32"), (">u2", "uint16"), (">f4", "float64"), ("|b1", "bool"), ("|b1", "uint8"),
])
@pytest.mark.parametrize("headers", [(0, 0, 0), (10, 3, 5)])
def test_whole_frames_read_by_numpy_alone(inline_ctx, tmp_path, monkeypatch, rng, backend, file_dtype, dest_dtype,
                                          headers):
    """Whole frames (several files, any byte order, file/frame headers and footers), ROI, frames outside
    the files, sig-sliced tiles: read by numpy alone, equal to numpy."""
    import raytile.io.decoders as decoders
    import raytile.io.fileset as fileset

    def jitted(*args, **kwargs):
        raise AssertionError("a plain file set went through the numba read-range/decode path")

    monkeypatch.setattr(decoders, "decode_native_tile", jitted)
    monkeypatch.setattr(fileset, "get_read_ranges", jitted)
    sig = (6, 5)
    data = (rng.random((15,) + sig) * 300).astype(file_dtype)
    file_header, frame_header, frame_footer = headers
    paths = []
    for i, (a, b) in enumerate([(0, 5), (5, 11), (11, 15)]):
        paths.append(str(tmp_path / f"p{i}.raw"))
        with open(paths[-1], "wb") as f:
            f.write(b"F" * file_header)
            for frame in data[a:b]:
                f.write(b"H" * frame_header + frame.tobytes() + b"T" * frame_footer)
    roi = rng.random(15) > 0.5
    roi[[0, 14]] = True
    for sync_offset in (0, -3, 2):
        ds = inline_ctx.load("raw", path=paths, nav_shape=(15,), sig_shape=sig, dtype=file_dtype,
                             sync_offset=sync_offset, num_partitions=2, io_backend=backend,
                             file_header_bytes=file_header, frame_header_bytes=frame_header,
                             frame_footer_bytes=frame_footer)
        ref = np.zeros((15,) + sig, dtype=dest_dtype)
        lo, hi = max(0, -sync_offset), min(15, 15 - sync_offset)
        ref[lo:hi] = data[lo + sync_offset:hi + sync_offset]
        for r in (None, roi):
            want = ref if r is None else ref[r]
            for tileshape in ((4, 6, 5), (3, 2, 5), (2, 3, 2)):
                got = np.full_like(want, 7)
                for p in ds.get_partitions():
                    tiles = p.get_tiles(scheme(tileshape, (15,) + sig), roi=r, dest_dtype=dest_dtype)
                    for tile in tiles:
                        assert tile.data.dtype == np.dtype(dest_dtype)
                        got[tile.tile_slice.get()] = tile.data
                np.testing.assert_array_equal(got, want, err_msg=f"{sync_offset=} {tileshape=} roi={r is not None}")


def test_plain_file_whole_blocks_are_views_of_the_map(inline_ctx, tmp_path):
    data = np.arange(8 * 4 * 4, dtype=np.uint16).reshape(8, 4, 4)
    data.tofile(tmp_path / "a.raw")
    ds = inline_ctx.load("raw", path=tmp_path / "a.raw", nav_shape=(8,), sig_shape=(4, 4), dtype="uint16")
    tiles = list(ds.get_partitions()[0].get_tiles(scheme((4, 4, 4), (8, 4, 4)), dest_dtype="uint16"))
    assert [t.data.flags.writeable for t in tiles] == [False, False]  # read-only views of the file map
    np.testing.assert_array_equal(np.concatenate([t.data for t in tiles]), data)
