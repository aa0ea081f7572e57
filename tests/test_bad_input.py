"""Bad input ends in raytile's own exception, with a message naming the cause."""

from __future__ import annotations

import re

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import DataSetException, RaytileError, UDFException

NAV, SIG = (4, 5), (8, 6)


@pytest.fixture
def files(tmp_path, rng):
    data = rng.integers(0, 100, size=NAV + SIG).astype(np.uint16)
    raw = tmp_path / "scan.raw"
    data.tofile(raw)
    npy = tmp_path / "scan.npy"
    np.save(npy, data)
    return data, raw, npy


def test_raw_sig_shape_does_not_fit_file_size(inline_ctx, files):
    _, raw, _ = files
    with pytest.raises(DataSetException, match=rf"{re.escape(str(raw))}.*not a multiple of the frame size.*\(8, 7\)"):
        inline_ctx.load("raw", path=raw, nav_shape=NAV, sig_shape=(8, 7), dtype="uint16")


def test_raw_nav_shape_too_large_for_file(inline_ctx, files):
    _, raw, _ = files
    with pytest.raises(DataSetException, match=rf"{re.escape(str(raw))}.*holds 20 frames.*\(5, 5\) needs 25"):
        inline_ctx.load("raw", path=raw, nav_shape=(5, 5), sig_shape=SIG, dtype="uint16")


def test_raw_file_too_short(inline_ctx, files, tmp_path):
    _, raw, _ = files
    short = tmp_path / "short.raw"
    short.write_bytes(raw.read_bytes()[: 7 * 48 * 2])  # 7 whole frames
    with pytest.raises(DataSetException, match=r"short\.raw.*holds 7 frames.*too short"):
        inline_ctx.load("raw", path=short, nav_shape=NAV, sig_shape=SIG, dtype="uint16")


def test_npy_file_too_short(inline_ctx, files, tmp_path):
    _, _, npy = files
    short = tmp_path / "short.npy"
    short.write_bytes(npy.read_bytes()[:500])
    with pytest.raises(DataSetException, match=r"short\.npy: file is too short.*\(4, 5, 8, 6\)"):
        inline_ctx.load("npy", path=short)


def test_npy_nav_shape_too_large(inline_ctx, files):
    _, _, npy = files
    with pytest.raises(DataSetException, match=r"scan\.npy.*holds 20 frames.*needs 30"):
        inline_ctx.load("npy", path=npy, nav_shape=(5, 6))


@pytest.mark.parametrize("fmt", ["raw", "npy"])
def test_missing_file(inline_ctx, tmp_path, fmt):
    path = tmp_path / f"nothere.{fmt}"
    kwargs = dict(nav_shape=NAV, sig_shape=SIG, dtype="uint16") if fmt == "raw" else {}
    with pytest.raises(DataSetException, match=rf"file not found: {re.escape(str(path))}"):
        inline_ctx.load(fmt, path=path, **kwargs)


@pytest.mark.parametrize("dtype", ["uint17", "notadtype"])
def test_unknown_dtype(inline_ctx, files, dtype):
    _, raw, _ = files
    with pytest.raises(DataSetException, match=rf"unknown dtype '{dtype}'"):
        inline_ctx.load("raw", path=raw, nav_shape=NAV, sig_shape=SIG, dtype=dtype)


def test_unknown_format(inline_ctx, files):
    _, raw, _ = files
    with pytest.raises(DataSetException, match=r"unknown data set format 'rawr'.*known formats:.*npy.*raw"):
        inline_ctx.load("rawr", path=raw)


@pytest.mark.parametrize("roi,msg", [
    (np.ones((5, 4), dtype=bool), r"roi shape \(5, 4\) does not match the data set's nav shape \(4, 5\)"),
    (np.ones(19, dtype=bool), r"roi shape \(19,\) does not match"),
    (np.ones(NAV, dtype=np.int64), r"roi must be a boolean array, got dtype int64"),
])
def test_bad_roi(ctx, files, roi, msg):
    data, _, _ = files
    ds = ctx.load("memory", data=data)
    with pytest.raises(DataSetException, match=msg):
        ctx.run_udf(dataset=ds, udf=rt.SumUDF(), roi=roi)


class NoProcess(rt.UDF):
    def get_result_buffers(self):
        return {"x": self.buffer(kind="nav")}


def test_udf_without_process_method(ctx, files):
    data, _, _ = files
    ds = ctx.load("memory", data=data)
    with pytest.raises(UDFException,
                       match=r"NoProcess implements none of process_tile, process_frame, process_partition"):
        ctx.run_udf(dataset=ds, udf=NoProcess())


class Explodes(rt.UDF):
    def __init__(self, where="tile", **kwargs):
        super().__init__(where=where, **kwargs)

    def get_result_buffers(self):
        if self.params.where == "buffers":
            raise KeyError("no such buffer")
        return {"x": self.buffer(kind="nav")}

    def process_tile(self, tile):
        if self.meta.slice.origin[0] >= 10:  # only in the second partition
            raise RuntimeError("kaboom in tile")


class ExplodesInFrame(rt.UDF):
    def get_result_buffers(self):
        return {"x": self.buffer(kind="nav")}

    def process_frame(self, frame):
        raise ZeroDivisionError("frame trouble")


def test_udf_raising_in_process_tile_names_udf_partition_path(ctx, files):
    _, raw, _ = files
    ds = ctx.load("raw", path=raw, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=2)
    with pytest.raises(UDFException) as info:
        ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), Explodes()])
    msg = str(info.value)
    assert re.search(r"Explodes\.process_tile raised RuntimeError: kaboom in tile", msg)
    assert "partition 1 (frames 10:20)" in msg
    assert str(raw) in msg
    assert info.value.worker_traceback and "kaboom in tile" in info.value.worker_traceback


def test_udf_raising_in_process_frame_and_get_result_buffers(ctx, files):
    data, _, _ = files
    ds = ctx.load("memory", data=data, num_partitions=2)
    # On Ray either partition may fail first.
    with pytest.raises(UDFException, match=r"ExplodesInFrame\.process_frame raised ZeroDivisionError: "
                                           r"frame trouble while processing partition [01] "):
        ctx.run_udf(dataset=ds, udf=ExplodesInFrame())
    with pytest.raises(RaytileError, match=r"Explodes.*KeyError.*no such buffer"):
        ctx.run_udf(dataset=ds, udf=Explodes(where="buffers"))


def test_not_a_udf_or_dataset(inline_ctx, files):
    data, _, _ = files
    ds = inline_ctx.load("memory", data=data)
    with pytest.raises(UDFException, match=r"expected a raytile UDF instance, got 'sum'"):
        inline_ctx.run_udf(dataset=ds, udf="sum")
    with pytest.raises(DataSetException, match=r"expected a DataSet.*got ndarray"):
        inline_ctx.run_udf(dataset=data, udf=rt.SumUDF())
    with pytest.raises(UDFException, match="at least one UDF"):
        inline_ctx.run_udf(dataset=ds, udf=[])


def test_unknown_backend(inline_ctx, files):
    data, _, _ = files
    ds = inline_ctx.load("memory", data=data)
    with pytest.raises(UDFException, match=r"LogsumUDF supports backends.*none of which is allowed.*sparse\.COO"):
        inline_ctx.run_udf(dataset=ds, udf=rt.LogsumUDF(), backends=["sparse.COO"])
