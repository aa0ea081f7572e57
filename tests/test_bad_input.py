"""Bad input ends in raytile's own exception, with a message naming the cause."""

from __future__ import annotations

import re

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import ConfigValidationError, DataSetException, DataSetWarning, RaytileError, UDFException

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
    # LiberTEM reads the whole frames and cuts off the rest: here they are too few for nav_shape
    _, raw, _ = files
    with pytest.raises(DataSetException, match=rf"{re.escape(str(raw))}: file holds 17 frames of \(8, 7\) uint16, "
                                               r"but nav_shape \(4, 5\) needs 20"):
        inline_ctx.load("raw", path=raw, nav_shape=NAV, sig_shape=(8, 7), dtype="uint16")
    with pytest.warns(DataSetWarning, match=rf"{re.escape(str(raw))}.*not a multiple of the frame size.*\(8, 7\)"):
        inline_ctx.load("raw", path=raw, nav_shape=(17,), sig_shape=(8, 7), dtype="uint16")


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


@pytest.mark.parametrize("dtype", ["uint17", "notadtype", "S4", object])
def test_unknown_dtype(inline_ctx, files, dtype):
    _, raw, _ = files
    with pytest.raises(ConfigValidationError,
                       match=rf"raw: parameter 'dtype' must be a numeric dtype.*, got {re.escape(repr(dtype))}$"):
        inline_ctx.load("raw", path=raw, nav_shape=NAV, sig_shape=SIG, dtype=dtype)


# -- strict parameters: checked against the format's schema before anything is read --------------

def load_raw(ctx, raw, **overrides):
    return ctx.load("raw", **{"path": raw, "nav_shape": NAV, "sig_shape": SIG, "dtype": "uint16", **overrides})


@pytest.mark.parametrize("name,value", [
    ("nav_shape", (3.5, 5)),  # was truncated to (3, 5): 15 of the 20 frames read silently
    ("nav_shape", (4.0, 5)),
    ("sig_shape", (8, 6.0)),
    ("nav_shape", (-4, -5)),
    ("nav_shape", ()),
    ("nav_shape", (True, 20)),
])
def test_raw_non_integer_shapes_raise(inline_ctx, files, name, value):
    _, raw, _ = files
    with pytest.raises(ConfigValidationError,
                       match=rf"raw: parameter '{name}' must be a non-empty list of positive integers, "
                             rf"got {re.escape(repr(value))}$"):
        load_raw(inline_ctx, raw, **{name: value})


@pytest.mark.parametrize("name,value,what", [
    ("nav_shape", None, "is required, got None"),
    ("sig_shape", None, "is required, got None"),
    ("nav_shape", "4x5", "must be a non-empty list of positive integers, got '4x5'"),
    ("sync_offset", "2", "must be a 64-bit integer, got '2'"),
    ("sync_offset", 10**30, "must be a 64-bit integer, got 1000000000000000000000000000000"),
    ("file_header_bytes", 1.5, "must be a 64-bit integer >= 0, got 1.5"),
    ("frame_header_bytes", -4, "must be a 64-bit integer >= 0, got -4"),
    ("num_partitions", "2", "must be a 64-bit integer >= 1, got '2'"),
    ("num_partitions", 0, "must be a 64-bit integer >= 1, got 0"),
    ("path", None, "is required, got None"),
    ("path", 42, "must be a path, a glob pattern or a non-empty list of paths, got 42"),
    ("path", [], "must be a path, a glob pattern or a non-empty list of paths, got \\[\\]"),
    ("dtype", None, "is required, got None"),  # was float64 silently
])
def test_raw_none_and_strings_name_the_parameter(inline_ctx, files, name, value, what):
    _, raw, _ = files
    with pytest.raises(ConfigValidationError, match=rf"^raw: parameter '{name}' {what}$"):
        load_raw(inline_ctx, raw, **{name: value})


