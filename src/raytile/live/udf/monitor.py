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
    """The last frame of each tile stack, kept by the merge: the most recent frame."""

    def get_backends(self) -> Any:
        """Every backend but the scipy COO formats (no row indexing for ``tile[[-1]]``), as LiberTEM-live."""
        coo = {self.BACKEND_CUPY_SCIPY_COO, self.BACKEND_SCIPY_COO, getattr(self, "BACKEND_SCIPY_COO_ARRAY", None)}
        return [b for b in self.BACKEND_ALL if b not in coo]

    def get_result_buffers(self) -> dict:
        return {"intensity": self.buffer(kind="sig", dtype=self.meta.input_dtype, where="device")}

    def process_tile(self, tile: Any) -> None:
        self.results.intensity[:] = self.forbuf(tile[[-1]], self.results.intensity)

    def merge(self, dest: Any, src: Any) -> None:
        dest.intensity[:] = src.intensity


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
