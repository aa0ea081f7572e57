"""raw/npy parameters as LiberTEM's test suite uses them (tests/io/datasets/test_raw.py, test_npy.py), each
against LiberTEM's own result on the same file: the web API's parameter converters at the format modules'
paths, ``get_dataset_cls``, ``meta.image_count``, LiberTEM's refusals (their types and words) and its oldest
raw parameter names.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import raytile as rt  # noqa: E402

DATA = np.random.default_rng(5).random((8, 8, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lt_io_params")
    raw, npy = d / "data.raw", d / "data.npy"
    DATA.tofile(raw)
    np.save(npy, DATA)
    return str(raw), str(npy)


@pytest.mark.parametrize("fmt, message", [
    ("raw", {"type": "RAW", "path": "p", "dtype": "d", "nav_shape": [16, 16], "sig_shape": [8, 8],
             "sync_offset": 3}),
    ("raw", {"type": "RAW", "path": "p", "dtype": "d", "nav_shape": [16, 16], "sig_shape": [8, 8],
             "io_backend": "buffered"}),
    ("npy", {"type": "NPY", "path": "p", "nav_shape": [16, 16], "sig_shape": [8, 8], "sync_offset": 2.0}),
    ("npy", {"type": "NPY", "path": "p"}),
])
def test_dataset_params_messages_convert_as_libertem(fmt, message):
    import jsonschema
    from libertem.io.dataset.npy import NPYDatasetParams as LtNPY
    from libertem.io.dataset.raw import RAWDatasetParams as LtRAW

    from raytile.io.dataset.npy import NPYDatasetParams
    from raytile.io.dataset.raw import RAWDatasetParams

    lt, rt_ = (LtRAW(), RAWDatasetParams()) if fmt == "raw" else (LtNPY(), NPYDatasetParams())
    assert rt_.convert_to_python(message) == lt.convert_to_python(message)
    got, ref = rt_.to_python(message), lt.to_python(message)
    assert got.keys() == ref.keys()
    for key in ref:
        if key == "io_backend":
            assert type(got[key]).__name__ == type(ref[key]).__name__ == "BufferedBackend"
        else:
            assert got[key] == ref[key]
    bad = {k: v for k, v in message.items() if k != "path"}
    with pytest.raises(jsonschema.ValidationError):
        lt.to_python(bad)
    with pytest.raises(jsonschema.ValidationError):
        rt_.to_python(bad)


def test_get_dataset_cls_finds_the_format_class():
    from libertem.io.dataset import get_dataset_cls as lt_get

    from raytile.common.errors import DataSetException
    from raytile.io.dataset import get_dataset_cls
    from raytile.io.dataset.raw import RawFileDataSet

    for name in ("raw", "NPY", "hdf5", "memory"):
        assert get_dataset_cls(name).__name__ == lt_get(name).__name__
    assert get_dataset_cls("raw") is RawFileDataSet
    assert get_dataset_cls(RawFileDataSet) is RawFileDataSet
    with pytest.raises(DataSetException):
        get_dataset_cls("no-such-format")


@pytest.mark.parametrize("fmt, params", [
    ("raw", {"nav_shape": (8, 8), "sig_shape": (4, 4), "dtype": "float32"}),  # the file holds 256 such frames
    ("raw", {"nav_shape": (4, 4), "sig_shape": (8, 8), "dtype": "float32"}),  # 64 frames, 16 read
    ("npy", {"sync_offset": 5}),
])
def test_image_count_is_the_frames_the_file_holds(lt_ctx, inline_ctx, files, fmt, params):
    path = files[0] if fmt == "raw" else files[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = lt_ctx.load(fmt, path=path, **params)
        got = inline_ctx.load(fmt, path=path, **params)
    assert got.meta.image_count == ref._meta.image_count
    assert got.meta.image_count != got.shape.nav.size or fmt == "npy"


@pytest.mark.parametrize("fmt", ["raw", "npy"])
@pytest.mark.parametrize("sync_offset", [-70, 70, 64, -64])
def test_sync_offset_outside_the_frames_is_refused_with_libertems_words(lt_ctx, inline_ctx, files, fmt, sync_offset):
    path, extra = (files[0], {"nav_shape": (8, 8), "sig_shape": (8, 8), "dtype": "float32"}) if fmt == "raw" \
        else (files[1], {})
    words = r"offset should be in \(-64, 64\), which is \(-image_count, image_count\)"
    with pytest.raises(Exception, match=words):
        lt_ctx.load(fmt, path=path, sync_offset=sync_offset, **extra)
    with pytest.raises(rt.DataSetException, match=words):
        inline_ctx.load(fmt, path=path, sync_offset=sync_offset, **extra)
    # inside the range both read the file
    ok = 63 if sync_offset > 0 else -63
    ref = lt_ctx.load(fmt, path=path, sync_offset=ok, **extra)
    got = inline_ctx.load(fmt, path=path, sync_offset=ok, **extra)
    assert got.shape.to_tuple() == tuple(ref.shape)


def test_missing_sig_shape_is_a_type_error_as_in_libertem(lt_ctx, inline_ctx, files):
    from raytile.common.errors import ConfigValidationError

    msg = "missing 1 required argument: 'sig_shape'"
    with pytest.raises(TypeError, match=msg):
        lt_ctx.load("raw", path=files[0], nav_shape=(8, 8), dtype="float32")
    with pytest.raises(TypeError, match=msg) as e:
        inline_ctx.load("raw", path=files[0], nav_shape=(8, 8), dtype="float32")
    assert isinstance(e.value, ConfigValidationError) and "sig_shape" in str(e.value)


def test_sig_shape_larger_than_the_file_is_refused_with_libertems_words(lt_ctx, inline_ctx, files):
    words = "sig_shape must be less than size: 4096"
    with pytest.raises(Exception, match=words):
        lt_ctx.load("raw", path=files[0], nav_shape=(8, 8), sig_shape=(65, 65), dtype="float32")
    with pytest.raises(rt.DataSetException, match=words):
        inline_ctx.load("raw", path=files[0], nav_shape=(8, 8), sig_shape=(65, 65), dtype="float32")


def test_crop_detector_to_is_libertems_old_sig_shape(lt_ctx, inline_ctx, files):
    from libertem.udf.sum import SumUDF as LtSumUDF

    from raytile.common.errors import ConfigValidationError

    old = {"nav_shape": (8, 8), "dtype": "float32", "detector_size_raw": (8, 8), "crop_detector_to": (8, 8)}
    with pytest.warns(FutureWarning) as ref_warnings:
        ref_ds = lt_ctx.load("raw", path=files[0], **old)
    with pytest.warns(FutureWarning) as got_warnings:
        got_ds = inline_ctx.load("raw", path=files[0], **old)
    assert len([w for w in got_warnings if w.category is FutureWarning]) == \
        len([w for w in ref_warnings if w.category is FutureWarning]) == 2
    ref = lt_ctx.run_udf(dataset=ref_ds, udf=LtSumUDF())["intensity"].data
    got = inline_ctx.run_udf(dataset=got_ds, udf=rt.SumUDF())["intensity"].data
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    np.testing.assert_allclose(got, DATA.sum(axis=(0, 1)), rtol=1e-5)
    cropping = {**old, "detector_size_raw": (16, 4)}
    with pytest.raises(ValueError, match=re.escape("can't crop")), pytest.warns(FutureWarning):
        lt_ctx.load("raw", path=files[0], **cropping)
    with pytest.raises(ConfigValidationError, match="do not crop"), pytest.warns(FutureWarning):
        inline_ctx.load("raw", path=files[0], **cropping)


@pytest.mark.parametrize("sync_offset", [-2, 0, 2])
def test_raw_positional_dtype_and_export_to_npy_as_libertem(lt_ctx, inline_ctx, files, tmp_path, sync_offset):
    # LiberTEM's positional order: ctx.load("raw", path, dtype, ...)
    kw = {"nav_shape": (8, 8), "sig_shape": (8, 8), "sync_offset": sync_offset}
    ref_ds = lt_ctx.load("raw", files[0], np.float32, **kw)
    got_ds = inline_ctx.load("raw", files[0], np.float32, **kw)
    assert got_ds.dtype == ref_ds.dtype
    lt_ctx.export_dataset(ref_ds, path=tmp_path / "lt.npy")
    inline_ctx.export_dataset(got_ds, path=tmp_path / "rt.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "rt.npy"), np.load(tmp_path / "lt.npy"))


@pytest.mark.parametrize("index", [np.s_[0], np.s_[5, 5], np.s_[0:5], np.s_[0:5, 2:7]])
def test_dataset_roi_helper_as_libertem(lt_ctx, inline_ctx, files, index):
    kw = {"nav_shape": (8, 8), "sig_shape": (8, 8), "dtype": "float32"}
    ref = lt_ctx.load("raw", path=files[0], **kw).roi[index]
    got = inline_ctx.load("raw", path=files[0], **kw).roi[index]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)
