"""Runs a run's UDFs over one partition on a worker: the body of every task.

Executors (inline, Ray actors) all call :func:`run_partition`, so the same
code path is tested without Ray.
"""

from __future__ import annotations

import traceback
from typing import Callable

import numpy as np

from raytile.common.errors import BackendError, UDFException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.runtime import backends as _backends
from raytile.runtime.backends import ExecutionPlan, PinnedStager, TileConverter, execution_plan
from raytile.runtime.params import PartitionResult, PartitionTask, RunParams
from raytile.udf.base import UDF, UDFData
from raytile.udf.buffers import AuxBufferWrapper
from raytile.udf.meta import UDFMeta

#: Called with the number of frames of each finished tile (per-tile progress).
TileProgress = Callable[[int], None]


def _udf_error(udf: UDF, task: PartitionTask, where: str, exc: BaseException) -> UDFException:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return UDFException(
        f"{type(udf).__name__}.{where} raised {type(exc).__name__}: {exc} "
        f"while processing {task.describe()}",
        worker_traceback=tb,
    )


def _views(udf: UDF, nav_start: int, count: int, sig_index: tuple, frame: int | None) -> dict:
    views = {}
    for name, buf in udf.results.buffers():
        if frame is None:
            views[name] = buf.view_for_tile(nav_start, count, sig_index)
        else:
            views[name] = buf.view_for_frame(nav_start + frame, sig_index)
    return views


def _set_views(udf: UDF, nav_start: int, count: int, sig_index: tuple, frame: int | None) -> None:
    udf.results.set_views(_views(udf, nav_start, count, sig_index, frame))
    aux = {}
    for name, value in udf.params.items():
        if isinstance(value, AuxBufferWrapper):
            aux[name] = (value.view_for_tile(nav_start, count, sig_index) if frame is None
                         else value.view_for_frame(nav_start + frame, sig_index))
    if aux:
        udf.params.set_views(aux)


_HAS_CUPY: bool | None = None


def _worker_has_cupy() -> bool:
    global _HAS_CUPY
    if _HAS_CUPY is None:
        _HAS_CUPY = _backends.has_cupy()
    return _HAS_CUPY


def plan_for_task(params: RunParams, device_class: str, partition=None) -> ExecutionPlan:
    """The execution plan this worker uses: the coordinator's for its device class.

    A GPU worker that cannot import cupy uses the ``cuda:nocupy`` plan (CPU
    backends and "cuda"). Parameters made without plans (by hand, in tests)
    get a plan computed here. Raises :class:`BackendError` if none fits.
    """
    plans = params.backend_plan or {}
    if device_class == "cuda" and "cuda" in plans:
        plan = plans["cuda"]
        if not getattr(plan, "needs_cupy", False) or _worker_has_cupy():
            return _as_plan(plan, device_class)
        if "cuda:nocupy" in plans:
            return _as_plan(plans["cuda:nocupy"], device_class)
        raise BackendError(
            f"the UDFs {[type(u).__name__ for u in params.udfs]} need cupy, which this GPU worker cannot import"
        )
    if device_class in plans:
        return _as_plan(plans[device_class], device_class)
    if plans:
        raise BackendError(f"this run was planned for {sorted(plans)}, a task landed on a {device_class} worker")
    ds_backends = getattr(partition, "array_backends", None) or ("numpy",)
    return execution_plan(params.udfs, device_class, ds_backends,
                          cupy=device_class == "cuda" and _worker_has_cupy())


def _as_plan(plan, device_class: str) -> ExecutionPlan:
    if isinstance(plan, ExecutionPlan):
        return plan
    # a plain {backend: [indices]} mapping
    from collections import OrderedDict

    udfs = OrderedDict((b, list(i)) for b, i in plan.items())
    return ExecutionPlan(device_class, "numpy", udfs)


