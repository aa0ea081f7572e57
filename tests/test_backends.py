"""Execution plan: preference rules, backends= restriction, errors, conversions counted, dtype."""

from __future__ import annotations

import numpy as np
import pytest
import sparse
from sparseconverter import get_backend

import raytile as rt
from raytile.common.errors import BackendError
from raytile.runtime import part_runner
from raytile.runtime.execution_plan import execution_plan, plan_dtype
from raytile.runtime.tile_converter import TileConverter
from raytile.runtime.plan import make_plan
from raytile.udf._tiles import flat2d
from raytile.udf.base import UDF

NUMPY = "numpy"
CUPY = "cupy"
CUDA = "cuda"
COO = "sparse.COO"
GCXS = "sparse.GCXS"
CSR = "scipy.sparse.csr_matrix"
CSC = "scipy.sparse.csc_matrix"
CUPY_CSR = "cupyx.scipy.sparse.csr_matrix"


class TileSum(UDF):
    """Sum of frames for any backend; ``backends`` chosen per instance; records what it got."""

    def __init__(self, backends=(NUMPY,), **kwargs):
        super().__init__(backends=tuple(backends), **kwargs)

    def get_backends(self):
        return self.params.backends

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def get_result_buffers(self):
        return {
            "intensity": self.buffer(kind="sig", dtype="float64"),
            "ok": self.buffer(kind="nav", dtype=bool),
        }

    def process_tile(self, tile):
        backend = get_backend(tile)
        expected = NUMPY if self.meta.array_backend == CUDA else self.meta.array_backend
        self.results.ok[:] = backend == expected
        if backend in (CSR, CSC):
            sums = np.asarray(tile.sum(axis=0)).reshape(self.results.intensity.shape)
        elif backend in (COO, GCXS):  # via scipy: pydata reductions JIT-compile for seconds
            sums = np.asarray(flat2d(tile).sum(axis=0)).reshape(self.results.intensity.shape)
        else:
            sums = tile.sum(axis=0)
        self.results.intensity[:] += sums

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity
        dest.ok[:] = src.ok


def plan_of(udfs, device_class, ds_backends=(NUMPY,), restrict=None, cupy=True):
    p = execution_plan(udfs, device_class, ds_backends, restrict, cupy=cupy)
    return p.ds_backend, {b: list(i) for b, i in p.udfs.items()}


# -- preference rules -----------------------------------------------------------

def test_native_backend_of_dataset_and_device_first():
    udfs = [rt.SumUDF(), rt.SumSigUDF()]
    assert plan_of(udfs, "cpu") == (NUMPY, {NUMPY: [0, 1]})
    assert plan_of(udfs, "cpu", (CSR,)) == (CSR, {CSR: [0, 1]})
    assert plan_of([TileSum((NUMPY, GCXS, CSC))], "cpu", (CSC, CSR)) == (CSC, {CSC: [0]})


def test_gpu_keeps_dense_dense_and_sparse_sparse():
    udfs = [rt.SumUDF(), rt.SumSigUDF()]
    assert plan_of(udfs, "cuda", (NUMPY,)) == (NUMPY, {CUPY: [0, 1]})
    assert plan_of(udfs, "cuda", (CSR,)) == (CSR, {CUPY_CSR: [0, 1]})
    # A sparse data set and a UDF preferring cupy but able to take cupyx CSR: stay sparse
    assert plan_of([TileSum((CUPY, CUPY_CSR))], "cuda", (CSR,))[1] == {CUPY_CSR: [0]}
    # ...and a dense data set with a UDF preferring cupyx CSR: stay dense
    assert plan_of([TileSum((CUPY_CSR, CUPY))], "cuda", (NUMPY,))[1] == {CUPY: [0]}


def test_cpu_on_gpu_fallback_and_cuda_backend():
    mixed = [rt.SumUDF(), TileSum((NUMPY,)), TileSum((CUDA,))]
    assert plan_of(mixed, "cuda") == (NUMPY, {CUPY: [0], NUMPY: [1], CUDA: [2]})
    # the same set on a CPU worker cannot serve the "cuda" UDF
    with pytest.raises(BackendError, match="TileSum"):
        execution_plan(mixed, "cpu")
    # a GPU worker without cupy serves cupy-capable UDFs on the CPU, "cuda" ones with numpy tiles
    assert plan_of(mixed, "cuda", cupy=False)[1] == {NUMPY: [0, 1], CUDA: [2]}


