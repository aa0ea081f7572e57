"""File formats read through every IO backend, several tilings, ROI and corrections, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.io import CorrectionSet
from raytile.io.corrections import reference_correct
from raytile.io.formats.packed import pack_bits
from raytile.io.formats.tiled import write_tiled
from raytile.io.read_ranges import LAYOUT_CHUNKED
from raytile.udf import SumSigUDF, SumUDF

BACKENDS = ["mmap", "buffered", "direct"]
NAV, SIG = (5, 7), (16, 12)


class RecordTiles(rt.UDF):
    """Copies every tile with its slice (and a per-frame sum for the nav buffer)."""

    def __init__(self, depth=None, total_size=None):
        super().__init__(depth=depth, total_size=total_size)

    def get_result_buffers(self):
        return {"s": self.buffer(kind="nav", dtype="float64")}

    def get_tiling_preferences(self):
        prefs = {}
        if self.params.depth is not None:
            prefs["depth"] = self.params.depth
        if self.params.total_size is not None:
            prefs["total_size"] = self.params.total_size
        return prefs

    def process_tile(self, tile):
        self.results.s[:] += tile.reshape(tile.shape[0], -1).sum(axis=1)
        RecordTiles.seen.append((self.meta.slice, np.array(tile)))


RecordTiles.seen = []


def assemble(seen, n, sig, dtype=np.float64):
    out = np.full((n,) + sig, np.nan, dtype=dtype)
    for sl, tile in seen:
        out[sl.get()] = tile
    return out


def check_read(ctx, ds, frames, roi=None, corrections=None, tilings=((None, None), (3, 200), (4, None)),
               no_tile=None):
    """Sum, SumSig and the recorded tiles agree with numpy for several tilings. ``no_tile``: (flat,
    ROI-less) positions without a frame of the data (a sync_offset's), which get no tile."""
    flat = frames.reshape((-1,) + frames.shape[len(ds.shape.nav):])
    ref = flat if corrections is None else reference_correct(flat, corrections)
    sel = ref if roi is None else ref[roi.reshape(-1)]
    for depth, total in tilings:
        RecordTiles.seen = []
        res = ctx.run_udf(dataset=ds, udf=[SumUDF(dtype="float64"), SumSigUDF(), RecordTiles(depth, total)],
                          roi=roi, corrections=corrections)
        np.testing.assert_allclose(res[0]["intensity"].data, sel.sum(axis=0, dtype=np.float64), rtol=1e-5)
        sumsig = res[1]["intensity"].data.reshape(-1)
        want = ref.reshape(len(ref), -1).sum(axis=1, dtype=np.float64)
        mask = slice(None) if roi is None else roi.reshape(-1)
        np.testing.assert_allclose(sumsig[mask], want[mask], rtol=1e-5)
        got, want = assemble(RecordTiles.seen, len(sel), ref.shape[1:]), sel
        if no_tile is not None:
            nt = no_tile if roi is None else no_tile[roi.reshape(-1)]
            assert np.isnan(got[nt]).all()  # no tile there
            got, want = got[~nt], sel[~nt]
        np.testing.assert_allclose(got, want, rtol=1e-5)
        if total is not None:
            assert any(sl.shape[1:] != ref.shape[1:] for sl, _ in RecordTiles.seen), "expected sig-sliced tiles"


@pytest.fixture
def frames(rng):
    return rng.integers(0, 4000, NAV + SIG).astype(np.uint16)


@pytest.fixture
def roi(rng):
    r = rng.random(NAV) > 0.4
    r[0, 0] = True
    return r


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_every_backend_roi_tilings(inline_ctx, tmp_path, frames, roi, backend):
    p = tmp_path / "a.raw"
    frames.tofile(p)
    ds = inline_ctx.load("raw", path=p, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=3,
                         io_backend=backend)
    check_read(inline_ctx, ds, frames)
    check_read(inline_ctx, ds, frames, roi=roi)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_headers_footers_many_files_big_endian(inline_ctx, tmp_path, frames, roi, backend):
    flat = frames.reshape(-1, *SIG).astype(">f4")
    paths = []
    for i, chunk in enumerate(np.array_split(flat, 4)):  # files of 9, 9, 9, 8 frames
        p = tmp_path / f"part{i:02d}.bin"
        with open(p, "wb") as f:
            f.write(b"FILEHEAD" * 4)  # 32-byte file header
            for fr in chunk:
                f.write(b"H" * 24 + fr.tobytes() + b"F" * 8)
        paths.append(p)
    kw = dict(nav_shape=NAV, sig_shape=SIG, dtype=">f4", file_header_bytes=32, frame_header_bytes=24,
              frame_footer_bytes=8, num_partitions=2, io_backend=backend)
    ds = inline_ctx.load("raw", path=str(tmp_path / "part*.bin"), **kw)
    assert len(ds.fileset.files) == 4 and ds.dtype == np.float32
    check_read(inline_ctx, ds, frames.astype(np.float32), roi=roi)
    ds2 = inline_ctx.load("raw", path=[str(p) for p in paths], **kw)
    check_read(inline_ctx, ds2, frames.astype(np.float32), tilings=((None, None),))


@pytest.mark.parametrize("backend", ["mmap", "buffered"])
def test_raw_many_files_straight_and_sync_offset(inline_ctx, tmp_path, frames, backend):
    flat = frames.reshape(-1, *SIG)
    for i in range(5):
        flat[i * 7:(i + 1) * 7].tofile(tmp_path / f"f{i}.raw")
    ds = inline_ctx.load("raw", path=str(tmp_path / "f*.raw"), nav_shape=NAV, sig_shape=SIG, dtype="uint16",
                         num_partitions=2, io_backend=backend)
    check_read(inline_ctx, ds, frames, tilings=((4, None), (3, 200)))
    shifted = np.zeros_like(flat)
    shifted[2:] = flat[:-2]
    no_tile = np.zeros(len(flat), bool)
    no_tile[:2] = True  # moved before the first frame: no tile, as in LiberTEM
    ds = inline_ctx.load("raw", path=str(tmp_path / "f*.raw"), nav_shape=NAV, sig_shape=SIG, dtype="uint16",
                         sync_offset=-2, num_partitions=2, io_backend=backend)
    check_read(inline_ctx, ds, shifted.reshape(frames.shape), tilings=((4, None),), no_tile=no_tile)


@pytest.mark.parametrize("backend", BACKENDS)
def test_raw_corrections(inline_ctx, tmp_path, frames, roi, rng, backend):
    p = tmp_path / "a.raw"
    frames.tofile(p)
    dark = rng.random(SIG).astype(np.float32) * 10
    gain = 1 + rng.random(SIG).astype(np.float32)
    corr = CorrectionSet(dark=dark, gain=gain, excluded_pixels=[(5, 5), (10, 3)])
    ds = inline_ctx.load("raw", path=p, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=2,
                         io_backend=backend)
    # whole frames, and sig slices whose cuts (rows 8, 4...) do not touch the excluded pixels' neighbours
    check_read(inline_ctx, ds, frames, roi=roi, corrections=corr, tilings=((None, None), (2, 8 * 12 * 4)))  # float32: 8-row slices


def whole_frame_patch_reference(frames: np.ndarray, excluded: list) -> np.ndarray:
    """Plain loops: each excluded pixel becomes the mean of its non-excluded 8-neighbours in the whole frame."""
    out = frames.astype(np.float64)
    h, w = frames.shape[1:]
    bad = set(excluded)
    for y, x in excluded:
        nbs = [(y + dy, x + dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
               if (dy or dx) and 0 <= y + dy < h and 0 <= x + dx < w and (y + dy, x + dx) not in bad]
        out[:, y, x] = np.mean([frames[:, ny, nx] for ny, nx in nbs], axis=0, dtype=np.float64)
    return out


@pytest.mark.parametrize("backend", ["mmap", "buffered"])
def test_excluded_pixels_on_tile_cuts_equal_whole_frame_patching(inline_ctx, tmp_path, frames, backend):
    p = tmp_path / "a.raw"
    frames.tofile(p)
    ds = inline_ctx.load("raw", path=p, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=2,
                         io_backend=backend)
    # 4-row float32 slices cut between rows 3|4, 7|8, 11|12: pixels on both sides of cuts, a pair across one
    excluded = [(3, 5), (4, 0), (7, 11), (8, 11), (12, 6), (0, 0), (15, 11)]
    corr = CorrectionSet(excluded_pixels=excluded)
    ref = whole_frame_patch_reference(frames.reshape(-1, *SIG), excluded)
    RecordTiles.seen = []
    res = inline_ctx.run_udf(dataset=ds, udf=[SumUDF(dtype="float64"), RecordTiles(2, 4 * 12 * 4)],
                             corrections=corr)
    np.testing.assert_allclose(res[0]["intensity"].data, ref.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(assemble(RecordTiles.seen, len(ref), SIG), ref, rtol=1e-5)
    assert all(sl.shape[1:] == SIG for sl, _ in RecordTiles.seen), "cut neighbourhoods need whole frames"
    # excluded pixels away from the cuts keep the sig-sliced tiling
    RecordTiles.seen = []
    inline_ctx.run_udf(dataset=ds, udf=RecordTiles(2, 4 * 12 * 4), corrections=CorrectionSet(excluded_pixels=[(5, 5)]))
    assert all(sl.shape[1:] == (4, 12) for sl, _ in RecordTiles.seen)


def test_dataset_own_corrections(inline_ctx, tmp_path, frames):
    p = tmp_path / "a.raw"
    frames.tofile(p)
    corr = CorrectionSet(dark=np.full(SIG, 3, np.float32))
    ds = inline_ctx.load("raw", path=p, nav_shape=NAV, sig_shape=SIG, dtype="uint16", corrections=corr)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF())
    np.testing.assert_allclose(res["intensity"].data, frames.reshape(-1, *SIG).sum(axis=0) - 3 * 35, rtol=1e-6)


def test_corrections_errors():
    from raytile.common import Shape

    with pytest.raises(DataSetException, match="dark frame has shape"):
        CorrectionSet(dark=np.zeros((3, 3))).check(Shape((4, 16, 12), sig_dims=2))
    with pytest.raises(DataSetException, match="out of range"):
        CorrectionSet(excluded_pixels=[(20, 1)]).check(Shape((4, 16, 12), sig_dims=2))
    assert not CorrectionSet().have_corrections()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits,order", [(12, "lsb"), (12, "msb"), (1, "msb"), (1, "lsb"), (6, "lsb"), (6, "msb")])
def test_packed(inline_ctx, tmp_path, rng, roi, backend, bits, order):
    sig = (16, 13)  # odd width: runs start mid-group
    frames = rng.integers(0, 1 << bits, NAV + sig).astype(np.uint16)
    p = tmp_path / "p.bin"
    p.write_bytes(pack_bits(frames.reshape(-1, *sig), bits, order))
    ds = inline_ctx.load("packed_raw", path=p, nav_shape=NAV, sig_shape=sig, bits=bits, bit_order=order,
                         io_backend=backend, num_partitions=2)
    check_read(inline_ctx, ds, frames, roi=roi, tilings=((None, None), (3, 120)))


def test_pack_12bit_layout():
    """The documented 12-bit layouts, checked by hand."""
    v = np.array([[0xABC, 0x123]], dtype=np.uint16)
    assert pack_bits(v, 12, "lsb") == bytes([0xBC, 0x3A, 0x12])
    assert pack_bits(v, 12, "msb") == bytes([0xAB, 0xC1, 0x23])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiled_format_tiles_follow_layout(inline_ctx, tmp_path, frames, roi, backend):
    p = tmp_path / "t.rtt"
    write_tiled(p, frames, tile_depth=4, tile_h=8, tile_w=4)
    ds = inline_ctx.load("tiled", path=p, nav_shape=NAV, io_backend=backend, num_partitions=2)
    part = ds.get_partitions()[0]
    assert part.get_base_shape(None) == (4, 8, 4)
    RecordTiles.seen = []
    inline_ctx.run_udf(dataset=ds, udf=RecordTiles(depth=6, total_size=300))
    shapes = {sl.shape.to_tuple()[1:] for sl, _ in RecordTiles.seen}
    assert shapes == {(8, 4)}, shapes
    assert all(sl.origin[1] % 8 == 0 and sl.origin[2] % 4 == 0 for sl, _ in RecordTiles.seen)
    check_read(inline_ctx, ds, frames, tilings=((None, None), (6, 300)))
    check_read(inline_ctx, ds, frames, roi=roi, tilings=((6, 300),))


def test_tiled_frame_method_gets_whole_frames(inline_ctx, tmp_path, frames):
    p = tmp_path / "t.rtt"
    write_tiled(p, frames, tile_depth=4, tile_h=8, tile_w=4)
    ds = inline_ctx.load("tiled", path=p, nav_shape=NAV)
    res = inline_ctx.run_udf(dataset=ds, udf=rt.udf.AutoUDF(f=lambda fr: fr.sum()))
    np.testing.assert_allclose(res["result"].data, frames.sum(axis=(2, 3)))


@pytest.mark.parametrize("chunks, compression, dtype", [
    (None, None, "<u2"), (None, None, ">i4"),  # contiguous: read straight from the file
    ((1, 4, 8, 6), "gzip", "<u2"), ((2, 7, 16, 12), "gzip", "<u2"),  # through h5py
    ((2, 3, 16, 12), None, ">f4"), ((1, 2, 16, 12), None, "<u2"),  # chunk offsets, edge chunks, byte order
])
def test_hdf5(inline_ctx, tmp_path, frames, roi, chunks, compression, dtype):
    h5py = pytest.importorskip("h5py")  # here, not at module level: a missing h5py skips only the hdf5 tests
    p = tmp_path / "d.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("entry/data", data=frames.astype(dtype), chunks=chunks, compression=compression)
    ds = inline_ctx.load("hdf5", path=p, ds_path="/entry/data", num_partitions=2)
    how = {d["name"]: d["value"] for d in ds.get_diagnostics()}["read"]
    assert how == ("with h5py" if compression else "directly from the file")
    if compression is None and chunks is not None:
        assert ds.get_partitions()[0].fileset.layout == LAYOUT_CHUNKED
    if chunks:
        assert ds.get_partitions()[0].get_base_shape(None) == (chunks[1],) + chunks[2:]
    whole_frame_chunks = chunks is not None and chunks[2:] == SIG
    check_read(inline_ctx, ds, frames, roi=roi,
               tilings=((None, None), (4, None)) if whole_frame_chunks else ((None, None), (3, 200), (4, None)))
    if whole_frame_chunks:  # chunks hold whole frames: tiles never cut them, depth follows the chunk depth
        RecordTiles.seen = []
        inline_ctx.run_udf(dataset=ds, udf=RecordTiles(depth=5, total_size=200))
        assert {sl.shape.to_tuple()[1:] for sl, _ in RecordTiles.seen} == {SIG}
    if chunks == (1, 4, 8, 6):
        RecordTiles.seen = []
        inline_ctx.run_udf(dataset=ds, udf=RecordTiles(depth=4, total_size=2000))
        for sl, _ in RecordTiles.seen:
            assert sl.origin[1] % 8 == 0 and sl.origin[2] % 6 == 0 and sl.shape[0] <= 4


def test_json_params_and_cache_key(inline_ctx, tmp_path, frames, rng):
    from raytile.io import dataset_from_json

    p = tmp_path / "a.raw"
    frames.tofile(p)
    ds = dataset_from_json({"type": "raw", "path": str(p), "nav_shape": list(NAV), "sig_shape": list(SIG),
                            "dtype": "uint16", "io_backend": "buffered"}).initialize(inline_ctx.executor)
    assert ds.io_backend == "buffered" and ds.shape.to_tuple() == NAV + SIG
    names = {d["name"] for d in ds.get_diagnostics()}
    assert {"files", "io backend", "decoder"} <= names
    with pytest.raises(ConfigValidationError, match="'nav_shape'.*list of"):
        dataset_from_json({"type": "raw", "path": str(p), "nav_shape": "5x7", "sig_shape": [16, 12],
                           "dtype": "uint16"})
    with pytest.raises(ConfigValidationError, match="'dtype' is required"):
        dataset_from_json({"type": "raw", "path": str(p), "nav_shape": [5, 7], "sig_shape": [16, 12]})
    with pytest.raises(ConfigValidationError, match="unknown parameter"):
        dataset_from_json({"type": "npy", "path": str(p), "bogus": 1})
    with pytest.raises(ConfigValidationError, match="unknown data set format"):
        dataset_from_json({"type": "nope"})
    q = tmp_path / "b.raw"
    (frames + 1).tofile(q)
    ds2 = inline_ctx.load("raw", path=q, nav_shape=NAV, sig_shape=SIG, dtype="uint16")
    ds3 = inline_ctx.load("raw", path=p, nav_shape=NAV, sig_shape=SIG, dtype="uint16")
    assert ds.get_cache_key() != ds2.get_cache_key()
    assert ds.get_cache_key() == ds3.get_cache_key()


def test_initialize_runs_through_executor(tmp_path, frames):
    calls = []

    class Exec:
        num_workers = 1

        def run_function(self, fn, *args):
            import pickle

            calls.append(fn.__name__)
            out = fn(*pickle.loads(pickle.dumps(args)))  # a copy, as on a remote worker
            return pickle.loads(pickle.dumps(out))

    p = tmp_path / "a.raw"
    frames.tofile(p)
    ds = rt.io.get_format("raw")(path=p, nav_shape=NAV, sig_shape=SIG, dtype="uint16")
    ds.initialize(Exec())
    assert calls and ds.shape.to_tuple() == NAV + SIG and len(ds.fileset.files) == 1


def test_corrections_on_float32_file_read_straight(inline_ctx, tmp_path, frames):
    p = tmp_path / "f.raw"
    frames.astype(np.float32).tofile(p)
    corr = CorrectionSet(dark=np.ones(SIG, np.float32))
    ds = inline_ctx.load("raw", path=p, nav_shape=NAV, sig_shape=SIG, dtype="float32")
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(), corrections=corr)
    np.testing.assert_allclose(res["intensity"].data, frames.reshape(-1, *SIG).sum(axis=0) - 35, rtol=1e-6)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF())  # the file map is untouched
    np.testing.assert_allclose(res["intensity"].data, frames.reshape(-1, *SIG).sum(axis=0), rtol=1e-6)