class _GPU:
    """A GPU task's CUDA state: its compute stream and the pinned staging of tiles."""

    def __init__(self, stage: bool):
        import cupy

        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stager = PinnedStager(self.stream) if stage else None

    def to_device(self, arr):
        return self.stager.to_device(arr)


def run_partition(
    task: PartitionTask,
    params: RunParams,
    device_class: str = "cpu",
    threads_per_worker: int | None = None,
    on_tile: TileProgress | None = None,
) -> PartitionResult:
    """Process ``task.partition`` with every UDF in ``params``; return the partition's buffers.

    On ``device_class="cuda"`` with a plan that uses cupy backends, the whole
    partition runs on a private CUDA stream: dense tiles go to the device
    through pinned staging buffers on a copy stream (overlapping the previous
    tile's compute), ``where='device'`` buffers of cupy UDFs live on the GPU
    and come back to numpy at the end, and capturable UDFs replay CUDA graphs.
    """
    plan = plan_for_task(params, device_class, task.partition)
    gpu = None
    if device_class == "cuda" and plan.needs_cupy:
        gpu = _GPU(stage=_backends.CUPY in plan.udfs)
    if gpu is None:
        return _run(task, params, plan, device_class, threads_per_worker, on_tile, None)
    with gpu.stream:
        result = _run(task, params, plan, device_class, threads_per_worker, on_tile, gpu)
    gpu.stream.synchronize()
    return result