def test_most_popular_backend_then_udf_preference():
    # Three UDFs that all accept COO, one also numpy: on a dense data set the numpy-capable
    # one takes numpy (no conversion), the others share one COO conversion.
    udfs = [TileSum((GCXS, COO)), TileSum((COO,)), TileSum((NUMPY, COO))]
    assert plan_of(udfs, "cpu")[1] == {NUMPY: [2], COO: [0, 1]}
    # ties go to the backend the UDFs prefer on average
    assert plan_of([TileSum((GCXS, COO))], "cpu")[1] == {GCXS: [0]}
    assert plan_of([TileSum((COO, GCXS))], "cpu")[1] == {COO: [0]}
    # on a sparse data set a dense-only UDF is served by one conversion to numpy
    assert plan_of([TileSum((NUMPY,)), rt.SumUDF()], "cpu", (CSR,))[1] == {CSR: [1], NUMPY: [0]}


def test_backends_restriction():
    udfs = [rt.SumUDF(), rt.SumSigUDF()]
    assert plan_of(udfs, "cpu", restrict=[GCXS])[1] == {GCXS: [0, 1]}
    assert plan_of(udfs, "cpu", (CSR,), restrict=[NUMPY, CSC])[1] == {CSC: [0, 1]}
    with pytest.raises(BackendError, match="TileSum"):
        plan_of([TileSum((NUMPY,))], "cpu", restrict=[COO])


def test_errors_before_any_task(inline_ctx, monkeypatch):
    data = np.ones((4, 4, 8, 8), dtype=np.float32)
    ds = inline_ctx.load("memory", data=data)
    ran = []
    monkeypatch.setattr(part_runner.PartitionRun, "run", lambda *a, **k: ran.append(1))
    with pytest.raises(BackendError, match="cuda"):  # only a GPU can serve it; inline has a CPU
        inline_ctx.run_udf(dataset=ds, udf=TileSum((CUPY,)))
    with pytest.raises(BackendError, match="cupy"):
        inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF(), backends=[CUPY])
    with pytest.raises(BackendError, match="unknown array backends"):
        inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF(), backends=["tensorflow"])
    with pytest.raises(BackendError, match="TileSum.get_backends"):
        inline_ctx.run_udf(dataset=ds, udf=TileSum(("jax",)))
    with pytest.raises(BackendError, match="no common device"):
        inline_ctx.run_udf(dataset=ds, udf=[TileSum((CUDA,)), TileSum((NUMPY,))])
    with pytest.raises(BackendError, match="none of which is allowed"):
        inline_ctx.run_udf(dataset=ds, udf=TileSum((NUMPY,)), backends=[COO])
    assert ran == []


def test_make_plan_for_gpu_executor_without_gpu():
    """Planning for a GPU worker needs no GPU: plans, dtype and task device class."""
    ctx = rt.Context(executor="inline")
    data = np.ones((4, 4, 8, 8), dtype=np.uint16)
    ds = ctx.load("memory", data=data)
    plan = make_plan(ds, [rt.SumUDF(dtype="int64")], device_classes=("cpu", "cuda"))
    assert set(plan.params.backend_plan) == {"cpu", "cuda", "cuda:nocupy"}
    assert plan.params.backend_plan["cuda"].backends == (CUPY,)
    assert plan.tasks[0].device_class == "any"
    only_gpu = make_plan(ds, [TileSum((CUPY,))], device_classes=("cpu", "cuda"))
    assert set(only_gpu.params.backend_plan) == {"cuda"} and only_gpu.tasks[0].device_class == "cuda"


def test_dtype_takes_backends_into_account():
    assert plan_dtype("uint16", [NUMPY, CSR]) == np.uint16
    assert plan_dtype("uint16", [CUPY_CSR]) == np.float32  # cupyx sparse has no integer types
    assert plan_dtype("bool", [CUPY_CSR]) == np.bool_
    ctx = rt.Context(executor="inline")
    import scipy.sparse as sp

    ds = ctx.load("sparse_memory", data=sp.csr_matrix(np.eye(16, 64, dtype=np.int32)), sig_shape=(8, 8))
    cpu = make_plan(ds, [TileSum((CSR, CUPY_CSR))], device_classes=("cpu",))
    assert cpu.params.input_dtype == np.int32
    gpu = make_plan(ds, [TileSum((CUPY_CSR,))], device_classes=("cuda",))
    assert gpu.params.input_dtype == np.float64  # int32 widened to hold float32's range


