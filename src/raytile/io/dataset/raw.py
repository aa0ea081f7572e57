"""``libertem.io.dataset.raw`` at its ported path."""

from raytile.io.formats.raw import RawFileDataSet
from raytile.io.message_params import RAWDatasetParams

__all__ = ["RawFileDataSet", "RAWDatasetParams"]
