"""`SumSigUDF`: the sum over the signal of each frame (a nav-shaped result)."""

from __future__ import annotations

import numpy as np

from raytile.udf.base import UDF


class SumSigUDF(UDF):
    """Integrated intensity of every frame: ``intensity`` has the nav shape."""

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
        return {"intensity": self.buffer(kind="nav", dtype=dtype, where="device")}

    def process_tile(self, tile):
        flat = tile.reshape((tile.shape[0], -1))
        sums = flat.sum(axis=1)
        self.results.intensity[:] += self.forbuf(self.xp.asarray(sums).reshape(-1), self.results.intensity)
