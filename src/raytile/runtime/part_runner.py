"""Runs a run's UDFs over one partition on a worker: the body of every task.

Executors (inline, Ray actors) all call :func:`run_partition`, so the same
code path is tested without Ray.
"""

from __future__ import annotations

import traceback
from typing import Callable

import numpy as np

from raytile.errors import UDFException
from raytile.io.shape import Shape
from raytile.io.slice import Slice
from raytile.runtime.backends import TileConverter
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


def _set_views(udf: UDF, nav_start: int, count: int, sig_index: tuple, frame: int | None) -> None:
    views = {}
    for name, buf in udf.results.buffers():
        if frame is None:
            views[name] = buf.view_for_tile(nav_start, count, sig_index)
        else:
            views[name] = buf.view_for_frame(nav_start + frame, sig_index)
    udf.results.set_views(views)
    aux = {}
    for name, value in udf.params.items():
        if isinstance(value, AuxBufferWrapper):
            aux[name] = (value.view_for_tile(nav_start, count, sig_index) if frame is None
                         else value.view_for_frame(nav_start + frame, sig_index))
    if aux:
        udf.params.set_views(aux)


def run_partition(
    task: PartitionTask,
    params: RunParams,
    device_class: str = "cpu",
    threads_per_worker: int | None = None,
    on_tile: TileProgress | None = None,
) -> PartitionResult:
    """Process ``task.partition`` with every UDF in ``params``; return the partition's buffers."""
    partition = task.partition
    roi = params.roi
    num_frames = partition.count_frames(roi)
    nav_origin = partition.roi_offset(roi)
    sig_shape = params.dataset_shape.sig.to_tuple()
    part_slice = Slice((nav_origin,) + (0,) * len(sig_shape),
                       Shape((num_frames,) + sig_shape, sig_dims=len(sig_shape)))
    plan = params.backend_plan.get(device_class) or {"numpy": list(range(len(params.udfs)))}
    backend_of = {i: b for b, idxs in plan.items() for i in idxs}

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
    tiles = partition.get_tiles(params.tiling_scheme, roi=roi, dest_dtype=params.input_dtype)
    for tile in tiles:
        data = tile.data
        if params.corrections is not None:
            params.corrections.apply(data, tile.tile_slice)
        nav_start = tile.tile_slice.origin[0] - nav_origin
        count = tile.tile_slice.shape[0]
        sig_index = params.tiling_scheme[tile.scheme_idx].get()
        converter = TileConverter(data)
        for udf, method, i in zip(udfs, methods, range(len(udfs))):
            udf.meta.tiling_scheme_idx = tile.scheme_idx
            tile_data = converter.get(backend_of[i])
            try:
                if method == "tile":
                    udf.meta.slice = tile.tile_slice
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
        out.append({
            name: _to_numpy(buf.data)
            for name, buf in udf.results.buffers()
            if buf.use is None
        })
    return PartitionResult(
        idx=task.idx, buffers=out, version=params.version, device_class=device_class,
        num_frames=num_frames, backends=backend_of,
    )


def _to_numpy(arr):
    if isinstance(arr, np.ndarray):
        return arr
    get = getattr(arr, "get", None)  # cupy
    if get is not None:
        return get()
    return np.asarray(arr)