def _run(task, params, plan: ExecutionPlan, device_class, threads_per_worker, on_tile, gpu) -> PartitionResult:
    partition = task.partition
    roi = params.roi
    num_frames = partition.count_frames(roi)
    nav_origin = partition.roi_offset(roi)
    sig_shape = params.dataset_shape.sig.to_tuple()
    part_slice = Slice((nav_origin,) + (0,) * len(sig_shape),
                       Shape((num_frames,) + sig_shape, sig_dims=len(sig_shape)))
    backend_of = plan.backend_of()
    order = [i for idxs in plan.udfs.values() for i in idxs]  # UDFs in conversion order

    udfs: list[UDF] = []
    for i, template in enumerate(params.udfs):
        udf = template.copy_for_partition(partition.start, partition.stop, roi)
        meta = UDFMeta(
            partition_slice=part_slice,
            dataset_shape=params.dataset_shape,
            roi=roi,
            dataset_dtype=params.dataset_dtype,
            input_dtype=params.input_dtype,
            tiling_scheme=params.tiling_scheme,
            corrections=params.corrections,
            device_class=device_class,
            threads_per_worker=threads_per_worker,
            array_backend=backend_of[i],
        )
        udf.set_meta(meta)
        udf.set_backend(backend_of[i])
        try:
            buffers = udf.get_result_buffers()
            xp = udf.xp
            for buf in buffers.values():
                if buf.use != "result_only":
                    buf.allocate(num_frames, sig_shape, xp=xp if buf.where == "device" else np)
            udf.results = UDFData(buffers)
            udf.task_data = UDFData(udf.get_task_data())
            if udf.preprocess is not None:
                udf.results.set_views(dict((k, b.data) for k, b in udf.results.buffers()))
                udf.preprocess()
                udf.results.clear_views()
        except UDFException:
            raise
        except Exception as e:
            raise _udf_error(udf, task, "preprocess/get_result_buffers", e) from None
        udfs.append(udf)

    methods = [udf.get_method() for udf in udfs]
    graphs: dict[int, object] = {}
    if gpu is not None:
        from raytile.udf.capture import TileGraphs, is_capturable

        for i, udf in enumerate(udfs):
            if methods[i] == "tile" and backend_of[i] == _backends.CUPY and is_capturable(udf):
                graphs[i] = TileGraphs(udf, gpu.stream)
    nav_names = [{n for n, b in udf.results.buffers() if b.kind == "nav"} for udf in udfs]

    get_tiles_kwargs = {}
    if getattr(partition, "array_backends", None):
        get_tiles_kwargs["array_backend"] = plan.ds_backend
    tiles = partition.get_tiles(params.tiling_scheme, roi=roi, dest_dtype=params.input_dtype,
                                **get_tiles_kwargs)
    to_device = gpu.to_device if gpu is not None and gpu.stager is not None else None
    for tile in tiles:
        data = tile.data
        if params.corrections is not None:
            if isinstance(data, np.ndarray) and not data.flags.writeable:
                data = data.copy()  # a straight (read-only) view of a file map: correct a copy
            params.corrections.apply(data, tile.tile_slice)
        nav_start = tile.tile_slice.origin[0] - nav_origin
        count = tile.tile_slice.shape[0]
        sig_index = params.tiling_scheme[tile.scheme_idx].get()
        converter = TileConverter(data, shape=tile.tile_slice.shape.to_tuple(), to_device=to_device)
        for i in order:
            udf, method = udfs[i], methods[i]
            udf.meta.tiling_scheme_idx = tile.scheme_idx
            try:
                tile_data = converter.get(backend_of[i])
            except Exception as e:
                raise BackendError(
                    f"converting a tile of {task.describe()} from {converter.source_backend} to "
                    f"{backend_of[i]} for {type(udf).__name__} failed: {type(e).__name__}: {e}"
                ) from e
            try:
                if method == "tile":
                    udf.meta.slice = tile.tile_slice
                    if i in graphs:
                        graphs[i].process(tile_data, tile.scheme_idx,
                                          _views(udf, nav_start, count, sig_index, None),
                                          nav_names[i], udf.results.set_views)
                    else:
                        _set_views(udf, nav_start, count, sig_index, None)
                        udf.process_tile(tile_data)
                elif method == "frame":
                    for f in range(count):
                        udf.meta.slice = Slice(
                            (tile.tile_slice.origin[0] + f,) + tile.tile_slice.origin[1:],
                            Shape((1,) + tile.tile_slice.shape.to_tuple()[1:], sig_dims=len(sig_shape)),
                        )
                        _set_views(udf, nav_start, count, sig_index, f)
                        udf.process_frame(tile_data[f])
                else:
                    udf.meta.slice = tile.tile_slice
                    _set_views(udf, nav_start, count, sig_index, None)
                    udf.process_partition(tile_data)
            except UDFException:
                raise
            except ValueError as e:
                if "read-only" in str(e):
                    raise UDFException(
                        f"{type(udf).__name__}.process_{method} tried to write to its input tile in "
                        f"{task.describe()}; tiles are read-only (zero-copy), copy the tile first",
                        worker_traceback="".join(traceback.format_exception(type(e), e, e.__traceback__)),
                    ) from None
                raise _udf_error(udf, task, f"process_{method}", e) from None
            except Exception as e:
                raise _udf_error(udf, task, f"process_{method}", e) from None
        if gpu is not None and gpu.stager is not None:
            gpu.stager.tile_done()
        if on_tile is not None and tile.scheme_idx == len(params.tiling_scheme) - 1:
            on_tile(count)

    out: list[dict[str, np.ndarray]] = []
    for udf in udfs:
        udf.results.clear_views()
        udf.params.clear_views()
        if udf.postprocess is not None:
            try:
                udf.postprocess()
            except Exception as e:
                raise _udf_error(udf, task, "postprocess", e) from None
    if gpu is not None:
        gpu.stream.synchronize()
    for udf in udfs:
        out.append({
            name: _to_numpy(buf.data)
            for name, buf in udf.results.buffers()
            if buf.use is None
        })
    result = PartitionResult(
        idx=task.idx, buffers=out, version=params.version, device_class=device_class,
        num_frames=num_frames, backends=backend_of,
    )
    if graphs:
        result.capture_stats = {i: dict(g.stats) for i, g in graphs.items()}  # type: ignore[attr-defined]
    return result


def _to_numpy(arr):
    if isinstance(arr, np.ndarray):
        return arr
    get = getattr(arr, "get", None)  # cupy
    if get is not None:
        return get()
    return np.asarray(arr)
