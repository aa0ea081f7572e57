"""``libertem_live.detectors.dectris.acquisition`` at its ported path: ``DectrisAcquisition``, the stream
data set ``make_acquisition`` returns (:mod:`raytile.live.detectors.base.acquisition` says why)."""

from raytile.io.formats.stream import StreamDataSet

__all__ = ["DectrisAcquisition"]

DectrisAcquisition = StreamDataSet
