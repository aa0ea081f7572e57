"""The zarr format (Zarr v3, zarr-python 3) local and on S3 (moto on 127.0.0.1), and export to Zarr.

Arrays are written by zarr itself (the independent writer); raytile's sums,
ROI reads and picked frames are compared with numpy, and its exports are
read back with zarr.
"""

from __future__ import annotations

import numpy as np
import pytest

from raytile.common.errors import DataSetException
from raytile.udf import SumSigUDF, SumUDF
from test_cloud_formats import check_pick
from test_io_formats import NAV, SIG, RecordTiles, check_read, frames, roi  # noqa: F401 - fixtures
from _s3 import SECRET, moto_s3

zarr = pytest.importorskip("zarr")
pytest.importorskip("s3fs")


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as s:
        s.client.create_bucket(Bucket="zarr-bucket")
        yield s


def codecs(name):
    if name == "zstd":
        return zarr.codecs.ZstdCodec(level=1)
    if name == "blosc-bitshuffle-lz4":
        return zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")
    return None


def zarr_store(s3, url):
    from raytile.io.store import store_for, zarr_store_options

    return zarr.storage.FsspecStore.from_url(url, storage_options=zarr_store_options(store_for(url, s3.options)))


@pytest.mark.parametrize("codec", ["zstd", "blosc-bitshuffle-lz4", None])
def test_local_zarr_tiles_follow_chunks(inline_ctx, tmp_path, frames, roi, codec):
    chunks = (1, 3, 8, 6)
    zarr.create_array(store=str(tmp_path / "a.zarr"), data=frames, chunks=chunks, compressors=codecs(codec),
                      zarr_format=3)
    ds = inline_ctx.load("zarr", path=tmp_path / "a.zarr", num_partitions=3)
    assert ds.shape.to_tuple() == NAV + SIG
    check_read(inline_ctx, ds, frames, roi=roi, tilings=((None, None), (3, 200)))
    RecordTiles.seen = []
    inline_ctx.run_udf(dataset=ds, udf=RecordTiles(None, 8 * 6 * 2 * 3))
    assert any(sl.shape[1:] != SIG for sl, _tile in RecordTiles.seen)  # sliced in the signal
    for sl, _tile in RecordTiles.seen:  # tiles hold whole chunks in the signal
        assert sl.origin[1] % 8 == 0 and sl.origin[2] % 6 == 0 and sl.shape[1] % 8 == 0 and sl.shape[2] % 6 == 0
    check_pick(inline_ctx, ds, frames, 4, 6)


def test_sig_split_from_attributes_or_given(inline_ctx, tmp_path, rng):
    data = rng.integers(0, 100, (6, 4, 10)).astype(np.int32)  # a line scan of (4, 10) frames, or 24 spectra
    arr = zarr.create_array(store=str(tmp_path / "s.zarr"), data=data, chunks=(2, 4, 10), zarr_format=3)
    default = inline_ctx.load("zarr", path=tmp_path / "s.zarr")
    assert default.shape.sig.to_tuple() == (4, 10)
    arr.attrs["raytile"] = {"sig_dims": 1}
    ds = inline_ctx.load("zarr", path=tmp_path / "s.zarr")
    assert ds.shape.to_tuple() == (6, 4, 10) and ds.shape.sig.to_tuple() == (10,)
    res = inline_ctx.run_udf(dataset=ds, udf=SumSigUDF())
    np.testing.assert_array_equal(res["intensity"].data, data.sum(axis=2))
    given = inline_ctx.load("zarr", path=tmp_path / "s.zarr", sig_dims=2, nav_shape=(2, 3))
    assert given.shape.to_tuple() == (2, 3, 4, 10)
    res = inline_ctx.run_udf(dataset=given, udf=SumUDF(dtype="float64"))
    np.testing.assert_array_equal(res["intensity"].data, data.sum(axis=0))


