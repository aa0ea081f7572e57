"""``libertem_live.detectors.merlin.acquisition`` at its ported path: ``MerlinAcquisition``.

In raytile an acquisition is a stream data set (:class:`raytile.io.formats.stream.StreamDataSet`),
whatever its detector: ``LiveContext.make_acquisition(conn=...)`` returns one, and
``MerlinAcquisition`` names that class, for imports and type annotations. It is not built
directly (LiberTEM-live's is not either): use ``make_acquisition``.
"""

from raytile.io.formats.stream import StreamDataSet

__all__ = ["MerlinAcquisition"]

#: What ``LiveContext.make_acquisition`` returns for a Merlin connection.
MerlinAcquisition = StreamDataSet
