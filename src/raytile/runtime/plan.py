"""Planning a run: check the inputs, pick the dtype, negotiate tiles, make the tasks."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

import numpy as np

from raytile.common.device_class import DeviceClass
from raytile.common.errors import BackendError, DataSetException, UDFException, udf_exception_class
from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import DataSet, FrameDelivery, validate_roi
from raytile.io.negotiator import Negotiator
from raytile.io.partition_source import StreamSpec
from raytile.runtime.execution_plan import (
    ExecutionPlan, check_backends, device_classes_for, execution_plan, plan_dtype,
)
from raytile.runtime.params import PartitionTask, RunParams
from raytile.udf.base import UDF, check_method
from raytile.udf.meta import UDFMeta

__all__ = ["RunPlan", "make_plan", "check_udfs", "input_dtype", "dataset_backends", "backend_plans"]


def input_dtype(udfs: Sequence[UDF], dataset_dtype: Any, corrections: CorrectionSet | None = None,
                backends: Iterable[str] = ()) -> np.dtype:
    """The dtype tiles are handed out in.

    ``np.result_type`` of the data set's dtype and every UDF's preference
    (float32 with corrections), widened until every array backend in
    ``backends`` (those of the execution plans) supports it
    (``sparseconverter.result_type``).
    """
    dtypes = [np.dtype(dataset_dtype)]
    for udf in udfs:
        dtypes.append(np.dtype(udf.get_preferred_input_dtype()))
    if corrections is not None and corrections.have_corrections():
        dtypes.append(np.dtype(np.float32))
    return plan_dtype(np.result_type(*dtypes), backends)


def dataset_backends(dataset: DataSet) -> tuple[str, ...]:
    """The array backends a data set's tiles come in, native one first (``DataSet.array_backends``)."""
    return check_backends(dataset.array_backends, f"{type(dataset).__name__}.array_backends")


def backend_plans(udfs: Sequence[UDF], dataset: DataSet, device_classes: Iterable[str],
                  backends: Iterable[str] | None = None) -> dict[str, ExecutionPlan]:
    """Execution plans per device class the executor has and the UDFs can use.

    Raises :class:`BackendError` before any task starts when no device class
    of the executor can serve every UDF. The key ``"cuda:nocupy"`` holds the
    plan for a GPU worker that cannot import cupy (absent if impossible).
    """
    possible = device_classes_for(udfs, backends)
    usable = possible & set(device_classes)
    if not usable:
        raise BackendError(
            f"no worker can run {[type(u).__name__ for u in udfs]}: with backends="
            f"{sorted(backends) if backends else 'any'} they need a {' or '.join(sorted(possible))} worker, "
            f"the executor has {sorted(device_classes)}"
        )
    ds_backends = dataset_backends(dataset)
    plans: dict[str, ExecutionPlan] = {}
    errors = []
    for dc in sorted(usable):
        try:
            plans[dc] = execution_plan(udfs, dc, ds_backends, backends)
        except BackendError as e:
            errors.append(str(e))
    if not plans:
        raise BackendError("; ".join(errors))
    if "cuda" in plans:
        try:
            plans["cuda:nocupy"] = execution_plan(udfs, DeviceClass.CUDA, ds_backends, backends, cupy=False)
        except BackendError:
            pass
    return plans


def check_udfs(udfs: Any) -> list[UDF]:
    if isinstance(udfs, (UDF, str, bytes)) or not hasattr(udfs, "__iter__"):
        udfs = [udfs]
    udfs = list(udfs)
    if not udfs:
        raise udf_exception_class(ValueError)("run_udf needs at least one UDF, got an empty list")
    for udf in udfs:
        if not isinstance(udf, UDF):
            raise UDFException(f"expected a raytile UDF instance, got {udf!r}")
        check_method(udf)  # a UDFException naming the class, before any task, if process_* is missing
    return udfs


