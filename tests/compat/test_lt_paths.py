"""Names at LiberTEM's paths (issue 36 item 2), each against LiberTEM 0.16's own result on the same data.

Imported as the ported code imports them (``raytile.io.dataset.memory`` for
``libertem.io.dataset.memory`` ...), run on raytile's inline executor, and
compared with LiberTEM's inline Context.
"""

from __future__ import annotations

import asyncio
import os
import warnings

import numpy as np
import pytest

pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.api as lt_api  # noqa: E402
from libertem.executor.inline import InlineJobExecutor as LtInline  # noqa: E402

import raytile as rt  # noqa: E402
from raytile.compat import find_unmapped, rewrite_imports  # noqa: E402

RNG = np.random.default_rng(11)
DATA = RNG.integers(0, 100, size=(5, 6, 8, 9)).astype(np.float32)


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context(executor=LtInline())


@pytest.fixture
def ctx():
    return rt.Context(executor="inline")


def test_check_maps_every_issue_name():
    """``python -m raytile.compat.check`` finds every name of the issue's list at LiberTEM's path."""
    source = """
from libertem.io.dataset.memory import MemoryDataSet
from libertem.utils.devices import detect
from libertem.io.dataset.base import BufferedBackend, MMapBackend, DirectBackend, DataTile, TilingScheme
from libertem.io.dataset.base.tiling import DataTile
from libertem.io.dataset.base.backend import IOBackend, IOBackendImpl
from libertem.viz.base import Live2DPlot, Dummy2DPlot, visualize_simple, get_plottable_2D_channels
from libertem.udf.base import NoOpUDF
from libertem.io.dataset.hdf5 import H5DataSet
from libertem.io.dataset.raw_csr import RawCSRDataSet
from libertem.io.dataset.raw import RawFileDataSet
from libertem.io.corrections.detector import RepairValueError, correct
from libertem.warnings import UseDiscouragedWarning
from libertem.utils import make_cartesian, make_polar, rotate_deg, frame_peaks
from libertem.io.dataset.npy import read_npy_info
from libertem.udf.stddev import run_stddev
from libertem.analysis.sd import SDAnalysis
from libertem.analysis.sumsig import SumSigAnalysis
from libertem.analysis.raw import PickFrameAnalysis
from libertem.executor.inline import InlineJobExecutor
from libertem.common.backend import set_use_cpu, get_use_cuda
"""
    assert find_unmapped(rewrite_imports(source)) == []


@pytest.mark.parametrize("sync_offset", [0, 3, -4])
def test_memory_dataset_at_libertem_path(ctx, lt_ctx, sync_offset):
    from libertem.io.dataset.memory import MemoryDataSet as LtMemory
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSig

    from raytile.io.dataset.memory import MemoryDataSet
    from raytile.udf.sumsigudf import SumSigUDF

    ds = MemoryDataSet(data=DATA, tileshape=(2, 8, 9), num_partitions=3, sig_dims=2, sync_offset=sync_offset)
    assert ds.data is DATA  # the array as given
    got = ctx.run_udf(dataset=ds, udf=SumSigUDF())["intensity"].data  # no ctx.load: ready when made
    lt_ds = LtMemory(data=DATA, tileshape=(2, 8, 9), num_partitions=3, sig_dims=2, sync_offset=sync_offset)
    want = lt_ctx.run_udf(dataset=lt_ds, udf=LtSumSig())["intensity"].data
    np.testing.assert_allclose(got, want)
    assert ds.shape.to_tuple() == tuple(lt_ds.shape)


def test_ported_io_dataset_modules_load_once():
    """``raytile.io.dataset.memory`` is one module: the live ``memory`` detector, which reads its frames with
    it, gets the class the ported code imports (io/dataset.py used to lend io/_dataset as its package path,
    so the same file was also loaded as ``raytile.io._dataset.memory``, with classes of its own)."""
    import raytile.io.dataset.memory as ported
    from raytile.live.detectors.memory import acquisition

    assert acquisition.MemoryDataSet is ported.MemoryDataSet
    assert ported.__file__ is not None and os.path.dirname(ported.__file__).endswith(os.path.join("io", "dataset"))


def test_memory_dataset_datashape_gives_zeros(ctx, lt_ctx):
    from libertem.io.dataset.memory import MemoryDataSet as LtMemory

    from raytile.io.dataset.memory import MemoryDataSet

    ds = MemoryDataSet(datashape=(3, 4, 5, 6))
    lt_ds = LtMemory(datashape=(3, 4, 5, 6))
    assert ds.shape.to_tuple() == tuple(lt_ds.shape)
    assert ds.data.dtype == lt_ds.data.dtype and not ds.data.any()
    with pytest.raises(ValueError):
        MemoryDataSet(data=DATA, io_backend="mmap")
    with pytest.raises(ValueError):
        LtMemory(data=DATA, io_backend="mmap")


