"""Formats read from an S3 endpoint (moto on 127.0.0.1): sums, ROI, tilings and a picked frame against numpy.

The files are the same bytes a local test reads; each case puts them into a
bucket and loads ``s3://...`` with ``storage_options``. Most cases run inline,
a few on the session's Ray cluster (the workers fetch their own ranges).
"""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.udf import PickUDF, SumSigUDF, SumUDF
from test_io_formats import NAV, SIG, check_read, frames, roi  # noqa: F401 - frames, roi: fixtures
from _s3 import s3  # noqa: F401 - the module's S3 server (a fixture)

pytest.importorskip("s3fs")


def check_pick(ctx, ds, frames, y, x):
    roi = np.zeros(ds.shape.nav.to_tuple(), dtype=bool)
    roi[y, x] = True
    res = ctx.run_udf(dataset=ds, udf=PickUDF(), roi=roi)
    np.testing.assert_array_equal(res["intensity"].raw_data[0], frames[y, x])


def test_raw_from_s3_roi_tilings_pick(inline_ctx, s3, frames, roi):
    url = s3.put("s3://raw-bucket/scan/data.raw", frames.tobytes())
    ds = inline_ctx.load("raw", path=url, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=3,
                         storage_options=s3.options)
    check_read(inline_ctx, ds, frames, roi=roi)
    check_pick(inline_ctx, ds, frames, 3, 5)


def test_raw_many_objects_headers_big_endian(inline_ctx, s3, frames):
    flat = frames.reshape(-1, *SIG).astype(">u2")
    for i, chunk in enumerate(np.array_split(flat, 3)):
        body = b"HEAD" * 4 + b"".join(b"h" * 6 + fr.tobytes() + b"f" * 2 for fr in chunk)
        s3.put(f"s3://raw-bucket/multi/part{i}.bin", body)
    ds = inline_ctx.load("raw", path="s3://raw-bucket/multi/part*.bin", nav_shape=NAV, sig_shape=SIG, dtype=">u2",
                         file_header_bytes=16, frame_header_bytes=6, frame_footer_bytes=2, num_partitions=2,
                         storage_options=s3.options)
    check_read(inline_ctx, ds, frames.astype(np.uint16))


def test_raw_small_requests_many_in_flight(inline_ctx, s3, frames):
    """Requests much smaller than a block: a block is many ranged GETs that land at the right places."""
    from raytile.io.backends.remote import RemoteBackend
    from raytile.io.fileset import FilePartition

    url = s3.put("s3://raw-bucket/small/data.raw", frames.tobytes())
    ds = inline_ctx.load("raw", path=url, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=1,
                         storage_options=s3.options)
    part = ds.get_partitions()[0]
    assert isinstance(part, FilePartition) and part.fileset.store is not None
    backend = RemoteBackend(part.fileset.store, request_bytes=1000, concurrency=3)
    assert backend.request_bytes == 64 * 1024  # the floor: smaller requests cost more than they save
    backend.request_bytes = 1000  # below the floor on purpose: one block is many requests
    job_frames = np.arange(ds.shape.nav.size, dtype=np.int64)
    from raytile.common.tiling import TilingScheme
    from raytile.io.backends.base import FrameFile, FramesJob
    from raytile.io.decoders import NativeDecoder

    scheme = TilingScheme.make_for_shape(ds.shape.flatten_nav().__class__((8,) + SIG, sig_dims=2),
                                         ds.shape.flatten_nav())
    fs = part.fileset
    job = FramesJob(paths=fs.paths, scheme=scheme, frames=job_frames, nav_origin=0, dest_dtype=np.dtype("float64"),
                    decoder=NativeDecoder(np.dtype("uint16")),
                    frame_files=[FrameFile(f.path, f.file_header, f.start_idx, f.end_idx) for f in fs.files],
                    file_dtype=np.dtype("uint16"), frame_stride=fs.frame_stride, frame_header=0)
    got = np.zeros((ds.shape.nav.size,) + SIG)
    for tile in backend.get_frame_tiles(job):
        got[tile.tile_slice.get()] = tile.data
    np.testing.assert_array_equal(got, frames.reshape(-1, *SIG))


