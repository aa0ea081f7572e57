"""Data sets, partitions, tiles and tiling negotiation. Never imports ray."""

from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import DataSet, DataSetMeta, Partition, dataset_from_json
from raytile.io.formats import get_format, register_format
from raytile.io.negotiator import Negotiator

__all__ = [
    "DataSet", "DataSetMeta", "Partition", "Negotiator", "get_format", "register_format", "CorrectionSet",
    "dataset_from_json",
]