@dataclass
class RunPlan:
    """A checked, negotiated run, ready for the coordinator.

    ``dataset`` is None in a plan sent to a coordinator elsewhere
    (:meth:`without_frames`): its workers got the frames when it was loaded.
    ``stream`` is what the data set's partition source declared
    (:meth:`DataSet.partition_source`): None for a fixed list, whose
    ``tasks`` are the run's; for a stream, ``tasks`` are one scan's
    partitions without frames, and the run's partitions arrive while it runs
    (see runtime/run_input.py).
    """

    dataset: DataSet | None
    udfs: list[UDF]
    params: RunParams
    tasks: list[PartitionTask]
    partition_offsets: dict[int, tuple[int, int]]
    total_partitions: int
    stream: StreamSpec | None = None

    def without_frames(self) -> "RunPlan":
        """This plan without the data set object and in-memory frames, to send to a coordinator in
        another process; the frames must have been shared with the workers already (keyed by
        ``PartitionTask.dataset_id``)."""
        tasks = [replace(t, partition=t.partition.without_frames())
                 if t.partition.frame_delivery is FrameDelivery.SHARED else t for t in self.tasks]
        return replace(self, dataset=None, tasks=tasks)

    def metas(self) -> list[UDFMeta]:
        """Metas for the coordinator's UDFs (merge and get_results)."""
        return [
            UDFMeta(None, self.params.dataset_shape, self.params.roi, self.params.dataset_dtype,
                    self.params.input_dtype, self.params.tiling_scheme, self.params.corrections)
            for _ in self.udfs
        ]


def _set_planning_meta(udfs: Sequence[UDF], dataset: DataSet, roi: np.ndarray | None, corrections: Any,
                       dtype: Any, device_class: str) -> None:
    """``self.meta`` for the calls made while planning (``get_backends``, ``get_tiling_preferences``,
    ``get_preferred_input_dtype``, ``get_result_buffers``), as on LiberTEM's main node: the data set's
    shape and dtype, the ROI, the input dtype as far as it is known, no partition yet."""
    for udf in udfs:
        udf.set_meta(UDFMeta(None, dataset.shape, roi, dataset.dtype, dtype, None, corrections,
                             device_class=device_class))


def make_plan(
    dataset: DataSet,
    udfs: Any,
    roi: Any = None,
    corrections: Any = None,
    backends: Iterable[str] | None = None,
    device_classes: Iterable[str] = ("cpu",),
) -> RunPlan:
    """Check preconditions and build the run's parameters and tasks."""
    if not isinstance(dataset, DataSet):
        raise DataSetException(f"expected a DataSet (from Context.load), got {type(dataset).__name__}")
    udfs = check_udfs(udfs)
    roi = validate_roi(roi, dataset.shape)
    if corrections is None:
        corrections = dataset.corrections
    if corrections is not None:
        if not isinstance(corrections, CorrectionSet):
            raise DataSetException(f"corrections must be a raytile.io.CorrectionSet, got {type(corrections).__name__}")
        corrections.check(dataset.shape)
        if not corrections.have_corrections():
            corrections = None
    device_classes = tuple(device_classes)
    planning_on = "cpu" if "cpu" in device_classes else (device_classes[0] if device_classes else "cpu")
    _set_planning_meta(udfs, dataset, roi, corrections, dataset.dtype, planning_on)
    backend_plan = backend_plans(udfs, dataset, device_classes, backends)
    all_backends = {b for p in backend_plan.values() for b in p.backends}
    dtype = input_dtype(udfs, dataset.dtype, corrections, all_backends)
    _set_planning_meta(udfs, dataset, roi, corrections, dtype, planning_on)
    usable = {dc for dc in backend_plan if ":" not in dc}
    device_class = DeviceClass.CPU if usable == {"cpu"} else (DeviceClass.CUDA if usable == {"cuda"} else DeviceClass.ANY)

    stream = dataset.partition_source().stream  # None: a fixed list of partitions
    partitions = dataset.get_partitions()
    if not partitions:
        raise DataSetException(f"{dataset!r} has no partitions")
    largest = max(partitions, key=lambda p: p.shape[0])
    max_frames = max(p.count_frames(roi) for p in partitions) if roi is not None else largest.shape[0]
    scheme = Negotiator().get_scheme(udfs, largest, dtype, roi=roi, max_partition_frames=max(1, max_frames))
    if corrections is not None:
        scheme = corrections.adjust_scheme(scheme, largest, roi)  # excluded pixels see all their neighbours

    tasks, offsets = [], {}
    for p in partitions:
        n = p.count_frames(roi)
        offsets[p.idx] = (p.roi_offset(roi), n)
        if n > 0:
            tasks.append(PartitionTask(p, p.idx, device_class, n, dataset_id=id(dataset)))
    params = RunParams(
        udfs=[u.copy_for_partition(0, dataset.shape.nav.size, None) for u in udfs],
        roi=roi, tiling_scheme=scheme, input_dtype=dtype,
        dataset_shape=dataset.shape, dataset_dtype=dataset.dtype, corrections=corrections,
        backend_plan=backend_plan, version=0, run_id=uuid.uuid4().hex,
    )
    return RunPlan(dataset, udfs, params, tasks, offsets, len(partitions), stream)
