"""`IntensitySumUDF`: what :class:`~raytile.udf.sum.SumUDF` and :class:`~raytile.udf.sumsig.SumSigUDF` share.

Both read tiles in the data set's own dtype (no converted copy of each
tile), accumulate one ``intensity`` buffer in ``np.result_type(input dtype,
dtype)`` on the device, and take every backend a plain sum works on. They
differ in the axis they sum over, so in the kind of their buffer and in
``process_tile``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.udf._tiles import SUM_BACKENDS
from raytile.udf.base import UDF

__all__ = ["IntensitySumUDF"]

#: Float dtypes that the sums' fast paths accumulate into (BLAS, integer tiles summed as they are read).
FLOAT_SUMS = (np.dtype(np.float32), np.dtype(np.float64))


class IntensitySumUDF(UDF):
    """An ``intensity`` sum of kind :attr:`result_kind` over tiles read in their native dtype.

    ``dtype`` is the accumulation dtype, combined with the data's dtype by
    ``np.result_type`` (int32 data with float32 sums in float64).
    """

    #: ``"sig"`` (a sum over frames) or ``"nav"`` (a sum over each frame's signal).
    result_kind: str = "sig"

    def __init__(self, dtype: Any = "float32"):
        super().__init__(dtype=dtype)

    def get_preferred_input_dtype(self) -> np.dtype:
        # Read the data as it is and accumulate in ``dtype``: no converted copy of each tile.
        return self.USE_NATIVE_DTYPE

    def get_backends(self) -> tuple[str, ...]:
        return SUM_BACKENDS

    def get_result_buffers(self):
        dtype = np.result_type(self.meta.input_dtype, self.params.dtype)
        return {"intensity": self.buffer(kind=self.result_kind, dtype=dtype, where="device")}
