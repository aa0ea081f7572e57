"""Sparse data sets whose tiles come natively sparse (scipy CSR).

Two formats, both stored as a CSR matrix of ``(frames, prod(sig))``:

``sparse_memory``
    ``ctx.load("sparse_memory", data=m)`` with ``m`` a ``sparse.COO`` /
    ``sparse.GCXS`` shaped ``nav + sig`` or a scipy.sparse matrix/array
    shaped ``(frames, prod(sig))`` (then ``sig_shape`` is required and
    ``nav_shape`` defaults to ``(frames,)``).

``npz_csr``
    An ``.npz`` file with the arrays ``indptr``, ``indices``, ``values``
    (the CSR of ``(frames, prod(sig))``) and ``shape`` (the full ``nav + sig``
    shape) and optionally ``sig_dims`` (default 2). :func:`save_npz_csr`
    writes one. Uncompressed archives (``np.savez``) are memory-mapped, so a
    partition reads only its rows.

Tiles follow the negotiated tiling scheme (nav blocks x signal slices) and
honour ROIs. They are yielded in ``scipy.sparse.csr_matrix`` format (the
``native_backend``), 2D ``(frames, pixels of the signal slice)``, or in any
other backend the execution plan asks for via ``get_tiles(array_backend=...)``.
"""

from __future__ import annotations

import math
import os
import zipfile
from typing import Any, Iterator, Sequence

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.formats.memory import ArrayDataSet
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme

__all__ = [
    "SparseMemoryDataSet", "NPZCSRDataSet", "SparsePartition", "SparseMemoryPartition", "NPZCSRPartition",
    "save_npz_csr",
]

SCIPY_CSR = "scipy.sparse.csr_matrix"


def _shape_from(total_shape: Sequence[int] | None, nav_shape, sig_shape, sig_dims: int,
                rows: int, pixels: int, what: str) -> Shape:
    if sig_shape is not None:
        sig = tuple(int(v) for v in sig_shape)
    elif total_shape is not None:
        sig = tuple(int(v) for v in total_shape[len(total_shape) - sig_dims:])
    else:
        raise DataSetException(f"{what}: sig_shape is needed for a 2D (frames, pixels) sparse matrix")
    if nav_shape is not None:
        nav = tuple(int(v) for v in nav_shape)
    elif total_shape is not None and sig_shape is None:
        nav = tuple(int(v) for v in total_shape[: len(total_shape) - sig_dims])
    else:
        nav = (rows,)
    if math.prod(sig) != pixels or math.prod(nav) != rows:
        raise DataSetException(
            f"{what}: a CSR matrix of shape {(rows, pixels)} cannot be viewed as nav {nav} x sig {sig}"
        )
    if not nav or not sig:
        raise DataSetException(f"{what}: needs at least one nav and one sig dimension, got nav {nav} sig {sig}")
    return Shape(nav + sig, sig_dims=len(sig))


class SparsePartition(Partition):
    """A partition of a CSR data set; subclasses give its rows (:meth:`_rows`)."""

    array_backends = (SCIPY_CSR,)

    def _rows(self):
        """This partition's frames as a scipy CSR matrix ``(frames, pixels)``."""
        raise NotImplementedError

    def _source(self):
        return self._rows()

    def _tile_source(self, tiling_scheme: TilingScheme, part_roi: np.ndarray | None, dest_dtype: np.dtype,
                     nav_origin: int, array_backend: str | None) -> Iterator[DataTile]:
        """Yield CSR tiles (or ``array_backend`` tiles: any backend sparseconverter converts CSR to) in
        nav order, every signal slice per nav block."""
        rows = self._source()
        if rows.dtype != dest_dtype:
            rows = rows.astype(dest_dtype)
        sig = self.meta.shape.sig.to_tuple()
        pixel_index = None
        if len(tiling_scheme) > 1:
            pixel_index = np.arange(math.prod(sig)).reshape(sig)
        if part_roi is not None:
            rows = rows[np.flatnonzero(part_roi)]
        n = rows.shape[0]
        depth = tiling_scheme.depth
        convert = None
        if array_backend not in (None, SCIPY_CSR):
            from sparseconverter import ND_BACKENDS, for_backend

            def convert(arr, shape):
                out = for_backend(arr, array_backend)
                return out.reshape(shape) if array_backend in ND_BACKENDS else out

        cols_cache: dict[int, np.ndarray] = {}
        for block_start in range(0, n, depth):
            block_stop = min(block_start + depth, n)
            block = rows[block_start:block_stop]
            count = block_stop - block_start
            for scheme_idx, sig_slice in enumerate(tiling_scheme.sig_slices):
                if pixel_index is None:
                    data = block
                else:
                    cols = cols_cache.get(scheme_idx)
                    if cols is None:
                        cols = cols_cache[scheme_idx] = pixel_index[sig_slice.get()].reshape(-1)
                    data = block[:, cols]
                tile_shape = (count,) + sig_slice.shape.to_tuple()
                if convert is not None:
                    data = convert(data, tile_shape)
                tile_slice = Slice((nav_origin + block_start,) + sig_slice.origin,
                                   Shape(tile_shape, sig_dims=len(sig)))
                yield DataTile(data, tile_slice, scheme_idx)


