"""A DECTRIS master file: its linked data sets in image order, frame shape, filters and detector metadata.

The layout (DECTRIS FileWriter, NeXus): ``/entry/data/data_000001``, ...
are external links to ``<name>_data_NNNNNN.h5:/entry/data/data``, each an
``(images, height, width)`` data set with ``image_nr_low``/``image_nr_high``
attributes; ``/entry/instrument/detector/detectorSpecific`` holds
``nimages``, ``ntrigger`` and ``pixel_mask``. :func:`read_master` reads it
and looks at every linked data set, so that a missing or unreadable file
fails at ``ctx.load`` with a :class:`~raytile.common.errors.DataSetException`
naming it.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io import bslz4
from raytile.io.formats.hdf5 import H5_REMOTE_BLOCK, h5py_with_filters
from raytile.io.store import ObjectStore, check_path_file, display_url, open_path

__all__ = ["LinkedFile", "MasterInfo", "read_master", "is_master", "open_h5", "HDF5_MAGIC"]

#: The first 8 bytes of an HDF5 file (at offset 0, 512, 1024, ... after a user block).
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
DETECTOR_SPECIFIC = "/entry/instrument/detector/detectorSpecific"
_LINK_NAME = re.compile(r"^data_(\d+)$")
_FILTER_BSLZ4, _FILTER_LZ4 = 32008, 32004

@dataclass(frozen=True)
class LinkedFile:
    """One data set of the series: ``ds_path`` in ``path``, holding images ``start .. start + frames - 1``."""

    path: str
    ds_path: str
    start: int
    frames: int


@dataclass(frozen=True)
class MasterInfo:
    """What the master file says: data sets in image order, frame shape and dtype, detector metadata."""

    files: tuple[LinkedFile, ...]
    frame_shape: tuple[int, ...]
    dtype: np.dtype
    codec: int | None  # a bslz4 codec, or None: only HDF5's filter pipeline reads it
    filters: str
    nimages: int | None
    ntrigger: int | None
    pixel_mask: np.ndarray | None


def _scalar(group, name: str) -> int | None:
    try:
        value = group[name][()]
    except (KeyError, TypeError, ValueError, OSError):
        return None
    try:
        return int(np.asarray(value).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return None


def _codec(path: str, ds) -> tuple[int | None, str]:
    """The :mod:`~raytile.io.bslz4` codec that decodes ``ds``'s chunks, or None; and the filters by name."""
    h5py = h5py_with_filters()
    plist = ds.id.get_create_plist()
    filters = [plist.get_filter(i) for i in range(plist.get_nfilters())]
    names = ", ".join(f"{f[0]}{tuple(f[2])}" for f in filters) or "none"
    chunks = ds.chunks
    whole_frames = chunks is not None and chunks[0] == 1 and tuple(chunks[1:]) == tuple(ds.shape[1:])
    if not filters:
        layout = plist.get_layout()
        if layout == h5py.h5d.CONTIGUOUS and not plist.get_external_count():
            return bslz4.CODEC_RAW, names
        return (bslz4.CODEC_RAW if whole_frames else None), names
    if len(filters) != 1 or not whole_frames:
        return None, names
    fid, _flags, values, _name = filters[0]
    if fid == _FILTER_BSLZ4 and len(values) >= 5 and values[4] == 2:
        if len(values) > 2 and values[2] not in (0, ds.dtype.itemsize):
            raise DataSetException(f"{path}:{ds.name}: bitshuffle element size {values[2]} does not match "
                                   f"the dtype {ds.dtype}")
        return bslz4.CODEC_BSLZ4, names
    if fid == _FILTER_LZ4:
        return bslz4.CODEC_LZ4, names
    return None, names


def _linked_datasets(master: str, f, remote: bool = False) -> list[tuple[int, str, str]]:
    """``(link number, file, dataset path)`` of every ``/entry/data/data_NNNNNN``, files resolved (next to
    the master: a URL under the same prefix when ``remote``)."""
    h5py = h5py_with_filters()
    try:
        group = f["/entry/data"]
    except KeyError:
        raise DataSetException(f"{master}: not a DECTRIS master file: it has no /entry/data group") from None
    out = []
    for name in group:
        m = _LINK_NAME.match(name)
        if m is None:
            continue
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            target = link.filename
            if remote:
                target = master.rsplit("/", 1)[0] + "/" + os.path.basename(target)
            elif not os.path.isabs(target):
                target = os.path.join(os.path.dirname(os.path.abspath(master)), target)
            out.append((int(m.group(1)), target, link.path))
        else:
            out.append((int(m.group(1)), master if remote else os.path.abspath(master), f"/entry/data/{name}"))
    if not out:
        raise DataSetException(f"{master}: not a DECTRIS master file: /entry/data has no data_NNNNNN links")
    return sorted(out)


