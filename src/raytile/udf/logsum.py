"""`LogsumUDF`: sum over frames of the log of each background-subtracted frame."""

from __future__ import annotations

import numpy as np

from raytile.udf.base import UDF
from raytile.udf.integer_tiles import is_integer_tile, log_frames_into

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

    def get_preferred_input_dtype(self) -> np.dtype:
        # the data as it is: 8- and 16-bit frames take their logs from a table (no float copy, no log
        # computed); others are converted to the result's dtype frame by frame
        return self.USE_NATIVE_DTYPE

    def get_result_buffers(self):
        dtype = np.result_type(self.meta.input_dtype, np.float32)
        return {"logsum": self.buffer(kind="sig", dtype=dtype, where="device")}

    def process_frame(self, frame) -> None:
        xp = self.xp
        out = self.results.logsum
        flat = frame.reshape((1, -1))
        if is_integer_tile(flat, out.dtype) and out.flags.c_contiguous:
            # measured 1.7x less time a frame than the float32 log below, 256x256 uint16
            log_frames_into(flat, out.reshape(-1))
            return
        values = frame.astype(out.dtype, copy=False)  # (+ 1 would overflow integers at their maximum)
        out += xp.log(values - values.min() + 1)

    def merge(self, dest, src) -> None:
        dest.logsum[:] += src.logsum