def test_detect_as_libertem():
    from libertem.utils.devices import detect as lt_detect

    from raytile.utils.devices import detect

    got, want = detect(), lt_detect()
    assert set(got) == set(want)
    assert got["cpus"] == want["cpus"]
    assert got["cudas"] == want["cudas"]
    assert got["has_cupy"] == want["has_cupy"]


@pytest.mark.parametrize("backend", ["MMapBackend", "BufferedBackend", "DirectBackend"])
def test_io_backend_objects(ctx, lt_ctx, tmp_path, backend):
    import libertem.io.dataset.base as lt_base

    import raytile.io.dataset.base as rt_base
    from raytile.udf.sum import SumUDF

    path = str(tmp_path / "x.raw")
    DATA.tofile(path)
    kw = dict(path=path, nav_shape=DATA.shape[:2], sig_shape=DATA.shape[2:], dtype="float32")
    ds = ctx.load("raw", io_backend=getattr(rt_base, backend)(), **kw)
    assert ds.io_backend == getattr(rt_base, backend).name
    got = ctx.run_udf(dataset=ds, udf=SumUDF())["intensity"].data
    lt_ds = lt_ctx.load("raw", io_backend=getattr(lt_base, backend)(), **kw)
    from libertem.udf.sum import SumUDF as LtSum

    want = lt_ctx.run_udf(dataset=lt_ds, udf=LtSum())["intensity"].data
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_io_backend_subclass_registers_by_id():
    from libertem.io.dataset.base.backend import IOBackend as LtIOBackend

    from raytile.io.dataset.base.backend import IOBackend, IOBackendImpl

    class Fake(IOBackend, id_="fake-i36a"):
        pass

    class LtFake(LtIOBackend, id_="fake-i36a"):
        pass

    assert IOBackend.get_cls_by_id("fake-i36a") is Fake
    assert ("fake-i36a" in IOBackend.get_supported()) == ("fake-i36a" in LtIOBackend.get_supported())
    assert {"mmap", "buffered", "direct"} <= set(IOBackend.get_supported())
    assert issubclass(Fake, IOBackendImpl)


def test_viz_base_dummy_plot_and_noop(ctx, lt_ctx):
    from libertem.udf.base import NoOpUDF as LtNoOp
    from libertem.udf.sum import SumUDF as LtSum
    from libertem.viz.base import Dummy2DPlot as LtDummy

    from raytile.io.dataset.memory import MemoryDataSet
    from raytile.udf.base import NoOpUDF
    from raytile.udf.sum import SumUDF
    from raytile.viz.base import Dummy2DPlot, Live2DPlot

    assert issubclass(Dummy2DPlot, Live2DPlot)
    ds = MemoryDataSet(data=DATA, num_partitions=2)
    udf = SumUDF()
    got = ctx.run_udf(dataset=ds, udf=[udf, NoOpUDF()], plots=[Dummy2DPlot(dataset=ds, udf=udf)])
    lt_ds = lt_ctx.load("memory", data=DATA, num_partitions=2)
    lt_udf = LtSum()
    want = lt_ctx.run_udf(dataset=lt_ds, udf=[lt_udf, LtNoOp()], plots=[LtDummy(dataset=lt_ds, udf=lt_udf)])
    np.testing.assert_allclose(got[0]["intensity"].data, want[0]["intensity"].data)
    assert dict(got[1]) == {} and dict(want[1]) == {}


