"""``libertem_live.detectors.merlin.acquisition`` at its ported path: ``MerlinAcquisition``, the stream
data set ``make_acquisition`` returns (:mod:`raytile.live.detectors.base.acquisition` says why)."""

from raytile.io.formats.stream import StreamDataSet

__all__ = ["MerlinAcquisition"]

MerlinAcquisition = StreamDataSet
