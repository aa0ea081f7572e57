"""Behaviours LiberTEM 0.16 has and raytile must share (issue 36, item 3), each against LiberTEM's own result.

Every case runs the same call on the same data with LiberTEM's inline
Context and with raytile (inline, and on Ray where a worker is involved), and
compares the results, the warning or the exception type.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.udf.base as lt_udf  # noqa: E402

import raytile as rt  # noqa: E402


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


# --- wrong results ---------------------------------------------------------------------------------------------


def test_com_analysis_of_complex_data_keeps_the_imaginary_part(lt_ctx, inline_ctx):
    data = np.zeros((2, 3, 4, 4), dtype=np.complex64)
    data[..., 1, 2] = 1
    data[..., 2, 1] = 1j
    data[1, 2, 3, 3] = 2 - 1j
    ref = lt_ctx.run(lt_ctx.create_com_analysis(dataset=lt_ctx.load("memory", data=data), cx=0, cy=0))
    got = inline_ctx.run(inline_ctx.create_com_analysis(dataset=inline_ctx.load("memory", data=data), cx=0, cy=0))
    assert list(got.keys()) == list(ref.keys())
    for key in ref.keys():
        np.testing.assert_allclose(got[key].raw_data, ref[key].raw_data, rtol=1e-6)
    assert got.x_imag.raw_data[0, 0] == pytest.approx(-0.5)  # scipy.ndimage.center_of_mass: 1.5-0.5j


class _PreparedMerge:
    """preprocess sets up an object buffer (a list) merge extends; merge counts merges without a valid mask."""

    def get_result_buffers(self):
        return {
            "sums": self.buffer(kind="single", dtype=object),
            "no_mask": self.buffer(kind="single", dtype=np.int64),
            "mask_sizes": self.buffer(kind="single", dtype=np.int64),
        }

    def preprocess(self):
        self.results.sums[0] = []

    def process_partition(self, partition):
        self.results.sums[0].append(float(partition.sum()))

    def merge(self, dest, src):
        mask = self.meta.get_valid_nav_mask()
        dest.no_mask[:] += src.no_mask + (mask is None)
        dest.mask_sizes[:] = max(int(dest.mask_sizes[0]), 0 if mask is None else mask.size)
        dest.sums[0] = dest.sums[0] + src.sums[0]


class LtPreparedMergeUDF(_PreparedMerge, lt_udf.UDF):
    pass


class RtPreparedMergeUDF(_PreparedMerge, rt.UDF):
    pass


def test_merge_gets_what_preprocess_set_up_and_a_valid_nav_mask(lt_ctx, ctx):
    data = np.random.default_rng(3).random((8, 6, 5, 5)).astype(np.float32)
    roi = np.ones((8, 6), dtype=bool)
    roi[2, 1:4] = False
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data, num_partitions=8), udf=LtPreparedMergeUDF(), roi=roi)
    got = ctx.run_udf(dataset=ctx.load("memory", data=data, num_partitions=8), udf=RtPreparedMergeUDF(), roi=roi)
    assert sorted(got["sums"].data[0]) == pytest.approx(sorted(ref["sums"].data[0]), rel=1e-5)
    assert len(ref["sums"].data[0]) == 8
    assert got["no_mask"].data[0] == ref["no_mask"].data[0] == 0
    assert got["mask_sizes"].data[0] == ref["mask_sizes"].data[0] == roi.sum()


def test_empty_shape_has_size_zero():
    from libertem.common.shape import Shape as LtShape

    from raytile.common.shape import Shape

    for dims, sig_dims in [((), 0), ((16, 16), 2), ((3, 16, 16), 2)]:
        assert Shape(dims, sig_dims=sig_dims).nav.size == LtShape(dims, sig_dims=sig_dims).nav.size
        assert Shape(dims, sig_dims=sig_dims).size == LtShape(dims, sig_dims=sig_dims).size
    assert Shape((), sig_dims=0).size == 0


def test_rgb_from_2dvector_of_a_zero_vector_is_mid_grey():
    from libertem.viz.base import rgb_from_2dvector as lt_rgb

    from raytile.viz import rgb_from_2dvector

    np.testing.assert_array_equal(rgb_from_2dvector(0, 0), lt_rgb(0, 0))
    y = np.array([[0.0, 1.0], [0.0, -2.0]])
    x = np.array([[0.0, 0.0], [3.0, 0.0]])
    got, ref = rgb_from_2dvector(y, x), lt_rgb(y, x)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_array_equal(got[0, 0], ref[0, 0])  # the zero vector: (127, 127, 127)
    assert len(set(got[1, 0].tolist())) > 1 and len(set(ref[1, 0].tolist())) > 1  # coloured, not grey


# --- crashes on input LiberTEM accepts -------------------------------------------------------------------------

DATA = np.random.default_rng(1).random((4, 5, 8, 8)).astype(np.float32)


def _lt_sum(lt_ctx, roi, **load):
    from libertem.udf.sum import SumUDF

    return lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA, **load), udf=SumUDF(), roi=roi)["intensity"].data


@pytest.mark.parametrize("kind", ["sparse.COO", "scipy.sparse", "coordinates", "int", "float"])
def test_roi_given_as_libertem_accepts_it(lt_ctx, ctx, kind):
    import warnings

    import scipy.sparse
    import sparse

    dense = np.eye(4, 5, dtype=bool)
    roi = {"sparse.COO": lambda: sparse.COO.from_numpy(dense), "scipy.sparse": lambda: scipy.sparse.coo_matrix(dense),
           "coordinates": lambda: [((i, i), True) for i in range(4)], "int": lambda: dense.astype(int),
           "float": lambda: dense.astype(np.float32)}[kind]
    with warnings.catch_warnings(record=True) as lt_warned:
        warnings.simplefilter("always")
        ref = _lt_sum(lt_ctx, roi())
    with warnings.catch_warnings(record=True) as rt_warned:
        warnings.simplefilter("always")
        got = ctx.run_udf(dataset=ctx.load("memory", data=DATA), udf=rt.SumUDF(), roi=roi())["intensity"].data
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    np.testing.assert_allclose(got, DATA[dense].sum(axis=0), rtol=1e-5)

    def roi_warnings(ws):
        return [(w.category, str(w.message)) for w in ws if "ROI dtype" in str(w.message)]

    assert roi_warnings(rt_warned) == roi_warnings(lt_warned)
    assert bool(roi_warnings(rt_warned)) == (kind in ("int", "float"))


@pytest.mark.parametrize("sparse_masks", [False, True])
def test_apply_masks_with_one_callable_returning_a_list(lt_ctx, ctx, sparse_masks):
    import sparse
    from libertem.udf.masks import ApplyMasksUDF as LtApplyMasksUDF

    m1 = np.ones((8, 8), dtype=np.float32)
    m2 = np.zeros((8, 8), dtype=np.float32)
    m2[2:4, 1:6] = 1
    masks = [sparse.COO.from_numpy(m) for m in (m1, m2)] if sparse_masks else [m1, m2]
    # LiberTEM takes a list of dense masks (a list of sparse ones fails there): its result is the reference
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA),
                         udf=LtApplyMasksUDF(mask_factories=lambda: [m1, m2]))["intensity"].data
    got = ctx.run_udf(dataset=ctx.load("memory", data=DATA),
                      udf=rt.ApplyMasksUDF(mask_factories=lambda: list(masks)))["intensity"].data
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    np.testing.assert_allclose(got[..., 1], DATA[..., 2:4, 1:6].sum(axis=(-1, -2)), rtol=1e-5)


class _TileDepths:
    """The deepest and the smallest tile, and the signal size of the tiles, seen by process_tile."""

    def get_result_buffers(self):
        return {"depth": self.buffer(kind="single", extra_shape=(3,), dtype=np.int64)}

    def preprocess(self):
        self.results.depth[:] = (0, 10**9, 0)

    def process_tile(self, tile):
        d = self.results.depth
        d[:] = (max(d[0], tile.shape[0]), min(d[1], tile.shape[0]), max(d[2], int(np.prod(tile.shape[1:]))))

    def merge(self, dest, src):
        dest.depth[:] = (max(dest.depth[0], src.depth[0]), min(dest.depth[1], src.depth[1]),
                         max(dest.depth[2], src.depth[2]))


class LtTileDepthsUDF(_TileDepths, lt_udf.UDF):
    pass


class RtTileDepthsUDF(_TileDepths, rt.UDF):
    pass


@pytest.mark.parametrize("sync_offset", [0, 3, -2])
def test_memory_tileshape_and_sync_offset(lt_ctx, ctx, sync_offset):
    from libertem.udf.sum import SumUDF as LtSumUDF
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF

    load = dict(tileshape=(2, 8, 8), sync_offset=sync_offset, num_partitions=2)
    lt_ds, ds = lt_ctx.load("memory", data=DATA, **load), ctx.load("memory", data=DATA, **load)
    ref = lt_ctx.run_udf(dataset=lt_ds, udf=[LtSumUDF(), LtSumSigUDF(), LtTileDepthsUDF()])
    got = ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF(), RtTileDepthsUDF()])
    np.testing.assert_allclose(got[0]["intensity"].data, ref[0]["intensity"].data, rtol=1e-5)
    np.testing.assert_allclose(got[1]["intensity"].data, ref[1]["intensity"].data, rtol=1e-5)
    # tiles of depth 2 (LiberTEM's partitions may end in a shorter one), whole frames
    np.testing.assert_array_equal(got[2]["depth"].data[[0, 2]], ref[2]["depth"].data[[0, 2]])
    assert tuple(got[2]["depth"].data[[0, 2]]) == (2, 64)
    flat = DATA.reshape(20, 8, 8)
    shifted = np.zeros_like(flat)
    lo, hi = max(sync_offset, 0), min(20, 20 + sync_offset)
    shifted[lo - sync_offset:hi - sync_offset] = flat[lo:hi]
    np.testing.assert_allclose(got[1]["intensity"].data.reshape(-1), shifted.sum(axis=(1, 2)), rtol=1e-5)


@pytest.fixture(scope="module")
def h5file(tmp_path_factory):
    h5py = pytest.importorskip("h5py")
    path = tmp_path_factory.mktemp("h5") / "scan.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("small/cube", data=DATA[:2])  # smaller: not the one LiberTEM picks
        f.create_dataset("entry/contiguous", data=DATA * 2)
        f.create_dataset("entry/chunked", data=DATA, chunks=(1, 1, 8, 8))
        f.create_dataset("entry/gzip", data=DATA, chunks=(1, 2, 8, 8), compression="gzip")
    return str(path)


def test_hdf5_without_ds_path_reads_the_data_set_libertem_picks(lt_ctx, ctx, h5file):
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF

    lt_ds = lt_ctx.load("hdf5", path=h5file)
    ds = ctx.load("hdf5", path=h5file)
    assert ds.shape.to_tuple() == tuple(lt_ds.shape)
    ref = lt_ctx.run_udf(dataset=lt_ds, udf=LtSumSigUDF())["intensity"].data
    got = ctx.run_udf(dataset=ds, udf=rt.SumSigUDF())["intensity"].data
    np.testing.assert_allclose(got, ref, rtol=1e-5)


@pytest.mark.parametrize("ds_path", ["entry/contiguous", "entry/chunked", "entry/gzip"])
@pytest.mark.parametrize("sync_offset", [3, -2])
def test_hdf5_sync_offset_and_sig_shape(lt_ctx, ctx, h5file, ds_path, sync_offset):
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF

    load = dict(path=h5file, ds_path=ds_path, sync_offset=sync_offset, sig_shape=(8, 8))
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("hdf5", **load), udf=LtSumSigUDF())["intensity"].data
    got = ctx.run_udf(dataset=ctx.load("hdf5", **load), udf=rt.SumSigUDF())["intensity"].data
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    assert np.count_nonzero(got) == 20 - abs(sync_offset)


def test_hdf5_sig_shape_other_than_the_data_sets_is_refused(lt_ctx, inline_ctx, h5file):
    from libertem.io.dataset.base import DataSetException as LtDataSetException

    with pytest.raises(LtDataSetException):
        lt_ctx.load("hdf5", path=h5file, ds_path="entry/chunked", sig_shape=(64,))
    with pytest.raises(rt.DataSetException, match=r"sig_shape \(64,\) is not the dataset's signal shape \(8, 8\)"):
        inline_ctx.load("hdf5", path=h5file, ds_path="entry/chunked", sig_shape=(64,))


@pytest.fixture(scope="module")
def files_8x8x8x8(tmp_path_factory):
    d = tmp_path_factory.mktemp("raw")
    data = np.random.default_rng(2).random((8, 8, 8, 8)).astype(np.float32)
    np.save(d / "data.npy", data)
    data.tofile(d / "data.raw")
    return {"npy": str(d / "data.npy"), "raw": str(d / "data.raw")}


@pytest.mark.parametrize("fmt", ["raw", "npy"])
@pytest.mark.parametrize("sig_shape", [(4, 4), (3, 3), (5, 7)])
def test_raw_and_npy_with_a_sig_shape_libertem_reads(lt_ctx, ctx, files_8x8x8x8, fmt, sig_shape):
    """Frames of another shape than written, also ones that leave a part frame at the end (cut off)."""
    from libertem.udf.sum import SumUDF as LtSumUDF

    load = dict(path=files_8x8x8x8[fmt], sig_shape=sig_shape)
    if fmt == "raw":
        load.update(nav_shape=(8, 8), dtype="float32")
    lt_ds = lt_ctx.load(fmt, **load)
    ref = lt_ctx.run_udf(dataset=lt_ds, udf=LtSumUDF())["intensity"].data
    ds = ctx.load(fmt, **load)
    assert ds.shape.to_tuple() == tuple(lt_ds.shape)
    got = ctx.run_udf(dataset=ds, udf=rt.SumUDF())["intensity"].data
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    flat = np.load(files_8x8x8x8["npy"]).reshape(-1)
    n = 64 * int(np.prod(sig_shape))
    np.testing.assert_allclose(got, flat[:n].reshape((64,) + sig_shape).sum(axis=0), rtol=1e-5)


def test_raw_deprecated_parameters_with_libertems_future_warning(lt_ctx, ctx, files_8x8x8x8):
    import warnings

    from libertem.udf.sum import SumUDF as LtSumUDF

    load = dict(path=files_8x8x8x8["raw"], scan_size=(4, 16), detector_size=(8, 8), dtype="float32",
                enable_direct=True)
    results, warned = [], []
    for c, udf in ((lt_ctx, LtSumUDF()), (ctx, rt.SumUDF())):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ds = c.load("raw", **load)
        results.append((tuple(ds.shape), c.run_udf(dataset=ds, udf=udf)["intensity"].data))
        warned.append(sorted(str(x.message) for x in w if x.category is FutureWarning))
    assert results[0][0] == results[1][0] == (4, 16, 8, 8)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-5)
    assert warned[1] == warned[0] and len(warned[0]) == 3
    from libertem.io.dataset.base import DataSetException as LtDataSetException

    with pytest.raises((ValueError, LtDataSetException)):
        lt_ctx.load("raw", path=files_8x8x8x8["raw"], scan_size=(8, 8), nav_shape=(8, 8), sig_shape=(8, 8),
                    dtype="float32")
    with pytest.raises(rt.ConfigValidationError, match="give nav_shape or scan_size, not both"):
        ctx.load("raw", path=files_8x8x8x8["raw"], scan_size=(8, 8), nav_shape=(8, 8), sig_shape=(8, 8),
                 dtype="float32")


def test_auto_udf_monitor(lt_ctx, ctx):
    from libertem.udf.auto import AutoUDF as LtAutoUDF

    from raytile.udf.auto import AutoUDF

    ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA, num_partitions=3),
                         udf=LtAutoUDF(f=lambda frame: frame.sum(axis=0), monitor=True))
    got = ctx.run_udf(dataset=ctx.load("memory", data=DATA, num_partitions=3),
                      udf=AutoUDF(f=lambda frame: frame.sum(axis=0), monitor=True))
    assert sorted(got) == sorted(ref) == ["monitor", "result"]
    np.testing.assert_allclose(got["result"].data, ref["result"].data, rtol=1e-6)
    np.testing.assert_allclose(got["monitor"].data, ref["monitor"].data, rtol=1e-6)
    np.testing.assert_allclose(got["monitor"].data, DATA[-1, -1].sum(axis=0), rtol=1e-6)  # the last frame's


def test_detect_params_takes_libertems_executor_argument(files_8x8x8x8, h5file):
    """``detect_params(path, executor)`` answers as LiberTEM's: ``{"parameters": ..., "info": ...}``, and
    False for a file that is not the format's."""
    from libertem.executor.inline import InlineJobExecutor
    from libertem.io.dataset.hdf5 import H5DataSet as LtH5DataSet
    from libertem.io.dataset.npy import NPYDataSet as LtNPYDataSet

    from raytile.io.formats.hdf5 import H5DataSet
    from raytile.io.formats.npy import NPYDataSet

    executor = InlineJobExecutor()
    for lt_cls, cls, path, keys in ((LtNPYDataSet, NPYDataSet, files_8x8x8x8["npy"], ["path", "nav_shape", "sig_shape"]),
                                    (LtH5DataSet, H5DataSet, h5file, ["path", "ds_path", "nav_shape", "sig_shape"])):
        ref = lt_cls.detect_params(path, executor)
        got = cls.detect_params(path, executor)
        assert got == cls.detect_params(path)
        assert set(got) == set(ref) == {"parameters", "info"}
        assert list(got["parameters"]) == list(ref["parameters"]) == keys
        assert ({k: tuple(v) if isinstance(v, (tuple, list)) else v for k, v in got["parameters"].items()}
                == {k: tuple(v) if isinstance(v, (tuple, list)) else v for k, v in ref["parameters"].items()})
    assert NPYDataSet.detect_params(files_8x8x8x8["npy"])["info"] == \
        LtNPYDataSet.detect_params(files_8x8x8x8["npy"], executor)["info"]
    for lt_cls, cls, other in ((LtNPYDataSet, NPYDataSet, h5file), (LtH5DataSet, H5DataSet, files_8x8x8x8["npy"])):
        assert cls.detect_params(other, executor) is lt_cls.detect_params(other, executor) is False


