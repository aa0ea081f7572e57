"""No silent wrong results (issue 20): a raw file whose size does not fit the shapes is a DataSetWarning in
the driver (also when the file was opened on a worker) naming the file, its size and what was read, or an
error where the size rules the shapes out."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from raytile.common.errors import DataSetException, DataSetWarning
from raytile.udf import SumUDF


def test_raw_file_with_more_frames_than_nav_shape_warns_in_the_driver(ctx, tmp_path):
    data = np.arange(12 * 8 * 8, dtype=np.uint16).reshape(12, 8, 8)
    path = tmp_path / "more.raw"
    data.tofile(path)
    with pytest.warns(DataSetWarning) as rec:
        ds = ctx.load("raw", path=str(path), nav_shape=(2, 5), sig_shape=(8, 8), dtype="uint16")
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert str(path) in msg and f"{data.nbytes} bytes" in msg and "12 frames" in msg
    assert "first 10" in msg and f"{10 * 128} bytes" in msg
    assert rec[0].filename == __file__  # pointed at the caller's ctx.load line
    assert ds.load_warnings == [msg]
    res = ctx.run_udf(dataset=ds, udf=SumUDF(dtype="int64"))["intensity"].data
    np.testing.assert_array_equal(res, data[:10].sum(axis=0))  # what the warning says was read


def test_raw_sig_shape_smaller_than_the_frames_warns(ctx, tmp_path):
    # 6 frames of 16x16 read as 8x8 frames: the size divides, the image would be garbage
    data = np.ones((6, 16, 16), np.uint16)
    path = tmp_path / "frames16.raw"
    data.tofile(path)
    with pytest.warns(DataSetWarning, match=r"24 frames of sig_shape \(8, 8\).*exactly 4x what nav_shape reads"):
        ctx.load("raw", path=str(path), nav_shape=(2, 3), sig_shape=(8, 8), dtype="uint16")


def test_raw_shapes_the_file_size_rules_out_raise(ctx, tmp_path):
    path = tmp_path / "odd.raw"
    np.ones((6, 16, 16), np.uint16).tofile(path)
    # whole frames are read as LiberTEM reads them, the rest cut off with a warning
    with pytest.warns(DataSetWarning, match=r"odd.raw: file size 3072 is not a multiple of the frame size 98"):
        ctx.load("raw", path=str(path), nav_shape=(2, 3), sig_shape=(7, 7), dtype="uint16")
    with pytest.raises(DataSetException, match=r"odd.raw: file size 3072 is not a multiple of the frame size 3098"):
        ctx.load("raw", path=str(path), nav_shape=(1,), sig_shape=(1549,), dtype="uint16")  # not one frame
    with pytest.raises(DataSetException, match=r"holds 6 frames .* needs 8"):
        ctx.load("raw", path=str(path), nav_shape=(2, 4), sig_shape=(16, 16), dtype="uint16")


def test_raw_file_that_fits_gives_no_warning(ctx, tmp_path):
    path = tmp_path / "fits.raw"
    np.ones((6, 16, 16), np.uint16).tofile(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataSetWarning)
        ds = ctx.load("raw", path=str(path), nav_shape=(2, 3), sig_shape=(16, 16), dtype="uint16")
    assert ds.load_warnings == []