@pytest.mark.parametrize("overrides,match", [
    # frames of 2**62 uint64 pixels: 2**65 bytes wrapped around to 0 in int64 (ZeroDivisionError)
    (dict(sig_shape=(2**31, 2**31), dtype="uint64"),
     r"raw: parameter 'sig_shape' \(2147483648, 2147483648\) at 64 bits per pixel .* makes frames of "
     r"36893488147419103232 bytes, more than 64-bit file offsets reach"),
    (dict(sig_shape=(2**40, 2**40)),  # 2**80 pixels overflowed numba's int64 (OverflowError)
     r"raw: parameter 'sig_shape' must be a non-empty list of positive integers whose product is at most "
     r"9223372036854775807, got \(1099511627776, 1099511627776\)"),
    (dict(frame_header_bytes=2**63 - 1),
     r"raw: parameter 'sig_shape' \(8, 6\) at 16 bits per pixel \(\+9223372036854775807/0 frame header/footer "
     r"bytes\) makes frames of 9223372036854775903 bytes"),
    (dict(nav_shape=(2**40, 2**20)),
     r"raw: parameter 'nav_shape' \(1099511627776, 1048576\) of 96-byte frames makes 110680464442257309696 bytes"),
])
def test_raw_sizes_beyond_int64_raise_naming_the_parameter(inline_ctx, files, overrides, match):
    _, raw, _ = files
    with pytest.raises(ConfigValidationError, match=match):
        load_raw(inline_ctx, raw, **overrides)


@pytest.mark.parametrize("sync_offset", [3, -3])
def test_empty_file_with_sync_offset(inline_ctx, tmp_path, sync_offset):
    empty = tmp_path / "empty.raw"
    empty.write_bytes(b"")
    with pytest.raises(DataSetException, match=rf"empty\.raw: sync_offset {sync_offset} reads no frame of the file: "
                                               rf"nav positions 0\.\.19 .* the file holds 0 frames"):
        load_raw(inline_ctx, empty, sync_offset=sync_offset)


@pytest.mark.parametrize("fmt,sync_offset", [("raw", 20), ("raw", -20), ("npy", 25), ("npy", -30)])
def test_sync_offset_past_the_data_raises(inline_ctx, files, fmt, sync_offset):
    _, raw, npy = files
    with pytest.raises(DataSetException, match=rf"sync_offset {sync_offset} reads no frame of the file.*holds 20 frames"):
        if fmt == "raw":
            load_raw(inline_ctx, raw, sync_offset=sync_offset)
        else:
            inline_ctx.load("npy", path=npy, sync_offset=sync_offset)


def test_sync_offset_within_the_data_reads_shifted_frames(inline_ctx, files):
    data, raw, _ = files
    ds = load_raw(inline_ctx, raw, sync_offset=-19)  # only the last nav position holds a frame: the file's first
    res = inline_ctx.run_udf(dataset=ds, udf=rt.SumSigUDF())
    expected = np.zeros(20)
    expected[19] = data.reshape(20, -1)[0].sum()
    np.testing.assert_array_equal(res["intensity"].data.reshape(-1), expected)


@pytest.mark.parametrize("kwargs,match", [
    (dict(sig_dims=-1), r"memory: parameter 'sig_dims' must be a 64-bit integer >= 1, got -1$"),
    (dict(sig_dims=0), r"memory: parameter 'sig_dims' must be a 64-bit integer >= 1, got 0$"),
    (dict(nav_shape=(-4, -5)), r"memory: parameter 'nav_shape' must be a non-empty list of positive integers, "
                               r"got \(-4, -5\)$"),
    (dict(sig_shape=(8.0, 6)), r"memory: parameter 'sig_shape' must be a non-empty list of positive integers, "
                               r"got \(8\.0, 6\)$"),
])
def test_memory_bad_parameters_raise_at_load(inline_ctx, files, kwargs, match):
    data, _, _ = files
    with pytest.raises(ConfigValidationError, match=match):
        inline_ctx.load("memory", data=data, **kwargs)


def test_memory_data_of_wrong_type(inline_ctx):
    with pytest.raises(ConfigValidationError, match=r"memory: parameter 'data' must be an array .*, got \[1, 2, 3\]$"):
        inline_ctx.load("memory", data=[1, 2, 3])


def test_ragged_roi(inline_ctx, files):
    data, _, _ = files
    ds = inline_ctx.load("memory", data=data[:2, :2])
    with pytest.raises(DataSetException, match=r"roi must be a boolean array of the nav shape \(2, 2\), "
                                               r"got \[\[True, False\], \[True\]\]$"):
        inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF(), roi=[[True, False], [True]])