def test_detect_params_of_an_hdf5_file_without_a_datacube_is_its_path_as_libertem(tmp_path):
    """An HDF5 file with no dataset of 3 or more dimensions: LiberTEM's detection gives the path alone (raytile's
    raised); loading it without ``ds_path`` says what is missing."""
    h5py = pytest.importorskip("h5py")
    from libertem.executor.inline import InlineJobExecutor
    from libertem.io.dataset.hdf5 import H5DataSet as LtH5DataSet

    from raytile.common.errors import DataSetException
    from raytile.io.formats.hdf5 import H5DataSet

    path = str(tmp_path / "flat.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(4)
    ref = LtH5DataSet.detect_params(path, InlineJobExecutor())["parameters"]
    assert H5DataSet.detect_params(path)["parameters"] == ref == {"path": path}
    with pytest.raises(DataSetException, match="no numeric dataset of 3 or more dimensions.*give ds_path"):
        rt.Context(executor="inline").load("hdf5", path=path)


def test_hdf5_check_valid_and_detect_timeout_as_libertem(ctx, h5file):
    """``H5DataSet.check_valid()`` is True, and a dataset listing that times out gives the path only."""
    from unittest import mock

    from libertem.executor.inline import InlineJobExecutor
    from libertem.io.dataset.hdf5 import H5DataSet as LtH5DataSet

    from raytile.io.formats.hdf5 import H5DataSet

    executor = InlineJobExecutor()
    lt_ds = LtH5DataSet(path=h5file, ds_path="entry/gzip").initialize(executor)
    ds = ctx.load("hdf5", path=h5file, ds_path="entry/gzip")
    assert ds.check_valid() is lt_ds.check_valid() is True
    with mock.patch("h5py.File.visititems", side_effect=TimeoutError("too slow")):
        ref = LtH5DataSet.detect_params(h5file, executor=executor)["parameters"]
        got = H5DataSet.detect_params(h5file, executor=executor)["parameters"]
    assert got == ref == {"path": h5file}


# --- exception types -------------------------------------------------------------------------------------------


class _RaisesKeyError:
    def get_result_buffers(self):
        return {"a": self.buffer(kind="nav")}

    def process_frame(self, frame):
        raise KeyError("no such thing")


class LtRaisesKeyErrorUDF(_RaisesKeyError, lt_udf.UDF):
    pass


class RtRaisesKeyErrorUDF(_RaisesKeyError, rt.UDF):
    pass


class _UndeclaredBuffer:
    def get_result_buffers(self):
        return {"a": self.buffer(kind="nav")}

    def process_frame(self, frame):
        self.results.b[:] = 1


class LtUndeclaredBufferUDF(_UndeclaredBuffer, lt_udf.UDF):
    pass


class RtUndeclaredBufferUDF(_UndeclaredBuffer, rt.UDF):
    pass


def _raised(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what the test compares
        return e
    raise AssertionError("nothing raised")


@pytest.mark.parametrize("case", ["KeyError in process_frame", "undeclared buffer", "no UDF", "CoM on 1D nav"])
def test_exceptions_keep_libertems_type_and_raytiles_context(lt_ctx, ctx, case):
    from libertem.udf.com import CoMUDF as LtCoMUDF

    from raytile.udf.com import CoMUDF

    data = DATA if case != "CoM on 1D nav" else DATA.reshape(20, 8, 8)
    lt_ds, ds = lt_ctx.load("memory", data=data), ctx.load("memory", data=data)
    lt_udf_, rt_udf_ = {"KeyError in process_frame": (LtRaisesKeyErrorUDF, RtRaisesKeyErrorUDF),
                        "undeclared buffer": (LtUndeclaredBufferUDF, RtUndeclaredBufferUDF),
                        "no UDF": (lambda: [], lambda: []),
                        "CoM on 1D nav": (lambda: LtCoMUDF.with_params(), lambda: CoMUDF.with_params())}[case]
    ref = _raised(lambda: lt_ctx.run_udf(dataset=lt_ds, udf=lt_udf_()))
    got = _raised(lambda: ctx.run_udf(dataset=ds, udf=rt_udf_()))
    assert isinstance(got, type(ref))  # ``except KeyError`` (ValueError, AttributeError) works as in LiberTEM
    assert isinstance(got, rt.UDFException)
    if case in ("KeyError in process_frame", "undeclared buffer"):
        assert f"{rt_udf_.__name__}.process_frame raised" in str(got) and "partition" in str(got)
        assert got.worker_traceback and "process_frame" in got.worker_traceback


# --- semantics -------------------------------------------------------------------------------------------------


def test_com_udf_params_com_params():
    from libertem.udf.com import CoMUDF as LtCoMUDF

    from raytile.udf.com import CoMUDF

    kw = dict(cy=1.5, cx=2.5, r=3.0, ri=0.5, scan_rotation=12.0, flip_y=True)
    ref = LtCoMUDF.with_params(**kw).params.com_params
    got = CoMUDF.with_params(**kw).params.com_params
    assert got._fields == ref._fields
    assert [getattr(got, f) for f in got._fields if f != "regression"] == \
        [getattr(ref, f) for f in ref._fields if f != "regression"]
    assert int(got.regression) == int(ref.regression)


class _DictMerge:
    """merge reads its buffers the old way, ``dest['sum']``: LiberTEM warns (UseDiscouragedWarning)."""

    def get_result_buffers(self):
        return {"sum": self.buffer(kind="sig", dtype=np.float64)}

    def process_frame(self, frame):
        self.results.sum[:] += frame

    def merge(self, dest, src):
        dest["sum"][:] += src["sum"]


class LtDictMergeUDF(_DictMerge, lt_udf.UDF):
    pass


class RtDictMergeUDF(_DictMerge, rt.UDF):
    pass


def test_dict_access_in_merge_warns_as_in_libertem(lt_ctx, inline_ctx):
    from libertem.warnings import UseDiscouragedWarning as LtUseDiscouraged

    from raytile.warnings import UseDiscouragedWarning

    data = np.random.default_rng(5).random((4, 6, 5, 5))
    with pytest.warns(LtUseDiscouraged, match="dict-like access is discouraged"):
        ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data, num_partitions=3), udf=LtDictMergeUDF())
    with pytest.warns(UseDiscouragedWarning, match="dict-like access is discouraged"):
        got = inline_ctx.run_udf(dataset=inline_ctx.load("memory", data=data, num_partitions=3), udf=RtDictMergeUDF())
    np.testing.assert_allclose(got["sum"].data, ref["sum"].data)
    np.testing.assert_allclose(got["sum"].data, data.sum(axis=(0, 1)))


