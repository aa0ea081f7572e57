"""``libertem.analysis.point`` at its ported path: :class:`PointMaskAnalysis`."""

from raytile.analysis.masks import PointMaskAnalysis

__all__ = ["PointMaskAnalysis"]
