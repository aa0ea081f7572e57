"""``libertem.analysis.ring`` at its ported path: :class:`RingMaskAnalysis`."""

from raytile.analysis.masks import RingMaskAnalysis

__all__ = ["RingMaskAnalysis"]
