"""``libertem.analysis.disk`` at its ported path: :class:`DiskMaskAnalysis`."""

from raytile.analysis.masks import DiskMaskAnalysis

__all__ = ["DiskMaskAnalysis"]
