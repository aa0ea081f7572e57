"""The ``zarr`` format: a Zarr v3 array (zarr-python 3), in a local directory or an object store.

``ctx.load("zarr", path="scan.zarr")`` or ``path="s3://bucket/scan.zarr",
storage_options={...}``; ``array_path`` names an array inside a group. The
last ``sig_dims`` axes are the signal: given as ``sig_dims`` or
``sig_shape`` (the trailing axes; ``nav_shape`` may reshape the rest), else taken from
the array's attributes (``{"raytile": {"sig_dims": 2}}``, written by
:func:`create_zarr_array`, or LiberTEM-style ``"sig_dims"``), else 2.

The driver reads only the array's metadata. Each partition opens the array
in the worker that runs it; zarr fetches the chunks of a tile block
concurrently and decodes them there (zstd, blosc, bitshuffle-LZ4 through
numcodecs, ...). Tiles follow the chunks: the base shape is the chunk's
frames along the last nav axis times the chunk's signal extent, so a chunk
is fetched and decoded once per tile block.

:func:`create_zarr_array` and :func:`open_zarr_array` are what
``ctx.export_dataset(..., format="zarr")`` uses to write a data set in
parallel from the workers (one chunk per frame: no two workers write the
same chunk).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Iterator, Mapping

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io.dataset import DataSet, DataSetMeta, Partition, check_array_backend
from raytile.io.fileset import REMOTE_PARAMS
from raytile.io.formats.hdf5 import _ChunkTiling, nav_runs
from raytile.io.store import ObjectStore, display_url, is_url, scrub, store_for, zarr_store_options

__all__ = ["ZarrDataSet", "ZarrPartition", "open_zarr_array", "create_zarr_array"]


def _zarr() -> Any:
    try:
        import zarr
    except ImportError:
        raise DataSetException("the zarr format needs zarr>=3; pip install 'raytile[cloud]'") from None
    if int(zarr.__version__.split(".")[0]) < 3:
        raise DataSetException(f"the zarr format needs zarr>=3, found {zarr.__version__}")
    return zarr


def _store(path: str, store: ObjectStore | None, read_only: bool) -> Any:
    """A zarr store of ``path``: a local directory, or an fsspec store of the URL."""
    zarr = _zarr()
    if store is None:
        return zarr.storage.LocalStore(path, read_only=read_only)
    return zarr.storage.FsspecStore.from_url(path, storage_options=zarr_store_options(store), read_only=read_only)


def _failed(path: str, store: ObjectStore | None, e: Exception, doing: str) -> DataSetException:
    if store is not None:
        return store.error(path, e, doing)
    return DataSetException(f"{path}: {doing}: {type(e).__name__}: {e}")


def open_zarr_array(path: str, store: ObjectStore | None = None, array_path: str | None = None,
                    mode: str = "r") -> Any:
    """The zarr array at ``path`` (and ``array_path`` inside a group), or DataSetException naming it."""
    zarr = _zarr()
    try:
        node = zarr.open(store=_store(path, store, mode == "r"), mode=mode, path=array_path or "")
    except FileNotFoundError:
        where = display_url(path) + (f":{array_path}" if array_path else "")
        raise DataSetException(f"{where}: no Zarr array or group found") from None
    except Exception as e:
        raise _failed(path, store, e, "open as Zarr") from None
    if isinstance(node, zarr.Group):
        arrays = sorted(name for name, _ in node.arrays())
        raise DataSetException(f"{display_url(path)}: a Zarr group; pass array_path, one of {arrays[:20]}")
    if node.metadata.zarr_format != 3:
        raise DataSetException(f"{display_url(path)}: Zarr format {node.metadata.zarr_format}; only v3 is read")
    return node


def create_zarr_array(path: str, shape: tuple[int, ...], dtype: np.dtype, sig_dims: int,
                      store: ObjectStore | None = None, compressor: str | None = "zstd",
                      overwrite: bool = False) -> Any:
    """A new Zarr v3 array for a data set: one chunk per frame, ``{"raytile": {"sig_dims": ...}}`` attributes."""
    zarr = _zarr()
    chunks = (1,) * (len(shape) - sig_dims) + tuple(shape[len(shape) - sig_dims:])
    compressors: Any = None
    if compressor == "zstd":
        compressors = zarr.codecs.ZstdCodec(level=3)
    elif compressor == "blosc":
        compressors = zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")
    elif compressor is not None:
        raise DataSetException(f"zarr export: compressor must be 'zstd', 'blosc' or None, got {compressor!r}")
    try:
        arr = zarr.create_array(store=_store(path, store, False), shape=shape, chunks=chunks, dtype=dtype,
                                compressors=compressors, zarr_format=3, overwrite=overwrite,
                                attributes={"raytile": {"sig_dims": int(sig_dims)}})
    except Exception as e:
        if "exists" in str(e).lower() or isinstance(e, FileExistsError):
            raise DataSetException(f"{display_url(path)}: a Zarr array or group exists there; pass "
                                   f"overwrite=True to replace it") from None
        raise _failed(path, store, e, "create a Zarr array") from None
    return arr


class ZarrPartition(_ChunkTiling, Partition):
    """Frames of a Zarr array, read (and decoded) by zarr in the worker; tiles follow the chunks."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, path: str, array_path: str | None,
                 store: ObjectStore | None, chunks: tuple, file_nav: tuple):
        super().__init__(meta, partition_slice, idx)
        self.path = path
        self.array_path = array_path
        self.store = store
        self.chunks = chunks
        self.file_nav = file_nav

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {display_url(self.path)}"

    def get_io_size(self) -> int | None:
        """A tile block spans whole chunks: at least 8 MiB of them (several chunk GETs in flight)."""
        return 8 * 1024 * 1024

    def _read(self, arr: Any, a: int, b: int, sig_sl: tuple, out: np.ndarray) -> None:
        for pos, end, sel in nav_runs(a, b, self.file_nav):
            try:
                out[pos - a:end - a] = arr[sel + sig_sl]
            except DataSetException:
                raise
            except Exception as e:
                raise _failed(self.path, self.store, e, f"read frames {pos}..{end - 1}") from None

    def _source(self) -> Any:
        arr = open_zarr_array(self.path, self.store, self.array_path)
        out = np.empty((self.stop - self.start,) + tuple(self.meta.shape.sig), dtype=arr.dtype)
        self._read(arr, self.start, self.stop, tuple(slice(None) for _ in self.meta.shape.sig), out)
        return out

    def get_tiles(self, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                  dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        check_array_backend(self, array_backend)
        dest_dtype = np.dtype(dest_dtype if dest_dtype is not None else self.meta.raw_dtype)
        frames = np.arange(self.start, self.stop)
        if roi is not None:
            frames = frames[roi[self.start:self.stop]]
        if len(frames) == 0:
            return
        arr = open_zarr_array(self.path, self.store, self.array_path)
        nav_origin = self.roi_offset(roi)
        sig_dims = self.meta.shape.sig_dims
        raw: dict = {}
        conv: dict = {}
        for b0 in range(0, len(frames), tiling_scheme.depth):
            block = frames[b0:b0 + tiling_scheme.depth]
            count = len(block)
            a, z = int(block[0]), int(block[-1]) + 1
            for s_idx, sl in enumerate(tiling_scheme.sig_slices):
                key = (s_idx, z - a)
                buf = raw.get(key)
                if buf is None:
                    buf = raw[key] = np.empty((z - a,) + sl.shape.to_tuple(), dtype=arr.dtype)
                self._read(arr, a, z, sl.get(), buf)
                data = buf if roi is None else buf[block - a]
                if data.dtype != dest_dtype or roi is not None:
                    c = conv.get((s_idx, count))
                    if c is None:
                        c = conv[(s_idx, count)] = np.empty((count,) + sl.shape.to_tuple(), dtype=dest_dtype)
                    np.copyto(c, data, casting="unsafe")
                    data = c
                yield DataTile(data, Slice((nav_origin + b0,) + sl.origin,
                                           Shape((count,) + sl.shape.to_tuple(), sig_dims=sig_dims)), s_idx)


class ZarrDataSet(DataSet):
    """A Zarr v3 array, local or in an object store (see the module docstring)."""

    format_name = "zarr"
    initialize_on_worker = True
    params_schema = {
        "path": {"type": "path", "required": True},
        "array_path": {"type": "str"},
        "sig_dims": {"type": "int", "min": 1},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        **REMOTE_PARAMS,
    }

    def __init__(self, path: str, array_path: str | None = None, sig_dims: int | None = None,
                 nav_shape: tuple[int, ...] | None = None, sig_shape: tuple[int, ...] | None = None,
                 storage_options: Mapping[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._path = path.rstrip("/") if is_url(path) else path
        self._array_path = array_path
        self._sig_dims = sig_dims if sig_shape is None else len(sig_shape)
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._store = store_for(path, storage_options)

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict | None:
        """``{"path": path}`` for a Zarr v3 array or group: a directory (or a prefix of ``store``) holding a
        ``zarr.json`` of ``zarr_format`` 3. A group needs ``array_path`` next to ``path``."""
        meta_path = path.rstrip("/") + "/zarr.json"
        try:
            if store is not None:
                if not store.exists(meta_path):
                    return None
                with store.open(meta_path) as f:
                    meta = json.loads(f.read())
            else:
                if not os.path.isfile(meta_path):
                    return None
                with open(meta_path, "rb") as fh:
                    meta = json.loads(fh.read())
        except (OSError, ValueError) as e:
            raise DataSetException(f"{display_url(meta_path)}: not Zarr metadata: {type(e).__name__}: {e}") from None
        if not isinstance(meta, dict) or meta.get("zarr_format") != 3:
            return None
        return {"path": path}

    def _split(self, shape: tuple[int, ...], attrs: Mapping[str, Any]) -> int:
        """Signal dims: given, else from the attributes, else 2."""
        if self._sig_dims is not None:
            return int(self._sig_dims)
        own = attrs.get("raytile")
        value = own.get("sig_dims") if isinstance(own, Mapping) else attrs.get("sig_dims")
        if value is None:
            return 2
        if not isinstance(value, int) or not 1 <= value < len(shape):
            raise DataSetException(f"{display_url(self._path)}: attribute sig_dims={value!r} does not fit the "
                                   f"array's shape {shape}; pass sig_dims")
        return value

    def _do_initialize(self) -> DataSetMeta:
        arr = open_zarr_array(self._path, self._store, self._array_path)
        shape = tuple(int(n) for n in arr.shape)
        dtype = np.dtype(arr.dtype)
        if dtype.kind not in "biuf":
            raise DataSetException(f"{display_url(self._path)}: cannot read dtype {dtype}")
        try:
            attrs = dict(arr.attrs)
        except Exception as e:  # noqa: BLE001 - attributes are optional; an unreadable set is none
            attrs = {}
            self.warn_on_load(f"{display_url(self._path)}: attributes unreadable "
                              f"({scrub(str(e), self._store.options if self._store else None)})")
        sig_dims = self._split(shape, attrs)
        if len(shape) <= sig_dims:
            raise DataSetException(f"{display_url(self._path)}: shape {shape} has no nav axis for sig_dims={sig_dims}")
        file_nav = shape[:len(shape) - sig_dims]
        file_sig = shape[len(shape) - sig_dims:]
        sig = self._sig_shape or file_sig
        nav = self._nav_shape or file_nav
        if tuple(sig) != tuple(file_sig):
            raise DataSetException(f"{display_url(self._path)}: sig_shape {tuple(sig)} is not the array's trailing "
                                   f"axes {file_sig} (tiles follow the stored chunks: no reshape of the signal)")
        if math.prod(nav) != math.prod(file_nav):
            raise DataSetException(f"{display_url(self._path)}: holds {math.prod(file_nav)} frames, nav_shape "
                                   f"{nav} needs {math.prod(nav)}")
        chunks = tuple(int(c) for c in arr.chunks)
        self._file_nav, self._chunks, self._dtype = file_nav, chunks, dtype
        self._codecs = ", ".join(type(c).__name__ for c in arr.metadata.codecs)
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)), raw_dtype=dtype.newbyteorder("="))

    def get_cache_key(self) -> Any:
        return ("zarr", self._path, self._array_path, self.shape.to_tuple(), str(self.dtype))

    def get_diagnostics(self) -> list[dict[str, Any]]:
        return super().get_diagnostics() + [
            {"name": "path", "value": display_url(self._path) + (f":{self._array_path}" if self._array_path else "")},
            {"name": "chunks", "value": str(self._chunks)},
            {"name": "codecs", "value": self._codecs},
        ]

    def get_partitions(self) -> list[Partition]:
        return [ZarrPartition(self.meta, sl, idx, self._path, self._array_path, self._store, self._chunks,
                              self._file_nav)
                for idx, sl in enumerate(self.get_slices())]
