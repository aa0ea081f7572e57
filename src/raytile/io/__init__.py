"""Data sets, partitions, tiles and tiling negotiation. Never imports ray."""

from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import DataSet, DataSetMeta, Partition, dataset_from_json
from raytile.io.formats import get_format, register_format
from raytile.io.negotiator import Negotiator
from raytile.io.shape import Shape
from raytile.io.slice import Slice
from raytile.io.tiling import DataTile, TilingScheme

__all__ = [
    "DataSet", "DataSetMeta", "Partition", "DataTile", "TilingScheme", "Negotiator",
    "Shape", "Slice", "get_format", "register_format", "CorrectionSet", "dataset_from_json",
]
