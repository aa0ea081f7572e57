"""``libertem.analysis.sumfft``: :class:`SumfftAnalysis`, the sum of all frames pictured as its Fourier
amplitude."""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.analysis.results import AnalysisResult, AnalysisResultSet
from raytile.analysis.sum import SumAnalysis
from raytile.masks import _make_circular_mask

__all__ = ["SumfftAnalysis", "real_space_mask"]


def real_space_mask(parameters: dict, sig_shape: tuple[int, ...]) -> np.ndarray | None:
    """1 outside, 0 inside the disk of radius ``real_rad`` around ``(real_centery, real_centerx)``, as int;
    None when a parameter is missing (nothing is masked). Removes the zero-order peak before an FFT.

    >>> real_space_mask({"real_rad": 1, "real_centerx": 1, "real_centery": 1}, (3, 3)).sum()
    np.int64(4)
    """
    rad, cy, cx = (parameters.get(k) for k in ("real_rad", "real_centery", "real_centerx"))
    if rad is None or cy is None or cx is None:
        return None
    return 1 - 1 * _make_circular_mask(cx, cy, sig_shape[1], sig_shape[0], rad)


class SumfftAnalysis(SumAnalysis, id_="FFTSUM_FRAMES"):
    """Sums the frames (as :class:`~raytile.analysis.sum.SumAnalysis`); result ``intensity`` holds the sum,
    its picture is ``log(|fftshift(fft2(sum * real_mask))| + 1)``, as LiberTEM's. Optional parameters
    ``real_rad``, ``real_centerx``, ``real_centery``: a disk masked out of the sum before the FFT."""

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        from raytile.viz.images import visualize_simple

        data = np.array(udf_results["intensity"].data)
        mask = real_space_mask(self.parameters, data.shape)
        masked = data if mask is None else data * mask
        fft = np.log(np.abs(np.fft.fftshift(np.fft.fft2(masked))) + 1)
        return AnalysisResultSet([
            AnalysisResult(data, lambda: visualize_simple(fft, damage=True), key="intensity", title="intensity",
                           desc="fft of sum of all frames"),
        ])
