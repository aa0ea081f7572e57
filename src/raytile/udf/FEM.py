"""`FEMUDF`: fluctuation electron microscopy, the spread of every frame's intensity within a ring."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from raytile.common.errors import UDFException
from raytile.masks import _make_circular_mask
from raytile.udf.base import UDF
from raytile.udf.stddev import merge_moments

__all__ = ["FEMUDF", "fem_ring_mask", "run_fem"]


def fem_ring_mask(center: Sequence[float], rad_in: float, rad_out: float, sig_shape: Sequence[int]) -> np.ndarray:
    """The FEM ring as a bool mask: pixels with ``rad_in < distance <= rad_out`` from ``center``.

    ``center[0]`` is the row (y) and ``center[1]`` the column (x) of the
    centre, which is how LiberTEM's ``FEMUDF`` uses its ``center`` (its
    docstring calls it ``(x, y)``, its code offsets rows by ``center[0]``).

    >>> fem_ring_mask((2, 2), 0, 1, (5, 5)).sum()
    4
    """
    if len(sig_shape) != 2:
        raise UDFException(f"FEMUDF needs a 2D signal, got sig shape {tuple(sig_shape)}")
    h, w = int(sig_shape[0]), int(sig_shape[1])
    cy, cx = float(center[0]), float(center[1])
    outer = _make_circular_mask(cx, cy, w, h, rad_out)
    inner = _make_circular_mask(cx, cy, w, h, rad_in)
    return outer & ~inner


class FEMUDF(UDF):
    """Fluctuation EM (Gibson and Treacy 1997): per frame, the standard deviation of the pixels in a ring.

    Parameters, as LiberTEM's ``FEMUDF``: ``center`` (ring centre, ``(y, x)``
    in pixels: LiberTEM's docstring says ``(x, y)`` but its mask puts
    ``center[0]`` on the rows, and raytile does the same so results agree),
    ``rad_in`` and ``rad_out`` (the ring holds pixels with
    ``rad_in < distance <= rad_out``).

    Result: ``intensity`` (nav, float32): ``np.std`` (population standard
    deviation, ``ddof=0``) of each frame's ring pixels; its square is the
    variance. Frames may arrive in signal tiles: per frame, the count, sum and
    sum of squared deviations of each tile's ring pixels are combined in
    float64 (Chan et al.) in a worker-private buffer, so data with a large
    offset keeps its precision; ``postprocess`` turns them into ``intensity``.
    A ring without pixels gives NaN.

    Example::

        >>> fem = FEMUDF(center=(8, 8), rad_in=4, rad_out=6)
        >>> ctx.run_udf(dataset=ds, udf=fem)["intensity"].data.shape  # the nav shape
    """

    def __init__(self, center: Sequence[float], rad_in: float, rad_out: float):
        super().__init__(center=center, rad_in=rad_in, rad_out=rad_out)

    def get_preferred_input_dtype(self) -> np.dtype:
        return self.USE_NATIVE_DTYPE  # converted to float64 per tile

    def get_result_buffers(self):
        if len(self.meta.dataset_shape.sig) != 2:
            raise UDFException(
                f"{type(self).__name__} needs a 2D signal, got sig shape {self.meta.dataset_shape.sig.to_tuple()}"
            )
        return {
            # per frame: ring pixels seen, their sum, their sum of squared deviations
            # (lives on the worker only: a frame's signal tiles all arrive in its own partition)
            "moments": self.buffer(kind="nav", extra_shape=(3,), dtype="float64", use="private"),
            "intensity": self.buffer(kind="nav", dtype="float32"),
        }

    def get_task_data(self) -> dict[str, Any]:
        sig = self.meta.dataset_shape.sig.to_tuple()
        mask = fem_ring_mask(self.params.center, self.params.rad_in, self.params.rad_out, sig)
        return {"mask": mask}

    def process_tile(self, tile) -> None:
        mask = self.task_data.mask[self.meta.sig_slice.get()].reshape(-1)
        m = self.results.moments
        n_b = int(np.count_nonzero(mask))
        if n_b == 0 or tile.shape[0] == 0:
            return
        x = np.asarray(tile).reshape(tile.shape[0], -1)[:, mask].astype(np.float64)
        s_b = x.sum(axis=1)
        dev = x - (s_b / n_b)[:, None]
        m2_b = (dev * dev).sum(axis=1)
        n, s, m2 = merge_moments(m[:, 0], m[:, 1], m[:, 2], n_b, s_b, m2_b)
        m[:, 0] = n
        m[:, 1] = s
        m[:, 2] = m2

    def postprocess(self) -> None:
        # per partition, after all its tiles: every frame's ring is complete
        m = self.results.moments
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.where(m[:, 0] > 0, m[:, 2] / np.maximum(m[:, 0], 1.0), np.nan)
        self.results.intensity[:] = np.sqrt(np.maximum(var, 0.0))


def run_fem(ctx: Any, dataset: Any, center: Sequence[float], rad_in: float, rad_out: float,
            roi: np.ndarray | None = None) -> Any:
    """Run :class:`FEMUDF` on ``dataset`` (LiberTEM's ``run_fem``); ``result["intensity"].data`` is nav-shaped.

    >>> res = run_fem(ctx, ds, center=(8, 8), rad_in=4, rad_out=6)
    """
    return ctx.run_udf(dataset=dataset, udf=FEMUDF(center=center, rad_in=rad_in, rad_out=rad_out), roi=roi)