def open_h5(path: str, what: str, store: ObjectStore | None = None):
    """``h5py.File(path)`` (through a ranged file object for a URL of ``store``), or DataSetException
    ``what``: cannot open as HDF5 (naming the file)."""
    h5py = h5py_with_filters()
    try:
        if store is not None:
            return h5py.File(store.open(path, block_size=H5_REMOTE_BLOCK), "r")
        return h5py.File(path, "r")
    except OSError as e:
        raise DataSetException(f"{what}: cannot open as HDF5: {e}") from None


def read_master(path: str, store: ObjectStore | None = None) -> MasterInfo:
    """Read a master file and look at every linked data set (DataSetException naming what is wrong); with
    ``store``, ``path`` is a URL and the data files are objects under the same prefix."""
    h5py = h5py_with_filters()
    check_path_file(path, store)
    with open_h5(path, path, store) as f:
        links = _linked_datasets(path, f, store is not None)
        spec = f.get(DETECTOR_SPECIFIC)
        nimages = _scalar(spec, "nimages") if spec is not None else None
        ntrigger = _scalar(spec, "ntrigger") if spec is not None else None
        mask = None
        if spec is not None and "pixel_mask" in spec:
            mask = np.asarray(spec["pixel_mask"][()])
    entries = []
    first: tuple | None = None
    for number, target, ds_path in links:
        if not (store.exists(target) if store is not None else os.path.isfile(target)):
            raise DataSetException(f"{display_url(path)}: data file of link data_{number:06d} is missing: "
                                   f"{display_url(target)}")
        with open_h5(target, f"{path}: data file {target}", store) as df:
            ds = df.get(ds_path)
            if not isinstance(ds, h5py.Dataset):
                raise DataSetException(f"{path}: data file {target} has no dataset {ds_path}")
            if ds.ndim != 3:
                raise DataSetException(f"{target}:{ds_path}: shape {ds.shape} is not (images, height, width)")
            codec, filters = _codec(target, ds)
            this = (tuple(ds.shape[1:]), np.dtype(ds.dtype), codec, filters)
            low = ds.attrs.get("image_nr_low")
            order = int(np.asarray(low).reshape(-1)[0]) if low is not None else None
            entries.append((order, number, target, ds_path, int(ds.shape[0])))
        if first is None:
            first = this
        elif this[:2] != first[:2]:
            raise DataSetException(f"{target}:{ds_path}: frames of {this[0]} {this[1]}, the first data file has "
                                   f"{first[0]} {first[1]}")
        elif this[2:] != first[2:]:
            first = first[:2] + (None, f"{first[3]}; {this[3]}")  # mixed filters: HDF5 reads them all
    assert first is not None
    if all(e[0] is not None for e in entries):
        entries.sort(key=lambda e: (e[0], e[1]))
    files, start = [], 0
    for _order, _number, target, ds_path, frames in entries:
        files.append(LinkedFile(target, ds_path, start, frames))
        start += frames
    frame_shape, dtype, codec, filters = first
    if dtype.kind not in "biuf":
        raise DataSetException(f"{path}: cannot read frames of dtype {dtype}")
    if mask is not None and mask.shape != frame_shape:
        warnings.warn(f"{path}: pixel_mask of shape {mask.shape} does not match frames of {frame_shape}; "
                      "not offered", stacklevel=2)
        mask = None
    return MasterInfo(tuple(files), frame_shape, dtype, codec, filters, nimages, ntrigger, mask)


def is_master(path: str, store: ObjectStore | None = None) -> bool:
    """Whether ``path`` (a file, or an object of ``store``) is a DECTRIS master file: HDF5 magic,
    ``/entry/data/data_NNNNNN`` links, detector metadata."""
    try:
        with open_path(path, store) as fh:
            if fh.read(8) != HDF5_MAGIC:
                return False
    except (OSError, DataSetException):
        return False
    source = None
    try:
        h5py = h5py_with_filters()
        source = store.open(path, block_size=H5_REMOTE_BLOCK) if store is not None else None
        with h5py.File(source if source is not None else path, "r") as f:
            group = f.get("/entry/data")
            if group is None or f.get(DETECTOR_SPECIFIC) is None:
                return False
            return any(_LINK_NAME.match(n) for n in group)
    except (OSError, DataSetException):
        return False
    finally:
        if source is not None:
            source.close()
