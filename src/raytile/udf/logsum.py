"""`LogsumUDF`: sum over frames of the log of each background-subtracted frame."""

from __future__ import annotations

import numpy as np

from raytile.udf.base import UDF

__all__ = ["LogsumUDF"]


class LogsumUDF(UDF):
    """``logsum`` (sig): the sum over all frames of ``log(frame - frame.min() + 1)``.

    Useful as a contrast-rich overview of diffraction data whose intensity
    spans orders of magnitude. Each frame's minimum is its own, so the UDF
    works frame by frame (tiles are whole frames).

    Example::

        >>> res = ctx.run_udf(dataset=ds, udf=LogsumUDF())
        >>> res["logsum"].data.shape == ds.shape.sig.to_tuple()
        True
    """

    def __init__(self) -> None:
        super().__init__()  # no parameters: an unknown keyword is a TypeError, as in LiberTEM

    def get_backends(self) -> tuple[str, ...]:
        return (self.BACKEND_NUMPY, self.BACKEND_CUPY)

    def get_result_buffers(self):
        dtype = np.result_type(self.meta.input_dtype, np.float32)
        return {"logsum": self.buffer(kind="sig", dtype=dtype, where="device")}

    def process_frame(self, frame) -> None:
        xp = self.xp
        out = self.results.logsum
        out += xp.log(frame - frame.min() + 1).astype(out.dtype, copy=False)

    def merge(self, dest, src) -> None:
        dest.logsum[:] += src.logsum