def test_h5_and_raw_csr_paths(ctx, lt_ctx, tmp_path):
    h5py = pytest.importorskip("h5py")
    from libertem.udf.sum import SumUDF as LtSum

    from raytile.io.dataset.hdf5 import H5DataSet
    from raytile.io.dataset.raw_csr import RawCSRDataSet
    from raytile.io.formats.hdf5 import H5DataSet as FormatH5
    from raytile.io.formats.raw_csr import RawCSRDataSet as FormatCSR
    from raytile.udf.sum import SumUDF

    assert H5DataSet is FormatH5 and RawCSRDataSet is FormatCSR
    path = str(tmp_path / "x.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=DATA)
    got = ctx.run_udf(dataset=ctx.load("hdf5", path=path, ds_path="data"), udf=SumUDF())["intensity"].data
    want = lt_ctx.run_udf(dataset=lt_ctx.load("hdf5", path=path, ds_path="data"), udf=LtSum())["intensity"].data
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_correct_as_libertem():
    from libertem.io.corrections.detector import RepairValueError as LtRepair
    from libertem.io.corrections.detector import correct as lt_correct

    from raytile.io.corrections.detector import RepairValueError, correct

    data = RNG.integers(1, 100, size=(3, 4, 16, 16)).astype(np.float32)
    dark = RNG.random((16, 16)).astype(np.float32)
    gain = (RNG.random((16, 16)) + 0.5).astype(np.float32)
    excluded = np.array([(3, 7), (4, 12)]).T  # two pixels, (y, x) columns, as LiberTEM takes them
    got = correct(data, dark_image=dark, gain_map=gain, excluded_pixels=excluded)
    want = lt_correct(data, dark_image=dark, gain_map=gain, excluded_pixels=excluded)
    assert got.dtype == want.dtype and got.shape == want.shape
    keep = np.ones((16, 16), bool)
    keep[3, 7] = keep[4, 12] = False
    np.testing.assert_allclose(got[..., keep], want[..., keep], rtol=1e-6)
    np.testing.assert_allclose(got[..., ~keep], want[..., ~keep], rtol=0.2)  # patched pixels: neighbours' median
    assert issubclass(RepairValueError, ValueError) and issubclass(LtRepair, ValueError)


def test_warning_class_at_libertem_path():
    from libertem.warnings import UseDiscouragedWarning as LtWarning

    from raytile.warnings import UseDiscouragedWarning

    assert issubclass(UseDiscouragedWarning, FutureWarning) and issubclass(LtWarning, FutureWarning)


def test_utils_as_libertem():
    import libertem.utils as lu

    import raytile.utils as ru

    polar = RNG.random((7, 2)) * (3, 6)
    np.testing.assert_allclose(ru.make_cartesian(polar), lu.make_cartesian(polar))
    np.testing.assert_allclose(ru.make_polar(ru.make_cartesian(polar)), lu.make_polar(lu.make_cartesian(polar)))
    y, x = RNG.random(5), RNG.random(5)
    np.testing.assert_allclose(ru.rotate_deg(y, x, 33), lu.rotate_deg(y, x, 33))
    indices = np.mgrid[-3:4, -3:4]
    for got, want in zip(ru.frame_peaks(32, 32, (16, 16), (5, 1), (-1, 6), 3, indices),
                         lu.frame_peaks(32, 32, (16, 16), (5, 1), (-1, 6), 3, indices)):
        np.testing.assert_allclose(got, want)
    with pytest.raises(ValueError):
        ru.regularize_indices(np.zeros((3, 3, 3)))


def test_read_npy_info_as_libertem(tmp_path):
    from libertem.io.dataset.base import DataSetException as LtDSE
    from libertem.io.dataset.npy import read_npy_info as lt_info

    from raytile.common.errors import DataSetException
    from raytile.io.dataset.npy import read_npy_info

    path = str(tmp_path / "x.npy")
    np.save(path, DATA)
    got, want = read_npy_info(path), lt_info(path)
    assert (got.dtype, got.shape, got.count, got.offset) == (want.dtype, want.shape, want.count, want.offset)
    fpath = str(tmp_path / "f.npy")
    np.save(fpath, np.asfortranarray(DATA))
    with pytest.raises(DataSetException):
        read_npy_info(fpath)
    with pytest.raises(LtDSE):
        lt_info(fpath)


def test_run_stddev_as_libertem(ctx, lt_ctx):
    from libertem.udf.stddev import run_stddev as lt_run_stddev

    from raytile.io.dataset.memory import MemoryDataSet
    from raytile.udf.stddev import run_stddev

    roi = RNG.random(DATA.shape[:2]) < 0.6
    got = run_stddev(ctx, MemoryDataSet(data=DATA, num_partitions=2), roi=roi)
    want = lt_run_stddev(lt_ctx, lt_ctx.load("memory", data=DATA, num_partitions=2), roi=roi, use_numba=False)
    assert set(got) == set(want)
    assert got["num_frames"] == want["num_frames"] and isinstance(got["num_frames"], int)
    for k in ("varsum", "sum", "var", "std", "mean"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5)


def test_applymasks_masks_property(ctx, lt_ctx):
    from libertem.udf.masks import ApplyMasksUDF as LtApply

    from raytile.udf.masks import ApplyMasksUDF

    factories = [lambda: np.ones((8, 9)), lambda: np.eye(8, 9)]
    seen = {}

    class Probe(ApplyMasksUDF):
        def get_result_buffers(self):
            seen["raytile"] = len(self.masks)
            return super().get_result_buffers()

    class LtProbe(LtApply):
        def get_result_buffers(self):
            seen["libertem"] = len(self.masks)
            return super().get_result_buffers()

    ctx.run_udf(dataset=ctx.load("memory", data=DATA), udf=Probe(mask_factories=factories))
    lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA), udf=LtProbe(mask_factories=factories))
    assert seen["raytile"] == seen["libertem"] == 2