def test_results_are_buffer_wrappers_as_in_libertem(lt_ctx, ctx):
    from libertem.common.buffers import BufferWrapper as LtBufferWrapper
    from libertem.udf.sum import SumUDF as LtSumUDF

    from raytile.udf.buffers import BufferWrapper

    data = np.random.default_rng(6).random((4, 6, 5, 5))
    roi = np.zeros((4, 6), dtype=bool)
    roi[1:3, 2:5] = True
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data), udf=LtSumUDF(), roi=roi)
    got = ctx.run_udf(dataset=ctx.load("memory", data=data), udf=rt.SumUDF(), roi=roi)
    assert isinstance(ref["intensity"], LtBufferWrapper) and isinstance(got["intensity"], BufferWrapper)
    assert got["intensity"].kind == ref["intensity"].kind == "sig"
    assert got["intensity"].dtype == ref["intensity"].dtype and got["intensity"].extra_shape == ()
    np.testing.assert_allclose(got["intensity"].data, ref["intensity"].data)
    np.testing.assert_allclose(got["intensity"].raw_data, data[roi].sum(axis=0))


class _WarnsInPostprocess:
    """process_frame and postprocess give warnings (a frame's odd value; dict access, as LiberTEM's test)."""

    def get_result_buffers(self):
        return {"default": self.buffer(kind="nav", dtype=np.float32)}

    def process_frame(self, frame):
        if frame.sum() < 0.5:
            warnings.warn("a dark frame", RuntimeWarning)
        self.results.default[:] = np.sum(frame)

    def postprocess(self):
        self.results["default"].raw_data


class LtWarnsUDF(_WarnsInPostprocess, lt_udf.UDF):
    pass


class RtWarnsUDF(_WarnsInPostprocess, rt.UDF):
    pass


def test_warnings_a_udf_gives_on_a_worker_reach_the_caller(lt_ctx, ctx):
    from libertem.warnings import UseDiscouragedWarning as LtUseDiscouraged

    from raytile.warnings import UseDiscouragedWarning

    data = np.ones((4, 6, 5, 5), dtype=np.float32)
    data[2, 3] = 0  # one dark frame
    with pytest.warns(LtUseDiscouraged), pytest.warns(RuntimeWarning, match="a dark frame"):
        ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data, num_partitions=4), udf=LtWarnsUDF())
    with pytest.warns(UseDiscouragedWarning), pytest.warns(RuntimeWarning, match="a dark frame"):
        got = ctx.run_udf(dataset=ctx.load("memory", data=data, num_partitions=4), udf=RtWarnsUDF())
    np.testing.assert_allclose(got["default"].data, ref["default"].data)
    np.testing.assert_allclose(got["default"].data, data.sum(axis=(2, 3)))
