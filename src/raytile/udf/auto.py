"""`AutoUDF`: turn a function of one frame into a UDF with a nav-shaped result."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from raytile.common.errors import UDFException
from raytile.udf.base import UDF

__all__ = ["AutoUDF"]


class AutoUDF(UDF):
    """Apply ``f`` to every frame; ``result`` (nav, ``extra_shape`` of ``f``'s result).

    The shape and dtype of the result are found by calling ``f`` once on a
    frame of zeros (of ``input_dtype``, float32 by default; use
    ``UDF.USE_NATIVE_DTYPE`` for the data's own dtype), so ``f`` must accept
    that and return an array (or scalar) of the same shape for every frame.

    Example::

        >>> res = ctx.run_udf(dataset=ds, udf=AutoUDF(f=lambda frame: frame.max(axis=0)))
        >>> res["result"].data.shape  # nav + (sig_w,)
    """

    def __init__(self, f: Callable[[np.ndarray], Any], input_dtype: Any = "float32", monitor: bool = False):
        """``monitor=True`` adds LiberTEM's result-only ``monitor`` buffer: ``f``'s result for the last
        frame merged so far (for live plots)."""
        if not callable(f):
            raise UDFException(f"AutoUDF needs a callable f, got {f!r}")
        super().__init__(f=f, input_dtype=input_dtype, monitor=bool(monitor))

    def get_preferred_input_dtype(self):
        dt = self.params.input_dtype
        return self.USE_NATIVE_DTYPE if dt is self.USE_NATIVE_DTYPE else np.dtype(dt)

    def _probe(self) -> np.ndarray:
        sig = self.meta.dataset_shape.sig.to_tuple()
        zero = np.zeros(sig, dtype=self.meta.input_dtype)
        try:
            res = self.params.f(zero)
        except Exception as e:
            raise UDFException(
                f"AutoUDF: f raised {type(e).__name__} on a zero frame of shape {sig} "
                f"({self.meta.input_dtype}) used to find its result shape: {e}"
            ) from e
        return np.asarray(res)

    def get_result_buffers(self):
        probe = self._probe()
        buffers = {"result": self.buffer(kind="nav", extra_shape=probe.shape, dtype=probe.dtype)}
        if self.params.get("monitor", False):
            buffers["monitor"] = self.buffer(kind="single", extra_shape=probe.shape, dtype=probe.dtype,
                                             use="result_only")
        return buffers

    def get_results(self) -> dict[str, Any]:
        if not self.params.get("monitor", False):
            return {}
        merged = self.meta.get_valid_nav_mask()
        done = np.flatnonzero(merged) if merged is not None else np.zeros(0, dtype=np.int64)
        last = int(done[-1]) if done.size else 0  # nothing merged yet: the first (initial) value
        return {"monitor": np.asarray(self.results.result)[last]}

    def process_frame(self, frame) -> None:
        self.results.result[...] = np.asarray(self.params.f(frame))
