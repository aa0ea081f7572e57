"""`SumUDF`: the sum of all frames (a sig-shaped result)."""

from __future__ import annotations

import numpy as np

from raytile.udf.base import UDF


class SumUDF(UDF):
    """Sum over all frames: ``intensity`` has the signal shape.

    ``dtype`` is the accumulation dtype; it is combined with the data's dtype
    by ``np.result_type`` (int32 data with float32 sums in float64).
    """

    def __init__(self, dtype="float32", **kwargs):
        super().__init__(dtype=dtype, **kwargs)

    def get_preferred_input_dtype(self):
        return self.params.dtype

    def get_backends(self):
        return (self.BACKEND_NUMPY, self.BACKEND_SPARSE_COO, self.BACKEND_SPARSE_GCXS,
                self.BACKEND_SCIPY_CSR, self.BACKEND_SCIPY_CSC, self.BACKEND_CUPY,
                self.BACKEND_CUPY_SCIPY_CSR, self.BACKEND_CUPY_SCIPY_CSC)

    def get_result_buffers(self):
        dtype = np.result_type(self.meta.input_dtype, self.params.dtype)
        return {"intensity": self.buffer(kind="sig", dtype=dtype, where="device")}

    def process_tile(self, tile):
        self.results.intensity[:] += self.forbuf(tile.sum(axis=0), self.results.intensity)

    def merge(self, dest, src):
        dest.intensity[:] += src.intensity
