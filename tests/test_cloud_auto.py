"""``ctx.load("auto", path="s3://...")``: the format of an object found by ranged reads of its header.

Each case puts the files a local test would read into a moto S3 bucket
(127.0.0.1), loads the URL with ``auto`` and compares the detected format, its
shape and the sums with numpy on the same data (and with ``auto`` on the
same files read locally).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from raytile.common.errors import DataSetException
from raytile.udf import SumSigUDF, SumUDF
from test_cloud_formats import upload_dir
from test_io_formats import NAV, SIG, frames  # noqa: F401 - fixture
from _s3 import SECRET, s3  # noqa: F401 - the module's S3 server (a fixture)

pytest.importorskip("s3fs")


def check_sums(ctx, ds, frames):
    flat = frames.reshape((-1,) + tuple(ds.shape.sig)).astype(np.float64)
    res = ctx.run_udf(dataset=ds, udf=[SumUDF(dtype="float64"), SumSigUDF()])
    np.testing.assert_allclose(res[0]["intensity"].data, flat.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(res[1]["intensity"].data.reshape(-1), flat.sum(axis=(1, 2)), rtol=1e-6)


def load_both(ctx, s3, local_path, url):
    """``auto`` on the URL and on the same file read locally: same format and shape."""
    ds = ctx.load("auto", path=url, storage_options=s3.options)
    local = ctx.load("auto", path=str(local_path))
    assert type(ds) is type(local)
    assert ds.shape == local.shape and ds.dtype == local.dtype
    return ds


def test_auto_npy(inline_ctx, s3, tmp_path, frames):
    np.save(tmp_path / "d.npy", frames)
    url = s3.put_file("s3://auto-bucket/npy/d.npy", str(tmp_path / "d.npy"))
    ds = load_both(inline_ctx, s3, tmp_path / "d.npy", url)
    assert ds.format_name == "npy" and ds.shape.to_tuple() == NAV + SIG
    check_sums(inline_ctx, ds, frames)


def test_auto_mib_hdr(inline_ctx, s3, tmp_path, rng):
    from raytile.io.testing.mib import write_mib

    frames = rng.integers(0, 4000, (5, 6, 32, 32)).astype(np.uint16)
    write_mib(tmp_path / "scan", frames.reshape(-1, 32, 32), mode="U16", nav_shape=(5, 6), frames_per_file=12)
    urls = upload_dir(s3, tmp_path, "s3://auto-bucket/mib")
    ds = load_both(inline_ctx, s3, tmp_path / "scan.hdr", urls["scan.hdr"])
    assert ds.format_name == "mib" and ds.shape.to_tuple() == (5, 6, 32, 32)
    check_sums(inline_ctx, ds, frames)
    one = inline_ctx.load("auto", path=urls["scan2.mib"], storage_options=s3.options)  # a .mib without .hdr
    assert one.format_name == "mib" and one.shape.nav.size == 30


def test_auto_mib_beside_another_acquisition_under_one_prefix(inline_ctx, s3, tmp_path, rng):
    """X.hdr/X.mib beside XRAW.hdr/XRAW.mib under one S3 prefix, as in a local folder: "mib" on X.hdr
    (its glob X*.mib takes both) says to pass disable_glob=True; auto takes the objects named after the
    header, and XRAW.hdr its own object."""
    from raytile.io.testing.mib import write_mib

    frames = rng.integers(0, 4000, (6, 32, 32)).astype(np.uint16)
    other = rng.integers(0, 4000, (6, 32, 32)).astype(np.uint16)
    write_mib(tmp_path / "X", frames, mode="U16", nav_shape=(2, 3))
    write_mib(tmp_path / "XRAW", other, mode="U16", nav_shape=(2, 3))
    urls = upload_dir(s3, tmp_path, "s3://auto-bucket/neighbours")
    with pytest.raises(DataSetException, match="XRAW.mib.*disable_glob=True"):
        inline_ctx.load("mib", path=urls["X.hdr"], storage_options=s3.options)
    for fmt, extra in (("auto", {}), ("mib", {"disable_glob": True})):
        ds = inline_ctx.load(fmt, path=urls["X.hdr"], storage_options=s3.options, **extra)
        assert ds.shape.to_tuple() == (2, 3, 32, 32)
        check_sums(inline_ctx, ds, frames)
    check_sums(inline_ctx, inline_ctx.load("auto", path=urls["XRAW.hdr"], storage_options=s3.options), other)


def test_auto_empad(inline_ctx, s3, tmp_path, rng):
    from raytile.io.testing.empad import write_empad

    frames = rng.random((3, 4, 128, 128)).astype(np.float32)
    write_empad(tmp_path, frames)
    urls = upload_dir(s3, tmp_path, "s3://auto-bucket/empad")
    ds = load_both(inline_ctx, s3, tmp_path / "scan.xml", urls["scan.xml"])
    assert ds.format_name == "empad" and ds.shape.to_tuple() == (3, 4, 128, 128)
    check_sums(inline_ctx, ds, frames)


def test_auto_hdf5_and_dectris(inline_ctx, s3, tmp_path, frames, rng):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("small", data=np.zeros((2, 3, 4)))
        f.create_dataset("entry/data", data=frames, chunks=(1, 3, 8, 12), compression="gzip")
    url = s3.put_file("s3://auto-bucket/h5/d.h5", str(tmp_path / "d.h5"))
    ds = load_both(inline_ctx, s3, tmp_path / "d.h5", url)
    assert ds.format_name == "hdf5" and ds.shape.to_tuple() == NAV + SIG  # the largest dataset
    check_sums(inline_ctx, ds, frames)
    no_ds_path = inline_ctx.load("hdf5", path=url, storage_options=s3.options)  # hdf5 finds it by itself too
    assert no_ds_path.shape.to_tuple() == NAV + SIG

    pytest.importorskip("hdf5plugin")
    from raytile.io.testing.dectris import write_dectris

    series = rng.integers(0, 50, (4, 5, 24, 20)).astype(np.uint16)
    (tmp_path / "series").mkdir()
    write_dectris(tmp_path / "series", series.reshape(-1, 24, 20), frames_per_file=6)
    urls = upload_dir(s3, tmp_path / "series", "s3://auto-bucket/dectris")
    master = urls["series_1_master.h5"]
    ds = inline_ctx.load("auto", path=master, storage_options=s3.options, nav_shape=(4, 5))
    assert ds.format_name == "dectris"  # before hdf5: the specific format wins
    check_sums(inline_ctx, ds, series)


def test_auto_zarr_local_and_s3(inline_ctx, s3, tmp_path, frames):
    zarr = pytest.importorskip("zarr")
    arr = zarr.create_array(store=str(tmp_path / "a.zarr"), data=frames, chunks=(1, 3, 8, 6), zarr_format=3)
    assert arr.shape == NAV + SIG
    urls = {}
    for path in sorted(p for p in (tmp_path / "a.zarr").rglob("*") if p.is_file()):
        rel = path.relative_to(tmp_path).as_posix()
        urls[rel] = s3.put_file(f"s3://auto-bucket/z/{rel}", str(path))
    ds = load_both(inline_ctx, s3, tmp_path / "a.zarr", "s3://auto-bucket/z/a.zarr")
    assert ds.format_name == "zarr" and ds.shape.to_tuple() == NAV + SIG
    check_sums(inline_ctx, ds, frames)


def test_auto_url_errors_name_the_url_not_the_secret(inline_ctx, s3, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(DataSetException, match=r"not found: s3://auto-bucket/nothing/here\.hdr") as e1:
        inline_ctx.load("auto", path="s3://auto-bucket/nothing/here.hdr", storage_options=s3.options)
    s3.put("s3://auto-bucket/plain/data.raw", b"\0" * 4096)
    with pytest.raises(DataSetException, match=r"cannot detect the format of s3://auto-bucket/plain/data\.raw") as e2:
        inline_ctx.load("auto", path="s3://auto-bucket/plain/data.raw", storage_options=s3.options)
    assert "'raw'" in str(e2.value)  # headerless raw: the message says how to load it
    dead = dict(s3.options, secret=SECRET[::-1], endpoint_url="http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(DataSetException, match=r"s3://auto-bucket/plain/data\.raw.*connect") as e3:
        inline_ctx.load("auto", path="s3://auto-bucket/plain/data.raw", storage_options=dead)
    for text in (str(e1.value), str(e2.value), str(e3.value), caplog.text):
        assert SECRET not in text and SECRET[::-1] not in text


@pytest.mark.parametrize("fmt", ["mrc", "blo"])
def test_mrc_and_blo_from_s3(inline_ctx, s3, tmp_path, rng, fmt):
    """Header formats beyond the issue's list: their header is one ranged GET, frames by the remote backend."""
    from raytile.io.testing.blo import write_blo
    from raytile.io.testing.mrc import write_mrc

    if fmt == "mrc":
        frames = rng.integers(-300, 3000, (4, 5, 9, 6)).astype(np.int16)
        path = write_mrc(str(tmp_path / "a.mrc"), frames)
    else:
        frames = rng.integers(0, 250, (4, 5, 8, 8)).astype(np.uint16)
        path = write_blo(str(tmp_path / "a.blo"), frames)
    url = s3.put_file(f"s3://auto-bucket/{fmt}/{tmp_path.name}/a.{fmt}", path)
    ds = inline_ctx.load(fmt, path=url, nav_shape=(4, 5), num_partitions=2, storage_options=s3.options)
    assert ds.io_backend == "remote" and ds.shape.to_tuple() == frames.shape
    check_sums(inline_ctx, ds, frames)
    local = inline_ctx.load(fmt, path=path, nav_shape=(4, 5))
    np.testing.assert_array_equal(inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="float64"))["intensity"].data,
                                  inline_ctx.run_udf(dataset=local, udf=SumUDF(dtype="float64"))["intensity"].data)
    auto = load_both(inline_ctx, s3, path, url)
    assert auto.format_name == fmt
