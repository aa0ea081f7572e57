"""What travels to a worker: the run's parameters (once) and one task per partition."""

from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import Partition
from raytile.runtime.execution_plan import ExecutionPlan
from raytile.common.shape import Shape
from raytile.common.device_class import DeviceClass
from raytile.common.tiling import TilingScheme
from raytile.udf.base import UDF

__all__ = ["RunParams", "PartitionTask", "PartitionResult"]


@dataclass
class RunParams:
    """Everything every task of a run shares; put into the object store once per version.

    ``udfs`` are the UDF instances with the parameters of this ``version``;
    ``backend_plan`` holds the execution plan (which UDF consumes tiles in
    which array backend) per device class.
    """

    udfs: list[UDF]
    roi: np.ndarray | None
    tiling_scheme: TilingScheme
    input_dtype: np.dtype
    dataset_shape: Shape
    dataset_dtype: np.dtype
    corrections: CorrectionSet | None = None
    backend_plan: dict[str, ExecutionPlan] = field(default_factory=dict)
    version: int = 0
    run_id: str = ""
    trace_context: dict | None = None
    #: Workers merge the partitions they ran and send the merged state at most this often (seconds);
    #: None: every partition's result goes to the coordinator (see runtime/segments.py).
    merge_interval_s: float | None = None


@dataclass
class PartitionTask:
    """One partition to process. ``device_class`` is what the task needs (see common/device_class.py).

    ``dataset_id`` is the ``id`` of the :class:`DataSet` the run reads (the
    run's plan keeps it alive): executors share a data set's in-memory frames
    per data set, not per array address.
    """

    partition: Partition
    idx: int
    device_class: DeviceClass = DeviceClass.CPU
    num_frames: int = 0
    dataset_id: int = 0
    #: A stream partition's frames as the executor shares them (an ndarray inline, an object ref on Ray);
    #: None for partitions that read their own frames or were shared when loaded.
    frames: object = None

    def describe(self) -> str:
        return self.partition.describe()


@dataclass
class PartitionResult:
    """A partition's result buffers, one dict per UDF, plus where/how it ran."""

    idx: int
    buffers: list[dict[str, np.ndarray]]
    version: int
    worker: str = ""
    device_class: DeviceClass = DeviceClass.CPU
    num_frames: int = 0
    backends: dict[int, str] = field(default_factory=dict)
    #: The partitions merged into this result on the worker (see runtime/segments.py); empty: just ``idx``.
    covers: list[int] = field(default_factory=list)
    #: The ROI-compressed nav range its nav buffers cover, if it covers several partitions.
    nav_range: tuple[int, int] | None = None
    #: CUDA graph counters by UDF index (warmup/captured/replayed/failed; GPU tasks only, see udf/capture.py).
    capture_stats: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """The size of its result buffers."""
        return sum(np.asarray(a).nbytes for bufs in self.buffers for a in bufs.values())

    @property
    def partitions(self) -> list[int]:
        """The partitions this result holds."""
        return self.covers or [self.idx]