def test_zarr_errors(inline_ctx, tmp_path, s3):
    with pytest.raises(DataSetException, match="no Zarr array"):
        inline_ctx.load("zarr", path=tmp_path / "missing.zarr")
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=3)
    group.create_array("frames", shape=(2, 4, 4), dtype="u2")
    with pytest.raises(DataSetException, match="pass array_path.*frames"):
        inline_ctx.load("zarr", path=tmp_path / "g.zarr")
    ds = inline_ctx.load("zarr", path=tmp_path / "g.zarr", array_path="frames")
    assert ds.shape.to_tuple() == (2, 4, 4)
    with pytest.raises(DataSetException, match="s3://zarr-bucket/none.zarr") as e:
        inline_ctx.load("zarr", path="s3://zarr-bucket/none.zarr", storage_options=s3.options)
    assert SECRET not in str(e.value)


@pytest.mark.parametrize("codec", ["zstd", "blosc-bitshuffle-lz4"])
def test_zarr_on_s3_written_by_zarr(inline_ctx, s3, frames, roi, codec):
    url = f"s3://zarr-bucket/by-zarr-{codec}.zarr"
    zarr.create_array(store=zarr_store(s3, url), data=frames, chunks=(1, 4) + SIG, compressors=codecs(codec),
                      zarr_format=3)
    ds = inline_ctx.load("zarr", path=url, num_partitions=2, storage_options=s3.options)
    check_read(inline_ctx, ds, frames, roi=roi, tilings=((None, None), (2, None)))
    check_pick(inline_ctx, ds, frames, 1, 3)


def test_export_local_and_s3_inline(inline_ctx, tmp_path, s3, frames, roi):
    p = tmp_path / "d.npy"
    np.save(p, frames)
    ds = inline_ctx.load("npy", path=p, num_partitions=3)
    inline_ctx.export_dataset(ds, path=tmp_path / "out.zarr")
    back = zarr.open_array(str(tmp_path / "out.zarr"), mode="r")
    np.testing.assert_array_equal(back[:], frames)
    assert back.chunks == (1, 1) + SIG and dict(back.attrs) == {"raytile": {"sig_dims": 2}}
    url = "s3://zarr-bucket/export-inline.zarr"
    inline_ctx.export_dataset(ds, path=url, format="zarr", storage_options=s3.options, roi=roi)
    back = zarr.open_array(zarr_store(s3, url), mode="r")
    np.testing.assert_array_equal(back[:], frames[roi])
    with pytest.raises(DataSetException, match="exists"):
        inline_ctx.export_dataset(ds, path=url, format="zarr", storage_options=s3.options)


@pytest.mark.ray
def test_export_to_s3_and_read_back_on_ray(ray_context, s3, tmp_path, frames):
    """MIB files to a Zarr array on S3 in one call, written by the workers; then read from S3 by the workers."""
    from raytile.io.testing.mib import write_mib

    write_mib(tmp_path / "scan", frames.reshape(-1, *SIG), mode="U16", nav_shape=NAV)
    ds = ray_context.load("mib", path=tmp_path / "scan.hdr", num_partitions=4)
    url = "s3://zarr-bucket/from-mib.zarr"
    ray_context.export_dataset(ds, path=url, format="zarr", storage_options=s3.options, compressor="blosc")
    back = zarr.open_array(zarr_store(s3, url), mode="r")
    np.testing.assert_array_equal(back[:], frames)
    ds2 = ray_context.load("zarr", path=url, num_partitions=3, storage_options=s3.options)
    flat = frames.reshape(-1, *SIG).astype(np.float64)
    res = ray_context.run_udf(dataset=ds2, udf=[SumUDF(dtype="float64"), SumSigUDF()])
    np.testing.assert_array_equal(res[0]["intensity"].data, flat.sum(axis=0))
    np.testing.assert_array_equal(res[1]["intensity"].data, flat.sum(axis=(1, 2)).reshape(NAV))