@pytest.mark.parametrize("name", ["SDAnalysis", "SumSigAnalysis"])
def test_sd_and_sumsig_analyses(ctx, lt_ctx, name):
    import importlib

    mod = {"SDAnalysis": "sd", "SumSigAnalysis": "sumsig"}[name]
    ours = getattr(importlib.import_module(f"raytile.analysis.{mod}"), name)
    theirs = getattr(importlib.import_module(f"libertem.analysis.{mod}"), name)
    got = ctx.run(ours(dataset=ctx.load("memory", data=DATA), parameters={}))
    want = lt_ctx.run(theirs(dataset=lt_ctx.load("memory", data=DATA), parameters={}))
    assert list(got.keys()) == list(want.keys())
    for k in want.keys():
        np.testing.assert_allclose(np.asarray(got[k].raw_data), np.asarray(want[k].raw_data), rtol=1e-5)
        assert got[k].title == want[k].title


def test_udfrun_generator_protocol(ctx, lt_ctx):
    from libertem.udf.sum import SumUDF as LtSum

    from raytile.udf.sum import SumUDF

    ds = ctx.load("memory", data=DATA, num_partitions=3)
    lt_ds = lt_ctx.load("memory", data=DATA, num_partitions=3)
    for run in (ctx.run_udf_iter(dataset=ds, udf=SumUDF()), lt_ctx.run_udf_iter(dataset=lt_ds, udf=LtSum())):
        next(iter(run))
        run.close()  # no exception, the run is over
        assert list(run) == []
    for run in (ctx.run_udf_iter(dataset=ds, udf=SumUDF()), lt_ctx.run_udf_iter(dataset=lt_ds, udf=LtSum())):
        with pytest.raises(KeyError):
            run.throw(KeyError("stop"))

    async def both():
        for run in (ctx.run_udf_iter(dataset=ds, udf=SumUDF(), sync=False),
                    lt_ctx.run_udf_iter(dataset=lt_ds, udf=LtSum(), sync=False)):
            await run.aclose()
        for run in (ctx.run_udf_iter(dataset=ds, udf=SumUDF(), sync=False),
                    lt_ctx.run_udf_iter(dataset=lt_ds, udf=LtSum(), sync=False)):
            with pytest.raises(ValueError):
                await run.athrow(ValueError("stop"))

    asyncio.run(both())


def test_common_backend_as_libertem(monkeypatch):
    import libertem.common.backend as lb

    import raytile.common.backend as rb

    for var in ("LIBERTEM_USE_CPU", "LIBERTEM_USE_CUDA", "RAYTILE_USE_CPU", "RAYTILE_USE_CUDA"):
        monkeypatch.delenv(var, raising=False)
    assert (rb.get_use_cpu(), rb.get_use_cuda(), rb.get_device_class()) == \
        (lb.get_use_cpu(), lb.get_use_cuda(), lb.get_device_class())
    rb.set_use_cuda(1)
    lb.set_use_cuda(1)
    assert (rb.get_use_cpu(), rb.get_use_cuda(), rb.get_device_class()) == \
        (lb.get_use_cpu(), lb.get_use_cuda(), lb.get_device_class())
    rb.set_use_cpu(0)
    lb.set_use_cpu(0)
    assert (rb.get_use_cpu(), rb.get_use_cuda()) == (lb.get_use_cpu(), lb.get_use_cuda())
    for var in ("LIBERTEM_USE_CPU", "LIBERTEM_USE_CUDA", "RAYTILE_USE_CPU", "RAYTILE_USE_CUDA"):
        os.environ.pop(var, None)


def test_inline_job_executor_path(lt_ctx):
    from libertem.udf.sum import SumUDF as LtSum

    from raytile.executor.inline import InlineJobExecutor
    from raytile.udf.sum import SumUDF

    ctx = rt.Context(executor=InlineJobExecutor(debug=True, inline_threads=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ctx.run_udf(dataset=ctx.load("memory", data=DATA), udf=SumUDF())["intensity"].data
    want = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA), udf=LtSum())["intensity"].data
    np.testing.assert_allclose(got, want)
