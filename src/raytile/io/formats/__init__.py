"""Data set formats, found by name through :func:`get_format`."""

from __future__ import annotations

from typing import Type

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSet

__all__ = ["register_format", "get_format", "known_formats", "get_extensions"]

_FORMATS: dict[str, str] = {
    "memory": "raytile.io.formats.memory:MemoryDataSet",
    "raw": "raytile.io.formats.raw:RawFileDataSet",
    "npy": "raytile.io.formats.npy:NPYDataSet",
    "packed_raw": "raytile.io.formats.packed:PackedRawDataSet",
    "hdf5": "raytile.io.formats.hdf5:H5DataSet",
    "dectris": "raytile.io.formats.dectris:DectrisDataSet",
    "tiled": "raytile.io.formats.tiled:TiledDataSet",
    "sparse_memory": "raytile.io.formats.sparse:SparseMemoryDataSet",
    "npz_csr": "raytile.io.formats.sparse:NPZCSRDataSet",
    "k2is": "raytile.io.formats.k2is:K2ISDataSet",
    "frms6": "raytile.io.formats.frms6:FRMS6DataSet",
    "empad": "raytile.io.formats.empad:EMPADDataSet",
    "mrc": "raytile.io.formats.mrc:MRCDataSet",
    "blo": "raytile.io.formats.blo:BloDataSet",
    "dm": "raytile.io.formats.dm:DMDataSet",
    "mib": "raytile.io.formats.mib:MIBDataSet",
    "raw_csr": "raytile.io.formats.raw_csr:RawCSRDataSet",
    "auto": "raytile.io.formats.auto:AutoDataSet",
    "seq": "raytile.io.formats.seq:SEQDataSet",
    "ser": "raytile.io.formats.ser:SERDataSet",
    "tvips": "raytile.io.formats.tvips:TVIPSDataSet",
    "stream": "raytile.io.formats.stream:StreamDataSet",
    "zarr": "raytile.io.formats.zarr:ZarrDataSet",
}


def register_format(name: str, target: str) -> None:
    """Make ``Context.load(name, ...)`` create ``target`` ("module:Class").

    The class declares every constructor parameter in ``params_schema``
    (see :mod:`raytile.io.params`); others are rejected as unknown.
    """
    _FORMATS[name.lower()] = target


def get_format(name: str) -> Type[DataSet]:
    """The DataSet class registered under ``name`` (case-insensitive)."""
    import importlib

    target = _FORMATS.get(str(name).lower())
    if target is None:
        raise DataSetException(
            f"unknown data set format {name!r}; known formats: {', '.join(sorted(_FORMATS))}"
        )
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def known_formats() -> list[str]:
    return sorted(_FORMATS)


def get_extensions() -> set[str]:
    """The file extensions (lower case, no dot) of the registered formats' files, as LiberTEM's
    ``libertem.io.dataset.get_extensions()`` gives them (each format's ``file_extensions``); a format
    whose optional dependency is missing is left out."""
    exts: set[str] = set()
    for name in _FORMATS:
        try:
            cls = get_format(name)
        except ImportError:
            continue
        exts |= {e.lower() for e in cls.get_supported_extensions()}
    return exts
