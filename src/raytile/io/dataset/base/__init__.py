"""``libertem.io.dataset.base`` at its ported path: the data set base classes and IO backends."""

from raytile.common.errors import DataSetException
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io.backends import BufferedBackend, DirectBackend, IOBackend, MMapBackend
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.dataset.roi import roi_nav_indices as _roi_to_nd_indices
from raytile.io.negotiator import Negotiator

__all__ = [
    "DataSetException", "DataTile", "TilingScheme", "IOBackend", "MMapBackend", "BufferedBackend",
    "DirectBackend", "DataSet", "DataSetMeta", "Partition", "Negotiator", "_roi_to_nd_indices",
]