def test_npy_from_s3(inline_ctx, s3, tmp_path, frames, roi):
    p = tmp_path / "d.npy"
    np.save(p, frames)
    url = s3.put_file("s3://npy-bucket/d.npy", str(p))
    ds = inline_ctx.load("npy", path=url, num_partitions=3, storage_options=s3.options)
    assert ds.shape.to_tuple() == NAV + SIG
    check_read(inline_ctx, ds, frames, roi=roi)
    check_pick(inline_ctx, ds, frames, 4, 0)


def upload_dir(s3, directory, prefix):
    """Every file of ``directory`` as an object under ``prefix``; their URLs by file name."""
    import os

    return {name: s3.put_file(f"{prefix}/{name}", os.path.join(directory, name)) for name in os.listdir(directory)}


@pytest.mark.parametrize("mode", ["U16", "R12"])
def test_mib_hdr_and_files_under_one_prefix(inline_ctx, s3, tmp_path, rng, mode):
    from raytile.io.testing.mib import write_mib

    frames = rng.integers(0, 4000, (5, 6, 32, 32)).astype(np.uint16)
    write_mib(tmp_path / "scan", frames.reshape(-1, 32, 32), mode=mode, nav_shape=(5, 6), frames_per_file=12)
    urls = upload_dir(s3, tmp_path, f"s3://mib-bucket/{mode}")
    assert sorted(urls) == ["scan.hdr", "scan1.mib", "scan2.mib", "scan3.mib"]
    ds = inline_ctx.load("mib", path=urls["scan.hdr"], num_partitions=2, storage_options=s3.options)
    assert ds.shape.to_tuple() == (5, 6, 32, 32)
    roi = rng.random((5, 6)) > 0.5
    roi[0, 0] = True
    check_read(inline_ctx, ds, frames, roi=roi, tilings=((None, None), (3, None)))
    check_pick(inline_ctx, ds, frames, 4, 5)


def test_empad_xml_and_raw(inline_ctx, s3, tmp_path, rng):
    from raytile.io.testing.empad import write_empad

    frames = rng.random((3, 4, 128, 128)).astype(np.float32)
    write_empad(tmp_path, frames)
    urls = upload_dir(s3, tmp_path, "s3://empad-bucket/a")
    ds = inline_ctx.load("empad", path=urls["scan.xml"], num_partitions=2, storage_options=s3.options)
    assert ds.shape.to_tuple() == (3, 4, 128, 128)
    check_read(inline_ctx, ds, frames, tilings=((None, None), (2, 64 * 128 * 4)))
    check_pick(inline_ctx, ds, frames, 2, 1)


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "gzip", "bitshuffle"])
def test_hdf5_from_s3(inline_ctx, s3, tmp_path, frames, roi, layout):
    h5py = pytest.importorskip("h5py")
    kw: dict = {}
    if layout == "chunked":
        kw = dict(chunks=(1, 2) + SIG)
    elif layout == "gzip":
        kw = dict(chunks=(1, 3, 8, 12), compression="gzip")
    elif layout == "bitshuffle":
        hdf5plugin = pytest.importorskip("hdf5plugin")
        kw = dict(chunks=(1, 2) + SIG, **hdf5plugin.Bitshuffle(nelems=0, cname="lz4"))
    p = tmp_path / "d.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("entry/data", data=frames, **kw)
    url = s3.put_file(f"s3://h5-bucket/{layout}.h5", str(p))
    ds = inline_ctx.load("hdf5", path=url, ds_path="entry/data", num_partitions=2, storage_options=s3.options)
    direct = layout in ("contiguous", "chunked")
    assert ({d["name"]: d["value"] for d in ds.get_diagnostics()}["read"] == "directly from the file") == direct
    check_read(inline_ctx, ds, frames, roi=roi, tilings=((None, None), (3, None)))
    check_pick(inline_ctx, ds, frames, 1, 2)


