"""IO backends: how a file partition's tiles get from disk into memory.

``mmap``
    Memory-maps the files. Whole frames of a numpy dtype at a fixed stride
    (raw, also with frame headers; npy; contiguous HDF5) read "straight"
    (tiles are views of the map, no copy) when there is no ROI and no dtype
    conversion, and through numpy copies otherwise; other file sets (packed,
    tiled, chunked) decode read ranges from the map (numba).
``buffered``
    ``os.preadv`` of each nav block's frames (as for mmap) or coalesced
    read ranges into one of two reused, page-aligned buffers, then tiles;
    no mmap, friendly to network file systems.
``direct``
    Like ``buffered`` with ``O_DIRECT`` on Linux (aligned offsets, lengths and
    buffer): bypasses the page cache, for data sets larger than RAM. Falls back
    to ``buffered`` reads where the file system refuses ``O_DIRECT``.

:func:`choose_backend` picks ``mmap`` by default and ``direct`` (on Linux)
when the data set is larger than 3/4 of physical memory; the ``io_backend=``
parameter of file formats overrides.
"""

from __future__ import annotations

import os
import sys

from raytile.common.errors import DataSetException
from raytile.io.backends.base import FrameFile, FramesJob, IOBackend, RangesJob, ReadJob
from raytile.io.backends.buffered import BufferedBackend, DirectBackend
from raytile.io.backends.mmap import MMapBackend

BACKENDS = {"mmap": MMapBackend, "buffered": BufferedBackend, "direct": DirectBackend}
for _id, _cls in BACKENDS.items():  # LiberTEM's registry of backend ids
    IOBackend.registry.setdefault(_id, _cls)
    _cls.id_ = _id


def backend_name(requested: "str | IOBackend") -> str:
    """A backend's name from its name or from a backend object (LiberTEM's ``io_backend=MMapBackend()``)."""
    if isinstance(requested, IOBackend):
        return requested.name or str(requested.id_)
    return str(requested).lower()


def is_own_backend(backend: IOBackend) -> bool:
    """Whether ``backend`` is one of raytile's own (``mmap``, ``buffered``, ``direct``), not a user's subclass."""
    return type(backend) in BACKENDS.values()


def get_backend(name: "str | IOBackend") -> IOBackend:
    """The backend that reads a partition: a fresh one of ``name``'s class; a user's backend object
    (another :class:`IOBackend` subclass, implementing its ``_blocks``/``_frame_blocks``) as it is."""
    if isinstance(name, IOBackend) and not is_own_backend(name):
        return name
    cls = BACKENDS.get(backend_name(name))
    if cls is None:
        raise DataSetException(f"unknown io_backend {name!r}; choose one of {sorted(BACKENDS)}")
    return cls()


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def choose_backend(nbytes: int, requested: "str | IOBackend | None" = None) -> "str | IOBackend":
    """The backend name for a data set of ``nbytes`` (``requested``, a name or backend object, wins if given;
    a user's backend object is kept as it is)."""
    if isinstance(requested, IOBackend) and not is_own_backend(requested):
        return requested
    if requested is not None:
        name = backend_name(requested)
        if name not in BACKENDS:
            raise DataSetException(f"unknown io_backend {requested!r}; choose one of {sorted(BACKENDS)}")
        return name
    mem = physical_memory()
    if sys.platform.startswith("linux") and mem is not None and nbytes > 0.75 * mem:
        return "direct"
    return "mmap"


__all__ = ["FrameFile", "FramesJob", "IOBackend", "RangesJob", "ReadJob", "MMapBackend", "BufferedBackend", "DirectBackend", "BACKENDS",
           "get_backend", "choose_backend", "backend_name", "is_own_backend"]