class SparseMemoryPartition(SparsePartition):
    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, rows: Any):
        super().__init__(meta, partition_slice, idx)
        self.rows = rows

    def _rows(self):
        return self.rows


class SparseMemoryDataSet(ArrayDataSet):
    """A sparse array in memory: ``sparse.COO``/``GCXS`` (nav + sig) or scipy ``(frames, pixels)``.

    >>> ds = ctx.load("sparse_memory", data=sparse.COO.from_numpy(arr))       # arr: (8, 8, 32, 32)
    >>> ds = ctx.load("sparse_memory", data=csr, nav_shape=(8, 8), sig_shape=(32, 32))
    """

    format_name = "sparse_memory"
    array_backends = (SCIPY_CSR,)
    params_schema = {
        "data": {"type": "array", "required": True},
        "sig_dims": {"type": "int", "min": 1},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
    }

    def __init__(self, data: Any, sig_dims: int | None = 2, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, **kwargs):
        super().__init__(data, (2 if sig_dims is None else sig_dims) if sig_shape is None else len(sig_shape),
                         nav_shape, sig_shape, **kwargs)

    def _do_initialize(self) -> DataSetMeta:
        import scipy.sparse as sp

        data = self._data
        mod = type(data).__module__
        if sp.issparse(data):
            csr = sp.csr_matrix(data)
            shape = _shape_from(None, self._nav_shape, self._sig_shape, self._sig_dims,
                                csr.shape[0], csr.shape[1], "sparse_memory")
        elif mod.startswith("sparse"):
            full = tuple(data.shape)
            if len(full) < self._sig_dims + 1:
                raise DataSetException(
                    f"sparse_memory data of shape {full} has no nav axis for sig_dims={self._sig_dims}"
                )
            nav, sig = self._nav_sig(full)
            shape = Shape(nav + sig, sig_dims=len(sig))
            if shape.size != math.prod(full):
                raise DataSetException(f"sparse_memory data of shape {full} cannot be viewed as nav {nav} x sig {sig}")
            from raytile.common.csr import pydata_to_csr

            flat = data.reshape((math.prod(nav),) + sig)
            csr = pydata_to_csr(flat)
        elif isinstance(data, np.ndarray):
            full = data.shape
            nav, sig = self._nav_sig(full)
            shape = Shape(nav + sig, sig_dims=len(sig))
            if shape.size != data.size:
                raise DataSetException(f"sparse_memory data of shape {full} cannot be viewed as nav {nav} x sig {sig}")
            csr = sp.csr_matrix(data.reshape(math.prod(nav), math.prod(sig)))
        else:
            raise DataSetException(
                f"sparse_memory needs a sparse.COO/GCXS, a scipy.sparse matrix or a numpy array, "
                f"got {type(data).__name__}"
            )
        csr.sum_duplicates()
        self._frames = csr
        return DataSetMeta(shape=shape, raw_dtype=np.dtype(csr.dtype))

    @property
    def csr(self):
        """All frames as one scipy CSR matrix ``(frames, pixels)``."""
        return self._frames

    def _partition(self, partition_slice: Slice, idx: int, frames: Any) -> Partition:
        return SparseMemoryPartition(self.meta, partition_slice, idx, frames)


# -- npz_csr ------------------------------------------------------------------

def save_npz_csr(path: str | os.PathLike, data: Any, nav_shape=None, sig_shape=None, sig_dims: int = 2,
                 compressed: bool = False) -> None:
    """Write ``data`` (numpy, sparse.COO/GCXS or scipy (frames, pixels) with ``sig_shape``) as npz_csr."""
    ds = SparseMemoryDataSet(data, sig_dims=sig_dims, nav_shape=nav_shape, sig_shape=sig_shape)
    ds.initialize()
    csr = ds.csr
    save = np.savez_compressed if compressed else np.savez
    save(path, indptr=csr.indptr, indices=csr.indices, values=csr.data,
         shape=np.asarray(ds.shape.to_tuple(), dtype=np.int64),
         sig_dims=np.asarray(ds.shape.sig_dims, dtype=np.int64))


