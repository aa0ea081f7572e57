"""`CrystallinityUDF`: per frame, the Fourier amplitude integrated over a ring (a crystallinity map)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from raytile.common.errors import UDFException
from raytile.masks import _make_circular_mask
from raytile.udf.base import UDF

__all__ = ["CrystallinityUDF", "crystallinity_masks", "run_analysis_crystall"]


def crystallinity_masks(sig_shape: Sequence[int], rad_in: float, rad_out: float,
                        real_center: Sequence[float] | None = None,
                        real_rad: float | None = None) -> tuple[np.ndarray | None, np.ndarray]:
    """``(real_mask, half_fourier_mask)`` for :class:`CrystallinityUDF` on frames shaped ``sig_shape``.

    ``real_mask`` (float, or None when ``real_center`` or ``real_rad`` is
    None) is 0 inside the disk of radius ``real_rad`` around ``real_center``
    ``(y, x)`` and 1 elsewhere. ``half_fourier_mask`` selects, in the layout
    of ``np.fft.rfft2``'s output, the frequencies whose distance from zero
    frequency (in pixels of the centred spectrum) is in ``(rad_in, rad_out]``.

    >>> real, half = crystallinity_masks((8, 8), 1, 2)
    >>> real is None, half.shape
    (True, (8, 5))
    """
    if len(sig_shape) != 2:
        raise UDFException(f"CrystallinityUDF needs a 2D signal, got sig shape {tuple(sig_shape)}")
    h, w = int(sig_shape[0]), int(sig_shape[1])
    real_mask: np.ndarray | None = None
    if real_center is not None and real_rad is not None:
        disk = _make_circular_mask(float(real_center[1]), float(real_center[0]), w, h, real_rad)
        real_mask = (~disk).astype(np.float64)
    # the ring in the centred spectrum, then moved so that zero frequency is at [0, 0]
    outer = _make_circular_mask(w * 0.5, h * 0.5, w, h, rad_out)
    inner = _make_circular_mask(w * 0.5, h * 0.5, w, h, rad_in)
    ring = np.fft.fftshift((outer & ~inner).astype(np.float64))
    return real_mask, np.ascontiguousarray(ring[:, : w // 2 + 1])


class CrystallinityUDF(UDF):
    """Crystallinity by integrating each frame's Fourier amplitude over a ring (LiberTEM's ``CrystallinityUDF``).

    Parameters
    ----------
    rad_in, rad_out
        Inner and outer radius (pixels) of the ring in Fourier space,
        around zero frequency: ``rad_in < distance <= rad_out``.
    real_center
        ``(y, x)`` centre of a disk masked out of each frame before the
        transform (the zero-order peak); optional.
    real_rad
        Radius of that disk. If ``real_center`` or ``real_rad`` is None,
        nothing is masked out.

    Result: ``intensity`` (nav, float32):
    ``sum(abs(rfft2(frame * real_mask)) * half_fourier_mask)``, see
    :func:`crystallinity_masks`. Needs whole frames (``process_frame``).

    Example::

        >>> udf = CrystallinityUDF(rad_in=4, rad_out=6, real_center=(8, 8), real_rad=3)
        >>> ctx.run_udf(dataset=ds, udf=udf)["intensity"].data.shape  # the nav shape
    """

    def __init__(self, rad_in: float, rad_out: float, real_center: Sequence[float] | None = None,
                 real_rad: float | None = None):
        super().__init__(rad_in=rad_in, rad_out=rad_out, real_center=real_center, real_rad=real_rad)

    def get_result_buffers(self):
        if len(self.meta.dataset_shape.sig) != 2:
            raise UDFException(
                f"{type(self).__name__} needs a 2D signal, got sig shape {self.meta.dataset_shape.sig.to_tuple()}"
            )
        return {"intensity": self.buffer(kind="nav", dtype="float32")}

    def get_task_data(self) -> dict[str, Any]:
        real_mask, half = crystallinity_masks(
            self.meta.dataset_shape.sig.to_tuple(), self.params.rad_in, self.params.rad_out,
            self.params.real_center, self.params.real_rad,
        )
        return {"real_mask": real_mask, "half_fourier_mask": half}

    def process_frame(self, frame) -> None:
        real_mask = self.task_data.real_mask
        masked = frame if real_mask is None else frame * real_mask
        spectrum = np.abs(np.fft.rfft2(masked))
        self.results.intensity[:] = np.sum(spectrum * self.task_data.half_fourier_mask)


def run_analysis_crystall(ctx: Any, dataset: Any, rad_in: float, rad_out: float,
                          real_center: Sequence[float] | None = None, real_rad: float | None = None,
                          roi: np.ndarray | None = None, progress: bool = False) -> Any:
    """Run :class:`CrystallinityUDF` on ``dataset`` (LiberTEM's ``run_analysis_crystall``).

    >>> res = run_analysis_crystall(ctx, ds, rad_in=4, rad_out=6)
    >>> res["intensity"].data.shape  # the nav shape
    """
    udf = CrystallinityUDF(rad_in=rad_in, rad_out=rad_out, real_center=real_center, real_rad=real_rad)
    return ctx.run_udf(dataset=dataset, udf=udf, roi=roi, progress=progress)
