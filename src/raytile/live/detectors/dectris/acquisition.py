"""``libertem_live.detectors.dectris.acquisition`` at its ported path: ``DectrisAcquisition``.

In raytile an acquisition is a stream data set (:class:`raytile.io.formats.stream.StreamDataSet`),
whatever its detector: ``LiveContext.make_acquisition(conn=...)`` returns one, and
``DectrisAcquisition`` names that class, for imports and type annotations. It is not built
directly (LiberTEM-live's is not either): use ``make_acquisition``.
"""

from raytile.io.formats.stream import StreamDataSet

__all__ = ["DectrisAcquisition"]

#: What ``LiveContext.make_acquisition`` returns for a Dectris connection.
DectrisAcquisition = StreamDataSet