def _npz_member(path: str, name: str):
    """Member ``name`` of an .npz: memory-mapped if stored uncompressed, else loaded."""
    member = name + ".npy"
    with zipfile.ZipFile(path) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise DataSetException(
                f"{path}: npz_csr file has no array {name!r}; it has {sorted(n[:-4] for n in zf.namelist())}"
            ) from None
        if info.compress_type != zipfile.ZIP_STORED:
            with zf.open(member) as f:
                return np.lib.format.read_array(f, allow_pickle=False)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if local[:4] != b"PK\x03\x04":
            raise DataSetException(f"{path}: corrupt zip header of member {member!r}")
        name_len = int.from_bytes(local[26:28], "little")
        extra_len = int.from_bytes(local[28:30], "little")
        f.seek(info.header_offset + 30 + name_len + extra_len)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        offset = f.tell()
    if dtype.hasobject:
        raise DataSetException(f"{path}: array {name!r} holds Python objects")
    if math.prod(shape) == 0:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")


class NPZCSRPartition(SparsePartition):
    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, path: str):
        super().__init__(meta, partition_slice, idx)
        self.path = path

    def _rows(self):
        import scipy.sparse as sp

        indptr = np.asarray(_npz_member(self.path, "indptr")[self.start:self.stop + 1], dtype=np.int64)
        lo, hi = int(indptr[0]), int(indptr[-1])
        indices = np.asarray(_npz_member(self.path, "indices")[lo:hi])
        values = np.asarray(_npz_member(self.path, "values")[lo:hi])
        pixels = self.meta.shape.sig.size
        return sp.csr_matrix((values, indices, indptr - lo), shape=(self.stop - self.start, pixels))

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {self.path}"


class NPZCSRDataSet(DataSet):
    """A CSR matrix in an ``.npz`` (``indptr``, ``indices``, ``values``, ``shape``[, ``sig_dims``]).

    >>> save_npz_csr("scan.npz", sparse.COO.from_numpy(arr))
    >>> ds = ctx.load("npz_csr", path="scan.npz")
    """

    format_name = "npz_csr"
    array_backends = (SCIPY_CSR,)
    params_schema = {
        "path": {"type": "path", "required": True},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        "sig_dims": {"type": "int", "min": 1},
    }

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, sig_dims: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self._path = path
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._sig_dims = sig_dims

    @property
    def path(self) -> str:
        return self._path

    def _do_initialize(self) -> DataSetMeta:
        path = self._path
        if not os.path.exists(path):
            raise DataSetException(f"npz_csr file {path} does not exist")
        if not zipfile.is_zipfile(path):
            raise DataSetException(f"{path} is not an .npz (zip) file")
        indptr = _npz_member(path, "indptr")
        indices = _npz_member(path, "indices")
        values = _npz_member(path, "values")
        with zipfile.ZipFile(path) as zf:
            names = {n[:-4] for n in zf.namelist()}
        stored_shape = tuple(int(v) for v in np.asarray(_npz_member(path, "shape"))) if "shape" in names else None
        sig_dims = self._sig_dims
        if sig_dims is None:
            sig_dims = int(np.asarray(_npz_member(path, "sig_dims"))) if "sig_dims" in names else 2
        if indptr.ndim != 1 or len(indptr) < 2:
            raise DataSetException(f"{path}: indptr must be 1D with at least 2 entries, has shape {indptr.shape}")
        rows = len(indptr) - 1
        if len(indices) != len(values):
            raise DataSetException(f"{path}: indices ({len(indices)}) and values ({len(values)}) differ in length")
        if int(indptr[-1]) != len(values) or int(indptr[0]) != 0:
            raise DataSetException(
                f"{path}: indptr runs from {int(indptr[0])} to {int(indptr[-1])}, expected 0 to {len(values)}"
            )
        if stored_shape is not None:
            pixels = math.prod(stored_shape[len(stored_shape) - sig_dims:])
        elif self._sig_shape is not None:
            pixels = math.prod(self._sig_shape)
        else:
            raise DataSetException(f"{path}: no 'shape' array in the file; pass sig_shape (and nav_shape)")
        shape = _shape_from(stored_shape, self._nav_shape, self._sig_shape, sig_dims, rows, pixels,
                            f"npz_csr {path}")
        if len(indices) and int(np.max(indices)) >= pixels:
            raise DataSetException(f"{path}: column index {int(np.max(indices))} >= {pixels} pixels per frame")
        return DataSetMeta(shape=shape, raw_dtype=np.dtype(values.dtype))

    def get_cache_key(self):
        st = os.stat(self._path)
        return ("npz_csr", self._path, st.st_mtime_ns, st.st_size)

    def get_partitions(self) -> list[Partition]:
        return [NPZCSRPartition(self.meta, sl, idx, self._path) for idx, sl in enumerate(self.get_slices())]
