"""Runs a run's UDFs over one partition on a worker: the body of every task.

Executors (inline, Ray actors) all call :func:`run_partition`, so the same
code path is tested without Ray.
"""

from __future__ import annotations

import functools
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
from sparseconverter import CUPY

from raytile.common.buffers import to_numpy
from raytile.common.device_class import DeviceClass
from raytile.common.errors import BackendError, UDFException
from raytile.common.tiling import DataTile
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.runtime.execution_plan import ExecutionPlan
from raytile.runtime.pinned_stager import PinnedStager
from raytile.runtime.tile_converter import TileConverter
from raytile.runtime.params import PartitionResult, PartitionTask, RunParams
from raytile.runtime.udf_calls import udf_error
from raytile.udf.base import UDF, UDFData
from raytile.udf.buffers import AuxBufferWrapper
from raytile.udf.fused_tiles import fused_pair, process_pair
from raytile.udf.meta import UDFMeta
from raytile.udf.worker_cache import worker_cache_for
from raytile.utils.devices import has_cupy

__all__ = ["run_partition", "PartitionRun", "WorkerEnv", "plan_for_task", "TileProgress"]

#: Called with the number of frames of each finished tile (per-tile progress).
TileProgress = Callable[[int], None]


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


def plan_for_task(params: RunParams, env: "WorkerEnv") -> ExecutionPlan:
    """The execution plan this worker uses: the one the run planned for its device class.

    A GPU worker that cannot import cupy uses the ``cuda:nocupy`` plan (CPU
    backends and "cuda"). Raises :class:`BackendError` if none fits.
    """
    plans, device_class = params.backend_plan, env.device_class
    if device_class == DeviceClass.CUDA and DeviceClass.CUDA in plans:
        plan = plans[DeviceClass.CUDA]
        if not plan.needs_cupy or env.has_cupy:
            return plan
        if "cuda:nocupy" in plans:
            return plans["cuda:nocupy"]
        raise BackendError(
            f"the UDFs {[type(u).__name__ for u in params.udfs]} need cupy, which this GPU worker cannot import"
        )
    if device_class in plans:
        return plans[device_class]
    raise BackendError(f"this run was planned for {sorted(plans)}, a task landed on a {device_class} worker")


class _GPU:
    """A GPU task's CUDA state: its compute stream and the pinned staging of tiles."""

    def __init__(self, stage: bool):
        import cupy

        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stager = PinnedStager(self.stream) if stage else None

    def to_device(self, arr):
        return self.stager.to_device(arr)


@dataclass(frozen=True)
class WorkerEnv:
    """Facts about the worker a task runs on: its device class, its share of CPU threads, and whether
    cupy works there (asked on GPU workers only, once a process: see :meth:`here`)."""

    device_class: DeviceClass = DeviceClass.CPU
    threads: int | None = None
    has_cupy: bool = False

    @classmethod
    def here(cls, device_class: DeviceClass | str = DeviceClass.CPU, threads: int | None = None) -> "WorkerEnv":
        """The environment of this process as a ``device_class`` worker."""
        kind = DeviceClass(device_class)
        return cls(kind, threads, has_cupy=kind == DeviceClass.CUDA and _cupy_works())


@functools.cache
def _cupy_works() -> bool:
    """Whether cupy imports and makes an array here; asked once a process (an import that fails scans
    sys.path again each time)."""
    return has_cupy()


def run_partition(
    task: PartitionTask,
    params: RunParams,
    device_class: DeviceClass | str = DeviceClass.CPU,
    threads_per_worker: int | None = None,
    on_tile: TileProgress | None = None,
) -> PartitionResult:
    """Process ``task.partition`` with every UDF in ``params``; return the partition's buffers.

    The one task body every executor calls. On ``device_class="cuda"``
    with a plan that uses cupy backends, the whole partition runs on a
    private CUDA stream: dense tiles go to the device through pinned
    staging buffers on a copy stream (overlapping the previous tile's
    compute), ``where='device'`` buffers of cupy UDFs live on the GPU and
    come back to numpy at the end, and capturable UDFs replay CUDA graphs.

    >>> result = run_partition(task, params, "cpu", threads_per_worker=1)
    """
    env = WorkerEnv.here(device_class, threads_per_worker)
    plan = plan_for_task(params, env)
    gpu = None
    if env.device_class == DeviceClass.CUDA and plan.needs_cupy:
        gpu = _GPU(stage=CUPY in plan.udfs)
    if gpu is None:
        return PartitionRun(task, params, plan, env).run(on_tile)
    with gpu.stream:
        result = PartitionRun(task, params, plan, env, gpu).run(on_tile)
    gpu.stream.synchronize()
    return result


