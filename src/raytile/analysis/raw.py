"""``libertem.analysis.raw`` at its ported path: :class:`PickFrameAnalysis`."""

from raytile.analysis.pick import PickFrameAnalysis

__all__ = ["PickFrameAnalysis"]