# -- conversions, counted -------------------------------------------------------

class CountingConverter(TileConverter):
    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        CountingConverter.made.append(self)


@pytest.fixture
def counting(monkeypatch):
    CountingConverter.made = []
    monkeypatch.setattr(part_runner, "TileConverter", CountingConverter)
    return CountingConverter


@pytest.mark.parametrize("dataset", ["dense", "sparse"])
def test_conversions_counted(inline_ctx, counting, dataset, rng):
    data = (rng.random((4, 6, 8, 8)) < 0.2) * rng.integers(1, 50, (4, 6, 8, 8))
    data = data.astype(np.float32)
    if dataset == "dense":
        ds = inline_ctx.load("memory", data=data, num_partitions=2)
        native = NUMPY
    else:
        ds = inline_ctx.load("sparse_memory", data=sparse.COO.from_numpy(data), num_partitions=2)
        native = CSR
    ref = data.sum(axis=(0, 1))

    def run(udfs):
        counting.made = []
        res = inline_ctx.run_udf(dataset=ds, udf=udfs)
        for r in res:
            np.testing.assert_allclose(r["intensity"].data, ref)
            assert r["ok"].data.all()
        return counting.made

    # all UDFs native: no conversion at all
    made = run([TileSum((native,)), TileSum((native, COO)), TileSum((NUMPY, CSR))])
    assert made and all(c.conversions == [] for c in made)
    # three UDFs in the same foreign format: converted once per tile
    made = run([TileSum((GCXS,)), TileSum((GCXS,)), TileSum((GCXS,))])
    assert all(c.conversions == [(native, GCXS)] for c in made)
    # two foreign formats: two conversions per tile, each format made once,
    # the second made from the cheapest one at hand
    made = run([TileSum((COO,)), TileSum((CSC,)), TileSum((COO,))])
    for c in made:
        targets = [t for _, t in c.conversions]
        assert sorted(targets) == sorted([COO, CSC]) and len(set(targets)) == len(targets)
    total = sum(len(c.conversions) for c in made)
    assert total == 2 * len(made)


def test_converter_caches_and_shapes():
    tile = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    conv = TileConverter(tile)
    csr = conv.get(CSR)
    assert csr.shape == (2, 12)
    coo = conv.get(COO)
    assert coo.shape == (2, 3, 4)
    assert conv.get(CSR) is csr and conv.get(NUMPY) is tile
    assert conv.get(CUDA) is tile  # "cuda" UDFs take numpy tiles
    assert [t for _, t in conv.conversions] == [CSR, COO]
    np.testing.assert_array_equal(coo.todense(), tile)


def test_meta_array_backend_and_device_buffers_on_cpu(inline_ctx):
    class Probe(UDF):
        def get_backends(self):
            return (GCXS, NUMPY)

        def get_result_buffers(self):
            return {"n": self.buffer(kind="nav", dtype="float32", where="device")}

        def process_tile(self, tile):
            assert self.meta.array_backend == GCXS and isinstance(tile, sparse.GCXS)
            assert self.xp is np and isinstance(self.results.n, np.ndarray)
            self.results.n[:] = self.forbuf(flat2d(tile).sum(axis=1), self.results.n)

    data = np.arange(3 * 5 * 4 * 4, dtype=np.float32).reshape(3, 5, 4, 4)
    ds = inline_ctx.load("memory", data=data)
    res = inline_ctx.run_udf(dataset=ds, udf=Probe(), backends=[GCXS])
    np.testing.assert_allclose(res["n"].data, data.sum(axis=(2, 3)))


def test_forbuf_brings_results_into_buffer_format():
    import scipy.sparse as sp

    udf = rt.SumUDF()
    target = np.zeros((4, 4))
    coo = sparse.COO.from_numpy(np.eye(4))
    np.testing.assert_array_equal(udf.forbuf(coo, target), np.eye(4))
    flat = sp.csr_matrix(np.arange(16.0).reshape(1, 16))
    np.testing.assert_array_equal(udf.forbuf(flat, np.zeros(16)), np.arange(16.0))
