"""``libertem.analysis.rawfft``: :class:`PickFFTFrameAnalysis`, the Fourier amplitude of one frame."""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.analysis.pick import PickFrameAnalysis
from raytile.analysis.results import AnalysisResultSet
from raytile.analysis.sumfft import real_space_mask

__all__ = ["PickFFTFrameAnalysis"]


class PickFFTFrameAnalysis(PickFrameAnalysis, id_="PICK_FFT_FRAME"):
    """The frame at ``(z, y, x)`` (as :class:`~raytile.analysis.pick.PickFrameAnalysis`), as
    ``|fftshift(fft2(frame * real_mask))|``: results ``intensity`` and ``intensity_lin``, sig-shaped
    float64. Optional ``real_rad``, ``real_centerx``, ``real_centery``: a disk masked out of the frame
    first. A complex frame is given as it is, as LiberTEM does."""

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        data = udf_results["intensity"].data[0]
        if data.dtype.kind == "c":
            return self.get_generic_results(data, damage=damage)
        mask = real_space_mask(self.parameters, data.shape)
        masked = data if mask is None else data * mask
        return self.get_generic_results(np.fft.fftshift(np.abs(np.fft.fft2(masked))), damage=damage)
