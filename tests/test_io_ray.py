"""File formats read by Ray workers: SumUDF/SumSigUDF against numpy for each format, and corrections."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.io import CorrectionSet
from raytile.io.formats.packed import pack_bits
from raytile.io.formats.sparse import save_npz_csr
from raytile.io.formats.tiled import write_tiled
from raytile.udf import SumSigUDF, SumUDF
from test_io_formats import whole_frame_patch_reference

pytestmark = pytest.mark.ray

NAV, SIG = (4, 6), (16, 12)


class SlicedSum(rt.UDF):
    """Sums frames tile by tile with small sig-sliced tiles (4 rows of float32 x 2 frames)."""

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="sig", dtype="float64")}

    def get_tiling_preferences(self):
        return {"depth": 2, "total_size": 2 * 4 * SIG[1] * 4}

    def process_tile(self, tile):
        self.results.intensity[:] += tile.sum(axis=0)

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity


@pytest.fixture(scope="module")
def frames():
    return np.random.default_rng(7).integers(0, 4000, NAV + SIG).astype(np.uint16)


def check_sums(ctx, ds, frames, udfs=None):
    flat = frames.reshape(-1, *SIG).astype(np.float64)
    res = ctx.run_udf(dataset=ds, udf=udfs or [SumUDF(dtype="float64"), SumSigUDF()])
    np.testing.assert_allclose(res[0]["intensity"].data, flat.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(res[1]["intensity"].data, flat.sum(axis=(1, 2)).reshape(NAV), rtol=1e-6)


def write_raw_with_headers(tmp_path, frames):
    """Big-endian frames in 3 files, each with a file header and per-frame headers/footers."""
    flat = frames.reshape(-1, *SIG).astype(">u2")
    for i, chunk in enumerate(np.array_split(flat, 3)):
        with open(tmp_path / f"part{i}.bin", "wb") as f:
            f.write(b"HEAD" * 4)
            for fr in chunk:
                f.write(b"h" * 6 + fr.tobytes() + b"f" * 2)
    return dict(path=str(tmp_path / "part*.bin"), nav_shape=NAV, sig_shape=SIG, dtype=">u2",
                file_header_bytes=16, frame_header_bytes=6, frame_footer_bytes=2)


@pytest.mark.parametrize("backend", ["mmap", "buffered", "direct"])
def test_raw_headers_many_files(ray_context, tmp_path, frames, backend):
    kw = write_raw_with_headers(tmp_path, frames)
    ds = ray_context.load("raw", num_partitions=3, io_backend=backend, **kw)
    check_sums(ray_context, ds, frames)


def test_npy_straight_and_sliced(ray_context, tmp_path, frames):
    p = tmp_path / "d.npy"
    np.save(p, frames)
    ds = ray_context.load("npy", path=p, num_partitions=3)
    check_sums(ray_context, ds, frames)
    check_sums(ray_context, ds, frames, [SlicedSum(), SumSigUDF()])


def test_packed_12bit(ray_context, tmp_path, frames):
    p = tmp_path / "d12.bin"
    p.write_bytes(pack_bits(frames.reshape(-1, *SIG) & 0xFFF, 12))
    ds = ray_context.load("packed_raw", path=p, nav_shape=NAV, sig_shape=SIG, bits=12, num_partitions=2,
                          io_backend="buffered")
    check_sums(ray_context, ds, frames & 0xFFF, [SlicedSum(), SumSigUDF()])


def test_hdf5(ray_context, tmp_path, frames):
    h5py = pytest.importorskip("h5py")
    p = tmp_path / "d.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("data", data=frames, chunks=(1, 2, 8, 6))
    ds = ray_context.load("hdf5", path=p, ds_path="data", num_partitions=3)
    check_sums(ray_context, ds, frames)


def test_tiled(ray_context, tmp_path, frames):
    p = tmp_path / "d.rtt"
    write_tiled(p, frames, 2, 4, 6)
    ds = ray_context.load("tiled", path=p, nav_shape=NAV, num_partitions=2)
    check_sums(ray_context, ds, frames, [SlicedSum(), SumSigUDF()])


def test_npz_csr(ray_context, tmp_path, frames):
    sparse_frames = np.where(frames > 3000, frames, 0)
    p = tmp_path / "d.npz"
    save_npz_csr(p, sparse_frames)
    ds = ray_context.load("npz_csr", path=p, num_partitions=3)
    check_sums(ray_context, ds, sparse_frames)


def test_corrections_on_workers(ray_context, tmp_path, frames):
    kw = write_raw_with_headers(tmp_path, frames)
    ds = ray_context.load("raw", num_partitions=3, **kw)
    rng = np.random.default_rng(1)
    dark = (rng.random(SIG) * 10).astype(np.float32)
    gain = (1 + rng.random(SIG)).astype(np.float32)
    excluded = [(3, 4), (4, 4), (11, 0), (8, 11)]  # on the 4-row cuts of SlicedSum's tiles
    corr = CorrectionSet(dark=dark, gain=gain, excluded_pixels=excluded)
    flat = frames.reshape(-1, *SIG).astype(np.float32)
    ref = whole_frame_patch_reference((flat - dark) * gain, excluded)
    res = ray_context.run_udf(dataset=ds, udf=[SlicedSum(), SumSigUDF()], corrections=corr)
    np.testing.assert_allclose(res[0]["intensity"].data, ref.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(res[1]["intensity"].data, ref.sum(axis=(1, 2)).reshape(NAV), rtol=1e-5)
