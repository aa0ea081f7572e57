"""``libertem.io.dataset.raw`` at its ported path."""

from raytile.io.formats.raw import RawFileDataSet

__all__ = ["RawFileDataSet"]