class PartitionRun:
    """One task's UDFs over one partition, in three phases::

        init_udfs -> run_tile (for each tile) -> wrap_up

    ``init_udfs`` makes each UDF's per-partition instance, meta and buffers
    (and runs ``preprocess``); ``run_tile`` corrects a tile, converts it
    once per array backend and hands it to every UDF; ``wrap_up`` runs
    ``postprocess`` and collects the result buffers. Every error names the
    UDF, the method and the partition.
    """

    def __init__(self, task: PartitionTask, params: RunParams, plan: ExecutionPlan, env: WorkerEnv,
                 gpu: "_GPU | None" = None):
        self.task = task
        self.params = params
        self.plan = plan
        self.env = env
        self.gpu = gpu
        partition = task.partition
        self.num_frames = partition.count_frames(params.roi)
        self.nav_origin = partition.roi_offset(params.roi)
        self.sig_shape = params.dataset_shape.sig.to_tuple()
        self.backend_of = plan.backend_of()
        self.order = [i for idxs in plan.udfs.values() for i in idxs]  # UDFs in conversion order
        self.udfs: list[UDF] = []
        self.methods: list[str] = []
        self.process: list[Callable[[Any], None]] = []  # each UDF's bound process_tile/frame/partition
        self.graphs: dict[int, Any] = {}
        self.nav_names: list[set[str]] = []
        self.pair: tuple[int, int] | None = None  # a SumUDF and an ApplyMasksUDF given tiles in one pass
        self.frames_left_out = False  # whether tiles() cut positions without a frame of the data

    def run(self, on_tile: TileProgress | None = None) -> PartitionResult:
        self.init_udfs()
        last_scheme_idx = len(self.params.tiling_scheme) - 1
        reported = 0
        for tile in self.tiles():
            self.run_tile(tile)
            if on_tile is not None and tile.scheme_idx == last_scheme_idx:
                on_tile(tile.tile_slice.shape[0])
                reported += tile.tile_slice.shape[0]
        if on_tile is not None and self.frames_left_out and reported < self.num_frames:
            on_tile(self.num_frames - reported)  # positions without a frame of the data (left out): done too
        return self.wrap_up()

    # -- phase 1 ------------------------------------------------------------------
    def init_udfs(self) -> None:
        task, params = self.task, self.params
        partition = task.partition
        part_slice = Slice((self.nav_origin,) + (0,) * len(self.sig_shape),
                           Shape((self.num_frames,) + self.sig_shape, sig_dims=len(self.sig_shape)))
        for i, template in enumerate(params.udfs):
            udf = template.copy_for_partition(partition.start, partition.stop, params.roi)
            udf.set_meta(UDFMeta(
                partition_slice=part_slice,
                dataset_shape=params.dataset_shape,
                roi=params.roi,
                dataset_dtype=params.dataset_dtype,
                input_dtype=params.input_dtype,
                tiling_scheme=params.tiling_scheme,
                corrections=params.corrections,
                device_class=self.env.device_class,
                threads_per_worker=self.env.threads,
                array_backend=self.backend_of[i],
                worker_cache=worker_cache_for(template),
            ))
            udf.set_backend(self.backend_of[i])
            # the partition's slice (ROI-compressed) until the first tile, as LiberTEM: get_task_data and
            # preprocess see the partition's meta.coordinates
            udf.meta.slice = part_slice
            with _udf_errors(udf, task, "get_result_buffers"):
                buffers = udf.get_result_buffers()
                for buf in buffers.values():
                    if buf.use != "result_only":
                        buf.allocate(self.num_frames, self.sig_shape, xp=udf.xp if buf.where == "device" else np)
                udf.results = UDFData(buffers)
            with _udf_errors(udf, task, "get_task_data"):
                udf.task_data = UDFData(udf.get_task_data())
            if udf.preprocess is not None:
                with _udf_errors(udf, task, "preprocess"):
                    udf.results.set_views(dict((k, b.data) for k, b in udf.results.buffers()))
                    udf.preprocess()
                    udf.results.clear_views()
            self.udfs.append(udf)
        self.methods = [udf.get_method() for udf in self.udfs]
        self.process = [udf.process_function() for udf in self.udfs]
        self.nav_names = [{n for n, b in udf.results.buffers() if b.kind == "nav"} for udf in self.udfs]
        if self.gpu is None:  # (see raytile.udf.fused_tiles)
            self.pair = fused_pair(self.udfs, self.methods, [self.backend_of[i] for i in range(len(self.udfs))])
        if self.gpu is not None:
            from raytile.udf.capture import TileGraphs, is_capturable

            for i, udf in enumerate(self.udfs):
                if self.methods[i] == "tile" and self.backend_of[i] == CUPY and is_capturable(udf):
                    self.graphs[i] = TileGraphs(udf, self.gpu.stream)

    def tiles(self) -> Iterator[DataTile]:
        """The partition's tiles, without the frames the data has none for (a ``sync_offset``, a nav
        shape larger than the data: :meth:`~raytile.io.dataset.partition.Partition.frames_with_data`)."""
        partition, roi = self.task.partition, self.params.roi
        tiles = partition.get_tiles(self.params.tiling_scheme, roi=roi, dest_dtype=self.params.input_dtype,
                                    array_backend=self.plan.ds_backend)
        lo, hi = partition.frames_with_data(roi)
        if (lo, hi) == (0, self.num_frames):
            return tiles
        self.frames_left_out = True
        return _within(tiles, self.nav_origin + lo, self.nav_origin + hi)

    # -- phase 2 ------------------------------------------------------------------
    def run_tile(self, tile: DataTile) -> None:
        params, task = self.params, self.task
        data = tile.data
        if params.corrections is not None:
            if isinstance(data, np.ndarray) and not data.flags.writeable:
                data = data.copy()  # a straight (read-only) view of a file map: correct a copy
            params.corrections.apply(data, tile.tile_slice)
        nav_start = tile.tile_slice.origin[0] - self.nav_origin
        count = tile.tile_slice.shape[0]
        sig_index = params.tiling_scheme[tile.scheme_idx].get()
        to_device = self.gpu.to_device if self.gpu is not None and self.gpu.stager is not None else None
        converter = TileConverter(data, shape=tile.tile_slice.shape.to_tuple(), to_device=to_device)
        done = self._run_pair(tile, converter, nav_start, count, sig_index) if self.pair is not None else ()
        for i in self.order:
            if i in done:
                continue
            udf, method = self.udfs[i], self.methods[i]
            udf.meta.tiling_scheme_idx = tile.scheme_idx
            try:
                tile_data = converter.get(self.backend_of[i])
            except Exception as e:
                raise BackendError(
                    f"converting a tile of {task.describe()} from {converter.source_backend} to "
                    f"{self.backend_of[i]} for {type(udf).__name__} failed: {type(e).__name__}: {e}"
                ) from e
            with _udf_errors(udf, task, f"process_{method}"):
                if method == "tile":
                    udf.meta.slice = tile.tile_slice
                    if i in self.graphs:
                        self.graphs[i].process(tile_data, tile.scheme_idx,
                                               _views(udf, nav_start, count, sig_index, None),
                                               self.nav_names[i], udf.results.set_views)
                    else:
                        _set_views(udf, nav_start, count, sig_index, None)
                        self.process[i](tile_data)
                elif method == "frame":
                    for f in range(count):
                        udf.meta.slice = Slice(
                            (tile.tile_slice.origin[0] + f,) + tile.tile_slice.origin[1:],
                            Shape((1,) + tile.tile_slice.shape.to_tuple()[1:], sig_dims=len(self.sig_shape)),
                        )
                        _set_views(udf, nav_start, count, sig_index, f)
                        self.process[i](tile_data[f])
                else:
                    udf.meta.slice = tile.tile_slice
                    _set_views(udf, nav_start, count, sig_index, None)
                    self.process[i](tile_data)
        if self.gpu is not None and self.gpu.stager is not None:
            self.gpu.stager.tile_done()

    def _run_pair(self, tile: DataTile, converter: TileConverter, nav_start: int, count: int,
                  sig_index: tuple) -> tuple[int, ...]:
        """The fused pair's UDFs given ``tile`` in one pass (:func:`~raytile.udf.fused_tiles.process_pair`):
        their indices if done, else () (the loop then calls them one by one)."""
        assert self.pair is not None
        i, j = self.pair
        for k in self.pair:
            udf = self.udfs[k]
            udf.meta.tiling_scheme_idx = tile.scheme_idx
            udf.meta.slice = tile.tile_slice
            _set_views(udf, nav_start, count, sig_index, None)
        tile_data = converter.get(self.backend_of[i])  # numpy for both (fused_pair)
        with _udf_errors(self.udfs[j], self.task, "process_tile"):
            return self.pair if process_pair(self.udfs[i], self.udfs[j], tile_data) else ()

    # -- phase 3 ------------------------------------------------------------------
    def wrap_up(self) -> PartitionResult:
        for udf in self.udfs:
            udf.results.clear_views()
            udf.params.clear_views()
            if udf.postprocess is not None:
                with _udf_errors(udf, self.task, "postprocess"):
                    udf.postprocess()
        if self.gpu is not None:
            self.gpu.stream.synchronize()
        out = [
            {name: _to_numpy(buf.data) for name, buf in udf.results.buffers() if buf.use != "result_only"}
            for udf in self.udfs
        ]
        result = PartitionResult(
            idx=self.task.idx, buffers=out, version=self.params.version, device_class=self.env.device_class,
            num_frames=self.num_frames, backends=self.backend_of,
        )
        if self.graphs:
            result.capture_stats = {i: dict(g.stats) for i, g in self.graphs.items()}
        return result


