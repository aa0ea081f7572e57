"""``libertem_live.udf.monitor`` at its ported path: beam monitors for live runs.

:class:`SignalMonitorUDF` shows the frame processed last (a beam monitor; for a given frame
of a file use :class:`~raytile.udf.raw.PickUDF`), :class:`PartitionMonitorUDF` the sum of the
partition merged last (for frames too dim alone). Both results depend on the merge order: on a
partial result of ``run_udf_iter`` they show what just arrived.

>>> for part in ctx.run_udf_iter(dataset=aq, udf=SignalMonitorUDF()):   # doctest: +SKIP
...     show(part.buffers[0]["intensity"].data)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.udf.base import UDF

__all__ = ["SignalMonitorUDF", "PartitionMonitorUDF"]


class SignalMonitorUDF(UDF):
    """The last frame of the data: per tile its last frame, kept by the merge when it comes later in the scan.

    LiberTEM-live's keeps the last frame of whichever partition is merged last, so on a parallel
    executor its result depends on the merge order; raytile's carries each kept frame's position
    (a private buffer, not in the results) and keeps the later one, so the result is the last frame
    processed in scan order, inline and on Ray alike, and on a partial result the latest frame so far.
    """

    def get_backends(self) -> Any:
        """Every backend but the scipy COO formats (no row indexing for ``tile[[-1]]``), as LiberTEM-live."""
        coo = {self.BACKEND_CUPY_SCIPY_COO, self.BACKEND_SCIPY_COO, getattr(self, "BACKEND_SCIPY_COO_ARRAY", None)}
        return [b for b in self.BACKEND_ALL if b not in coo]

    def get_result_buffers(self) -> dict:
        return {
            "intensity": self.buffer(kind="sig", dtype=self.meta.input_dtype, where="device"),
            # 1 + the flat position of the frame in intensity (0: none yet)
            "position": self.buffer(kind="single", dtype="int64", use="private"),
        }

    def process_tile(self, tile: Any) -> None:
        tile_slice = self.meta.slice
        assert tile_slice is not None  # set for every tile
        last = int(tile_slice.origin[0]) + int(tile.shape[0])
        if last >= int(self.results.position[0]):
            self.results.intensity[:] = self.forbuf(tile[[-1]], self.results.intensity)
            self.results.position[:] = last

    def merge(self, dest: Any, src: Any) -> None:
        if int(src.position[0]) >= int(dest.position[0]):
            dest.intensity[:] = src.intensity
            dest.position[:] = src.position


class PartitionMonitorUDF(UDF):
    """The sum of a partition's frames; the merge keeps the partition merged last.

    ``dtype`` (default float32): the computation's dtype, with the data's by ``numpy.result_type``.
    """

    def __init__(self, dtype: Any = "float32"):
        super().__init__(dtype=dtype)

    def get_preferred_input_dtype(self) -> Any:
        return self.params.dtype

    def get_backends(self) -> Any:
        return self.BACKEND_ALL

    def get_result_buffers(self) -> dict:
        return {"intensity": self.buffer(kind="sig", dtype=self.meta.input_dtype, where="device")}

    def process_tile(self, tile: Any) -> None:
        self.results.intensity[:] += self.forbuf(np.sum(tile, axis=0), self.results.intensity)

    def merge(self, dest: Any, src: Any) -> None:
        dest.intensity[:] = src.intensity
