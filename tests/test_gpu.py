"""GPU paths: cupy/cupyx backends, device buffers, CUDA-graph capture, the GPU worker actor.

Skipped with a reason where cupy or a CUDA device is missing (CI has neither).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest
import scipy.sparse as sp
import sparse

import raytile as rt
from raytile.utils.devices import has_cupy
from raytile.runtime.executor import Executor, TaskHandle
from raytile.runtime.part_runner import run_partition
from raytile.runtime.plan import make_plan
from raytile.udf import masks
from raytile.udf.base import UDF

pytestmark = pytest.mark.skipif(not has_cupy(), reason="needs cupy and a CUDA GPU")

NAV, SIG = (6, 7), (16, 12)


class _Handle(TaskHandle):
    def __init__(self, task, version, params):
        super().__init__(task, version)
        self.params = params
        self.result = None
        self.error = None


class CudaInlineExecutor(Executor):
    """Runs tasks in this process as a GPU worker would (device_class 'cuda')."""

    device_classes = frozenset({"cuda"})
    results: list = []

    def put_params(self, params):
        return params

    def submit(self, task, params_handle, version, progress=None):
        h = _Handle(task, version, params_handle)
        try:
            h.result = run_partition(task, params_handle, device_class="cuda")
            CudaInlineExecutor.results.append(h.result)
        except BaseException as e:  # noqa: BLE001
            h.error = e
        return h

    def wait(self, handles: Sequence[TaskHandle], timeout: float):
        return list(handles[:1])

    def result(self, handle):
        if handle.error is not None:
            raise handle.error
        return handle.result


@pytest.fixture(scope="module")
def gpu_ctx():
    return rt.Context(executor=CudaInlineExecutor())


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    return ((rng.random(NAV + SIG) < 0.2) * rng.integers(1, 100, NAV + SIG)).astype(np.float32)


@pytest.fixture(scope="module", params=["memory", "sparse_memory"])
def dataset(request, gpu_ctx, data):
    if request.param == "memory":
        return gpu_ctx.load("memory", data=data, num_partitions=3)
    return gpu_ctx.load("sparse_memory", data=sparse.COO.from_numpy(data), num_partitions=3)


@pytest.mark.parametrize("backend", ["cupy", "cupyx.scipy.sparse.csr_matrix", "cupyx.scipy.sparse.csc_matrix"])
def test_builtins_on_gpu_backends(gpu_ctx, dataset, data, backend):
    cy, cx = SIG[0] / 2, SIG[1] / 2
    stack = np.stack([masks.disk(cy, cx, 4, SIG), masks.ring(cy, cx, 2, 6, SIG)])
    udfs = [rt.SumUDF(), rt.SumSigUDF()]
    checks = ["sum", "sumsig"]
    allowed = {b for b in (rt.udf.ApplyMasksUDF(mask_factories=lambda: stack).get_backends())}
    if backend in allowed:
        udfs.append(rt.udf.ApplyMasksUDF(mask_factories=[lambda: stack[0], lambda: sp.csr_matrix(stack[1])]))
        checks.append("masks")
    if backend in set(rt.udf.StdDevUDF().get_backends()):
        udfs.append(rt.udf.StdDevUDF())
        checks.append("std")
    res = gpu_ctx.run_udf(dataset=dataset, udf=udfs, backends=[backend])
    flat = data.reshape((-1,) + SIG)
    np.testing.assert_allclose(res[0]["intensity"].data, flat.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(res[1]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)
    i = 2
    if "masks" in checks:
        np.testing.assert_allclose(res[i]["intensity"].data, np.einsum("abyx,myx->abm", data, stack), rtol=1e-5)
        i += 1
    if "std" in checks:
        np.testing.assert_allclose(res[i]["var"].data, flat.var(axis=0), rtol=1e-4, atol=1e-3)


def test_device_buffers_and_xp(gpu_ctx, data):
    import cupy

    class Probe(UDF):
        def get_backends(self):
            return (self.BACKEND_CUPY,)

        def get_result_buffers(self):
            return {"dev": self.buffer(kind="sig", dtype="float32", where="device"),
                    "host": self.buffer(kind="nav", dtype="float32")}

        def process_tile(self, tile):
            assert self.xp is cupy and isinstance(tile, cupy.ndarray)
            assert isinstance(self.results.dev, cupy.ndarray)
            assert isinstance(self.results.host, np.ndarray)
            assert self.meta.device_class == "cuda" and self.meta.array_backend == "cupy"
            self.results.dev[:] += tile.sum(axis=0)
            self.results.host[:] = cupy.asnumpy(tile.sum(axis=(1, 2)))

        def merge(self, dest, src):
            assert isinstance(src.dev, np.ndarray)  # brought back at the end of the partition
            dest.dev[:] += src.dev
            dest.host[:] = src.host

    ds = gpu_ctx.load("memory", data=data, num_partitions=2)
    res = gpu_ctx.run_udf(dataset=ds, udf=Probe())
    np.testing.assert_allclose(res["dev"].data, data.sum(axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(res["host"].data, data.sum(axis=(2, 3)), rtol=1e-5)


def test_cuda_backend_gets_numpy_tiles(gpu_ctx, data):
    class OwnKernels(UDF):
        def get_backends(self):
            return (self.BACKEND_CUDA,)

        def get_result_buffers(self):
            return {"s": self.buffer(kind="nav", dtype="float32")}

        def process_tile(self, tile):
            assert isinstance(tile, np.ndarray) and self.xp is np and self.meta.device_class == "cuda"
            import cupy

            self.results.s[:] = cupy.asnumpy(cupy.asarray(tile).sum(axis=(1, 2)))

    ds = gpu_ctx.load("memory", data=data, num_partitions=2)
    res = gpu_ctx.run_udf(dataset=ds, udf=OwnKernels())
    np.testing.assert_allclose(res["s"].data, data.sum(axis=(2, 3)), rtol=1e-5)


class CapturedSums(UDF):
    """Sum and per-frame sum, written with preallocated arrays only: capturable."""

    capturable = True

    def get_backends(self):
        return (self.BACKEND_CUPY,)

    def get_preferred_input_dtype(self):
        return np.float32

    def get_tiling_preferences(self):
        return {"depth": 4, "total_size": self.TILE_SIZE_MAX}

    def get_result_buffers(self):
        return {"sum": self.buffer(kind="sig", dtype="float32", where="device"),
                "sumsig": self.buffer(kind="nav", dtype="float32", where="device")}

    def process_tile(self, tile):
        xp = self.xp
        self.results.sum[:] += tile.sum(axis=0)
        self.results.sumsig[:] += xp.sqrt(tile * tile).sum(axis=(1, 2))

    def merge(self, dest, src):
        dest.sum[:] += src.sum
        dest.sumsig[:] = src.sumsig


class UncapturedSums(CapturedSums):
    capturable = False


@pytest.mark.parametrize("with_roi", [False, True])
def test_capture_equals_uncaptured(gpu_ctx, with_roi):
    rng = np.random.default_rng(5)
    data = rng.random((5, 9) + SIG).astype(np.float32)  # 45 frames: depth-4 tiles plus an edge tile
    roi = rng.random((5, 9)) > 0.3 if with_roi else None
    ds = gpu_ctx.load("memory", data=data, num_partitions=2)
    CudaInlineExecutor.results = []
    cap = gpu_ctx.run_udf(dataset=ds, udf=CapturedSums(), roi=roi)
    stats = [r.capture_stats for r in CudaInlineExecutor.results]
    assert any(s and s[0]["captured"] > 0 and s[0]["replayed"] > 0 for s in stats), stats
    assert all(s[0]["failed"] == 0 for s in stats if s)
    ref = gpu_ctx.run_udf(dataset=ds, udf=UncapturedSums(), roi=roi)
    np.testing.assert_allclose(cap["sum"].data, ref["sum"].data, rtol=1e-6)
    np.testing.assert_allclose(cap["sumsig"].data, ref["sumsig"].data, rtol=1e-6)
    sel = data[roi] if roi is not None else data.reshape((-1,) + SIG)
    np.testing.assert_allclose(cap["sum"].data, sel.sum(axis=0), rtol=1e-5)


@pytest.mark.ray
def test_gpu_worker_actor():
    """A run on Context.make_local(cpus=4, gpus=1) whose CUDA tasks land on the GPU actor."""
    pytest.importorskip("ray")
    try:
        import raytile.actors.executor  # noqa: F401
    except ImportError as e:
        pytest.skip(f"Ray executor not available: {e}")

    class WhereAmI(UDF):
        def get_backends(self):
            return (self.BACKEND_CUPY,)

        def get_result_buffers(self):
            return {"gpu": self.buffer(kind="nav", dtype=bool), "s": self.buffer(kind="nav", dtype="float32")}

        def process_tile(self, tile):
            self.results.gpu[:] = self.meta.device_class == "cuda"
            self.results.s[:] = tile.sum(axis=(1, 2)).get()

    data = np.random.default_rng(1).random((4, 4) + SIG).astype(np.float32)
    with rt.Context.make_local(cpus=4, gpus=1) as ctx:
        ds = ctx.load("memory", data=data, num_partitions=4)
        res = ctx.run_udf(dataset=ds, udf=WhereAmI())
    assert res["gpu"].data.all()
    np.testing.assert_allclose(res["s"].data, data.sum(axis=(2, 3)), rtol=1e-5)


def test_plan_without_gpu_checks_is_consistent():
    ds = rt.Context(executor="inline").load("memory", data=np.zeros((2, 2, 4, 4), np.float32))
    plan = make_plan(ds, [CapturedSums()], device_classes=("cuda",))
    assert plan.params.backend_plan["cuda"].backends == ("cupy",)