@pytest.mark.parametrize("compression,decoder", [("bslz4", None), (None, None), ("bslz4", "hdf5plugin")])
def test_dectris_master_and_data_files(inline_ctx, s3, tmp_path, rng, compression, decoder):
    """The chunk index is read once with h5py over a ranged file; chunks come by parallel ranged GETs."""
    pytest.importorskip("h5py")
    if compression == "bslz4":
        pytest.importorskip("hdf5plugin")
    from raytile.io.testing.dectris import write_dectris

    frames = rng.integers(0, 50, (4, 5, 24, 20)).astype(np.uint16)
    write_dectris(tmp_path, frames.reshape(-1, 24, 20), frames_per_file=6, compression=compression)
    urls = upload_dir(s3, tmp_path, f"s3://dectris-bucket/{compression}-{decoder}")
    master = urls["series_1_master.h5"]
    ds = inline_ctx.load("dectris", path=master, nav_shape=(4, 5), num_partitions=3, decoder=decoder,
                         storage_options=s3.options)
    how = {d["name"]: d["value"] for d in ds.get_diagnostics()}
    assert how["data files"] == "4"
    assert how["read"] == ("h5py + hdf5plugin" if decoder else "chunks decoded in the workers" if compression
                           else "chunks copied in the workers")
    roi = rng.random((4, 5)) > 0.5
    roi[0, 0] = True
    check_read(inline_ctx, ds, frames, roi=roi, tilings=((None, None), (3, None)))
    check_pick(inline_ctx, ds, frames, 3, 4)


@pytest.mark.ray
def test_formats_on_ray_workers(ray_context, s3, tmp_path, frames, roi):
    url = s3.put("s3://ray-bucket/data.raw", frames.tobytes())
    ds = ray_context.load("raw", path=url, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=4,
                          storage_options=s3.options)
    flat = frames.reshape(-1, *SIG).astype(np.float64)
    res = ray_context.run_udf(dataset=ds, udf=[SumUDF(dtype="float64"), SumSigUDF()], roi=roi)
    np.testing.assert_array_equal(res[0]["intensity"].data, flat[roi.reshape(-1)].sum(axis=0))
    want = np.where(roi, flat.sum(axis=(1, 2)).reshape(NAV), 0)
    np.testing.assert_array_equal(np.where(roi, res[1]["intensity"].data, 0), want)
    p = tmp_path / "d.npy"
    np.save(p, frames)
    ds2 = ray_context.load("npy", path=s3.put_file("s3://ray-bucket/d.npy", str(p)), num_partitions=3,
                           storage_options=s3.options)
    check_pick(ray_context, ds2, frames, 2, 6)
    res2 = ray_context.run_udf(dataset=ds2, udf=SumUDF(dtype="float64"))
    np.testing.assert_array_equal(res2["intensity"].data, flat.sum(axis=0))
    # compressed HDF5: h5py in each worker reads its chunks through a ranged file object
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f.create_dataset("data", data=frames, chunks=(1, 3, 8, 12), compression="gzip")
    ds3 = ray_context.load("hdf5", path=s3.put_file("s3://ray-bucket/c.h5", str(tmp_path / "c.h5")), ds_path="data",
                           num_partitions=3, storage_options=s3.options)
    res3 = ray_context.run_udf(dataset=ds3, udf=SumUDF(dtype="float64"), roi=roi)
    np.testing.assert_array_equal(res3["intensity"].data, flat[roi.reshape(-1)].sum(axis=0))
    # DECTRIS: master + data files; the workers fetch and decode bitshuffle-LZ4 chunks
    pytest.importorskip("hdf5plugin")
    from raytile.io.testing.dectris import write_dectris

    (tmp_path / "series").mkdir()
    write_dectris(tmp_path / "series", frames.reshape(-1, *SIG), frames_per_file=8)
    urls = upload_dir(s3, tmp_path / "series", "s3://ray-bucket/series")
    ds4 = ray_context.load("dectris", path=urls["series_1_master.h5"], nav_shape=NAV, num_partitions=3,
                           storage_options=s3.options)
    res4 = ray_context.run_udf(dataset=ds4, udf=[SumUDF(dtype="float64"), SumSigUDF()])
    np.testing.assert_array_equal(res4[0]["intensity"].data, flat.sum(axis=0))
    np.testing.assert_array_equal(res4[1]["intensity"].data, flat.sum(axis=(1, 2)).reshape(NAV))


def test_storage_options_are_checked_and_hidden():
    with pytest.raises(rt.common.errors.ConfigValidationError, match="storage_options") as e:
        rt.Context(executor="inline").load("raw", path="s3://b/k", nav_shape=NAV, sig_shape=SIG, dtype="uint16",
                                           storage_options=[("secret", "topsecret-value")])
    assert "topsecret-value" not in str(e.value)
    from raytile.io.store import StorageOptions

    opts = StorageOptions({"key": "k-id-1234", "secret": "topsecret-value", "endpoint_url": "http://h:1"})
    assert "topsecret-value" not in repr(opts) and "k-id-1234" not in repr(opts)
    assert "http://h:1" in repr(opts)
