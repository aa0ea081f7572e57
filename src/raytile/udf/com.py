"""`CoMUDF`: centre of mass of every frame inside a disk or ring."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from raytile.common.errors import UDFException
from raytile.udf._tiles import TILE_BACKENDS, dense, flat2d
from raytile.udf.base import UDF

__all__ = ["CoMUDF"]


class CoMUDF(UDF):
    """Centre of mass of every frame, optionally within a ring ``ri <= d <= r`` around ``(cy, cx)``.

    Create it with :meth:`with_params`. ``(cy, cx)`` defaults to the signal
    centre ``(sig_h / 2, sig_w / 2)``; ``r=inf`` and ``ri=0`` use the whole
    frame. Needs a 2D signal.

    Results (all nav):

    - ``raw_com`` ``(2,)``: ``(y, x)`` centre of mass in pixel coordinates,
      NaN for frames with zero intensity in the region;
    - ``raw_shifts`` ``(2,)``: ``raw_com - (cy, cx)``;
    - ``magnitude``: the length of ``raw_shifts``.

    Example::

        >>> udf = CoMUDF.with_params(cy=64, cx=64, r=30)
        >>> res = ctx.run_udf(dataset=ds, udf=udf)
        >>> res["raw_shifts"].data.shape  # nav + (2,)
    """

    def __init__(self, cy: float | None = None, cx: float | None = None, r: float = math.inf,
                 ri: float = 0.0, **kwargs: Any):
        super().__init__(cy=cy, cx=cx, r=r, ri=ri, **kwargs)

    @classmethod
    def with_params(cls, cy: float | None = None, cx: float | None = None, r: float = math.inf,
                    ri: float = 0.0, **kwargs: Any) -> "CoMUDF":
        """The CoM UDF for centre ``(cy, cx)`` (default: signal centre) and ring ``ri <= d <= r``."""
        return cls(cy=cy, cx=cx, r=r, ri=ri, **kwargs)

    def centre(self) -> tuple[float, float]:
        sig = self.meta.dataset_shape.sig.to_tuple()
        cy = sig[0] / 2 if self.params.cy is None else float(self.params.cy)
        cx = sig[1] / 2 if self.params.cx is None else float(self.params.cx)
        return cy, cx

    def get_backends(self) -> tuple[str, ...]:
        return TILE_BACKENDS

    def get_result_buffers(self):
        if len(self.meta.dataset_shape.sig) != 2:
            raise UDFException(
                f"{type(self).__name__} needs a 2D signal, got sig shape {self.meta.dataset_shape.sig.to_tuple()}"
            )
        return {
            # (intensity, y moment, x moment) per frame, merged like any nav buffer
            "moments": self.buffer(kind="nav", extra_shape=(3,), dtype="float64", where="device"),
            "raw_com": self.buffer(kind="nav", extra_shape=(2,), dtype="float64", use="result_only"),
            "raw_shifts": self.buffer(kind="nav", extra_shape=(2,), dtype="float64", use="result_only"),
            "magnitude": self.buffer(kind="nav", dtype="float64", use="result_only"),
        }

    def get_task_data(self) -> dict[str, Any]:
        sig = self.meta.dataset_shape.sig.to_tuple()
        cy, cx = self.centre()
        y, x = np.mgrid[: sig[0], : sig[1]].astype(np.float64)
        d = np.sqrt((y - cy) ** 2 + (x - cx) ** 2)
        region = ((d <= self.params.r) & (d >= self.params.ri)).astype(np.float64)
        # (pixels, 3): region, y * region, x * region
        weights = np.stack([region, y * region, x * region], axis=-1)
        return {"weights": weights}

    def process_tile(self, tile) -> None:
        w = self.task_data.weights[self.meta.sig_slice.get()].reshape(-1, 3)
        flat = flat2d(tile)
        if self.xp is not np:
            w = self.xp.asarray(w)
        res = flat @ w
        out = self.results.moments
        out += dense(res, out.shape, xp=self.xp)

    def get_results(self) -> dict[str, Any]:
        m = np.asarray(self.results.moments)
        cy, cx = self.centre()
        with np.errstate(invalid="ignore", divide="ignore"):
            com = m[:, 1:] / m[:, :1]
        com[m[:, 0] == 0] = np.nan
        shifts = com - np.array([cy, cx])
        return {
            "raw_com": com,
            "raw_shifts": shifts,
            "magnitude": np.sqrt((shifts ** 2).sum(axis=1)),
        }