def test_misspelt_parameter(inline_ctx, files):
    _, raw, _ = files
    with pytest.raises(ConfigValidationError, match=r"raw: unknown parameter 'nav_shap' \(did you mean 'nav_shape'\?\); "
                                                    r"known parameters: .*dtype.*nav_shape.*sig_shape") as info:
        inline_ctx.load("raw", path=raw, nav_shap=NAV, sig_shape=SIG, dtype="uint16")
    assert isinstance(info.value, RaytileError)


def test_io_backend_outside_file_formats(inline_ctx, files, tmp_path):
    from raytile.io.formats.sparse import save_npz_csr

    data, raw, _ = files
    with pytest.raises(ConfigValidationError, match=r"raw: parameter 'io_backend' must be one of "
                                                    r"\['buffered', 'direct', 'mmap'\], got 'floppy'$"):
        load_raw(inline_ctx, raw, io_backend="floppy")
    npz = tmp_path / "scan.npz"
    save_npz_csr(npz, data)
    with pytest.raises(ConfigValidationError, match=r"npz_csr: unknown parameter 'io_backend'; known parameters: "):
        inline_ctx.load("npz_csr", path=npz, io_backend="mmap")


@pytest.mark.parametrize("io_backend", ["mmap", "buffered"])
def test_hdf5_accepts_io_backend(inline_ctx, files, tmp_path, io_backend):
    h5py = pytest.importorskip("h5py")
    data, _, _ = files
    p = tmp_path / "scan.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("data", data=data)
    ds = inline_ctx.load("hdf5", path=p, ds_path="data", io_backend=io_backend)
    diagnostics = {d["name"]: d["value"] for d in ds.get_diagnostics()}
    assert diagnostics["read"] == "directly from the file" and diagnostics["io backend"] == io_backend
    res = inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    np.testing.assert_array_equal(res["intensity"].data, data.sum(axis=(0, 1)))
    with pytest.raises(ConfigValidationError, match=r"hdf5: parameter 'io_backend' must be one of .*got 'floppy'$"):
        inline_ctx.load("hdf5", path=p, ds_path="data", io_backend="floppy")


def test_python_values_are_accepted(inline_ctx, files):
    data, raw, _ = files
    ds = inline_ctx.load("raw", path=raw, nav_shape=np.array(NAV), sig_shape=(np.int64(8), np.int32(6)),
                         dtype=np.dtype("<u2"), sync_offset=np.int16(0), num_partitions=np.uint8(2))
    assert ds.shape.to_tuple() == NAV + SIG and ds.num_partitions == 2
    res = inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    np.testing.assert_array_equal(res["intensity"].data, data.sum(axis=(0, 1)))
    ds = inline_ctx.load("raw", path=[raw], nav_shape=list(NAV), sig_shape=list(SIG), dtype=np.uint16)
    assert ds.shape.to_tuple() == NAV + SIG


def test_json_and_python_parameters_share_one_validation(inline_ctx, files):
    from raytile.io import dataset_from_json

    _, raw, _ = files
    with pytest.raises(ConfigValidationError) as from_python:
        load_raw(inline_ctx, raw, nav_shape=[3.5, 5])
    with pytest.raises(ConfigValidationError) as from_json:
        dataset_from_json({"type": "raw", "path": str(raw), "nav_shape": [3.5, 5], "sig_shape": list(SIG),
                           "dtype": "uint16"})
    assert str(from_python.value) == str(from_json.value)


def test_unknown_format(inline_ctx, files):
    _, raw, _ = files
    with pytest.raises(DataSetException, match=r"unknown data set format 'rawr'.*known formats:.*npy.*raw"):
        inline_ctx.load("rawr", path=raw)


@pytest.mark.parametrize("roi,msg", [
    (np.ones((5, 4), dtype=bool), r"roi shape \(5, 4\) does not match the data set's nav shape \(4, 5\)"),
    (np.ones(19, dtype=bool), r"roi shape \(19,\) does not match"),
    # an int ROI is cast with LiberTEM's warning (tests/compat/test_lt_behaviours.py); complex is refused
    (np.ones(NAV, dtype=np.complex64), r"roi must be a boolean array, got dtype complex64"),
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
    with pytest.raises(UDFException, match=r"LogsumUDF supports backends.*none of which is allowed.*scipy\.sparse\.csr_matrix"):
        inline_ctx.run_udf(dataset=ds, udf=rt.LogsumUDF(), backends=["scipy.sparse.csr_matrix"])