def _within(tiles: Iterator[DataTile], start: int, stop: int) -> Iterator[DataTile]:
    """``tiles`` cut to the nav positions ``[start, stop)`` (tiles outside left out)."""
    for tile in tiles:
        origin, count = tile.tile_slice.origin[0], tile.tile_slice.shape[0]
        a, b = max(start, origin), min(stop, origin + count)
        if a >= b:
            continue
        if (a, b) == (origin, origin + count):
            yield tile
            continue
        shape = (b - a,) + tuple(tile.tile_slice.shape)[1:]
        cut = Slice((a,) + tuple(tile.tile_slice.origin[1:]), Shape(shape, sig_dims=tile.tile_slice.shape.sig_dims))
        try:
            data = tile.data[a - origin:b - origin]
        except TypeError:  # a scipy.sparse coo_matrix cannot be sliced
            data = tile.data.tocsr()[a - origin:b - origin]
        yield DataTile(data, cut, tile.scheme_idx)


@contextmanager
def _udf_errors(udf: UDF, task: PartitionTask, method: str) -> Iterator[None]:
    """Turn what a UDF method raises into a UDFException naming the UDF, the method and the partition."""
    try:
        yield
    except UDFException:
        raise
    except ValueError as e:
        if "read-only" in str(e) and method.startswith("process_"):
            raise UDFException(
                f"{type(udf).__name__}.{method} tried to write to its input tile in "
                f"{task.describe()}; tiles are read-only (zero-copy), copy the tile first",
                worker_traceback="".join(traceback.format_exception(type(e), e, e.__traceback__)),
            ) from None
        raise udf_error(udf, method, e, f"while processing {task.describe()}") from None
    except Exception as e:
        raise udf_error(udf, method, e, f"while processing {task.describe()}") from None


def _to_numpy(arr):
    if isinstance(arr, np.ndarray):
        return arr
    if type(arr).__module__.startswith("cupy"):
        return to_numpy(arr)  # copied to the host
    return np.asarray(arr)
