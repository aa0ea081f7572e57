"""``libertem.io.dataset.hdf5`` at its ported path."""

from raytile.io.formats.hdf5 import H5DataSet

__all__ = ["H5DataSet"]
