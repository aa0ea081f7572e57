"""``libertem_live.detectors.asi_tpx3.acquisition`` at its ported path: ``AsiTpx3Acquisition``, the stream
data set ``make_acquisition`` returns (:mod:`raytile.live.detectors.base.acquisition` says why)."""

from raytile.io.formats.stream import StreamDataSet

__all__ = ["AsiTpx3Acquisition"]

AsiTpx3Acquisition = StreamDataSet
