"""`SignalMaxUDF`: the per-pixel maximum over all frames (a sig-shaped result)."""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.udf._tiles import TILE_BACKENDS, dense, flat2d
from raytile.udf.base import UDF

__all__ = ["SignalMaxUDF", "lowest_value"]


def lowest_value(dtype: Any) -> Any:
    """The neutral element of ``max`` for ``dtype``: ``-inf``, the integer minimum or ``False``.

    >>> lowest_value("uint16"), lowest_value("int8"), lowest_value("float32")
    (0, -128, -inf)
    """
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return False
    if dt.kind in "iu":
        return int(np.iinfo(dt).min)
    if dt.kind == "f":
        return -np.inf
    if dt.kind == "c":
        raise TypeError(f"SignalMaxUDF: complex data ({dt}) has no order; take abs() first")
    raise TypeError(f"SignalMaxUDF: no maximum for dtype {dt}")


class SignalMaxUDF(UDF):
    """Maximum of every signal pixel over all frames (in the ROI): ``intensity`` has the signal shape.

    The result keeps the data's own dtype (no conversion is asked for). Each
    partition starts from the dtype's lowest value (``-inf`` for floats), set
    in ``preprocess``, and partitions are combined with ``np.maximum``; NaN
    in float data propagates like ``np.max``. Works on dense (numpy, cupy)
    and sparse tiles (implicit zeros count as values).

    Example::

        >>> res = ctx.run_udf(dataset=ds, udf=SignalMaxUDF())
        >>> np.array_equal(res["intensity"].data, data.reshape(-1, *sig).max(axis=0))
        True
    """

    def __init__(self) -> None:
        super().__init__()

    def get_preferred_input_dtype(self) -> np.dtype:
        return self.USE_NATIVE_DTYPE

    def get_backends(self) -> tuple[str, ...]:
        return TILE_BACKENDS

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="sig", dtype=self.meta.input_dtype, where="device")}

    def preprocess(self) -> None:
        # runs on the main node (merged result) and per partition: start from max's neutral element
        self.results.intensity[...] = lowest_value(self.results.intensity.dtype)

    def process_tile(self, tile) -> None:
        out = self.results.intensity
        flat = flat2d(tile)
        if flat.shape[0] == 0:
            return
        tile_max = dense(flat.max(axis=0), out.shape, xp=self.xp).astype(out.dtype, copy=False)
        self.xp.maximum(out, tile_max, out=out)

    def merge(self, dest, src) -> None:
        dest.intensity[:] = np.maximum(dest.intensity, src.intensity)
