"""The ``raw_csr`` format: a sparse data set as three raw files of a CSR matrix, described by a TOML file.

LiberTEM's layout: the TOML file (``ctx.load("raw_csr", path="scan.toml")``)
holds::

    [params]
    filetype = "raw_csr"
    nav_shape = [64, 64]
    sig_shape = [256, 256]

    [raw_csr]
    indptr_file = "rowind.dat"      # paths relative to the TOML file
    indptr_dtype = "<i8"
    indices_file = "coords.dat"
    indices_dtype = "<i4"
    data_file = "values.dat"
    data_dtype = "<u2"

``indptr`` has one entry per frame plus one (frame ``i`` holds values
``indptr[i]:indptr[i+1]``), ``indices`` the flat signal index of each value.
The files are memory-mapped; a partition reads only its frames' rows and
yields scipy CSR tiles (see :mod:`raytile.io.formats.sparse`). Parameters as
LiberTEM 0.16: ``path``, ``nav_shape``, ``sig_shape`` (default: from the
TOML file), ``sync_offset``, ``num_partitions``.
"""

from __future__ import annotations

import math
import os
import tomllib
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.fileset import check_sync_offset
from raytile.io.formats.sparse import SCIPY_CSR, SparsePartition

__all__ = ["RawCSRDataSet", "RawCSRPartition", "read_raw_csr_descriptor"]

_KEYS = ("indptr_file", "indptr_dtype", "indices_file", "indices_dtype", "data_file", "data_dtype")


def read_raw_csr_descriptor(path: str) -> dict[str, Any]:
    """The TOML file's parameters: ``nav_shape``, ``sig_shape`` and the three files with their dtypes."""
    try:
        with open(path, "rb") as f:
            conf = tomllib.load(f)
    except OSError as e:
        raise DataSetException(f"{path}: cannot read: {e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise DataSetException(f"{path}: not a valid TOML file: {e}") from None
    params = conf.get("params")
    if not isinstance(params, dict) or str(params.get("filetype", "")).lower() != "raw_csr":
        found = params.get("filetype") if isinstance(params, dict) else None
        raise DataSetException(f"{path}: not a raw_csr descriptor ([params] filetype is {found!r}, expected "
                               f"'raw_csr')")
    section = conf.get(params["filetype"]) or conf.get("raw_csr")
    if not isinstance(section, dict) or any(k not in section for k in _KEYS):
        have = sorted(section) if isinstance(section, dict) else []
        raise DataSetException(f"{path}: the [raw_csr] section needs {', '.join(_KEYS)}; it has {have}")
    base = os.path.dirname(os.path.abspath(path))
    out: dict[str, Any] = {}
    try:
        out["nav_shape"] = tuple(int(v) for v in params["nav_shape"])
        out["sig_shape"] = tuple(int(v) for v in params["sig_shape"])
    except (KeyError, TypeError, ValueError):
        raise DataSetException(f"{path}: [params] needs nav_shape and sig_shape as lists of integers") from None
    for name in ("indptr", "indices", "data"):
        out[name + "_file"] = os.path.join(base, str(section[name + "_file"]))
        try:
            dtype = np.dtype(section[name + "_dtype"])
        except TypeError:
            raise DataSetException(f"{path}: {name}_dtype {section[name + '_dtype']!r} is not a numpy dtype") from None
        if dtype.kind not in ("iu" if name != "data" else "biuf"):
            raise DataSetException(f"{path}: {name}_dtype {dtype} is not an {'integer' if name != 'data' else 'numeric'}"
                                   f" dtype")
        out[name + "_dtype"] = dtype
    return out


def _map(path: str, dtype: np.dtype) -> np.ndarray:
    size = os.path.getsize(path)
    if size % dtype.itemsize:
        raise DataSetException(f"{path}: {size} bytes is not a whole number of {dtype} items (truncated?)")
    if size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


class RawCSRPartition(SparsePartition):
    """Rows ``[start + sync_offset, stop + sync_offset)`` of the CSR files (rows outside them empty)."""

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int, desc: dict[str, Any], rows: int):
        super().__init__(meta, partition_slice, idx)
        self.desc = desc
        self.rows = rows

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop}) of {self.desc['data_file']}"

    def _rows(self):
        import scipy.sparse as sp

        d = self.desc
        off = self.meta.sync_offset
        lo, hi = self.start + off, self.stop + off
        a, b = max(lo, 0), min(hi, self.rows)
        pixels = self.meta.shape.sig.size
        if b > a:
            indptr = np.asarray(_map(d["indptr_file"], d["indptr_dtype"])[a:b + 1], dtype=np.int64)
            v0, v1 = int(indptr[0]), int(indptr[-1])
            indices = np.asarray(_map(d["indices_file"], d["indices_dtype"])[v0:v1])
            values = np.asarray(_map(d["data_file"], d["data_dtype"])[v0:v1])
            if len(indices) and (int(indices.max()) >= pixels or int(indices.min()) < 0):
                raise DataSetException(f"{d['indices_file']}: {self.describe()}: a signal index outside "
                                       f"0..{pixels - 1}")
            if np.any(np.diff(indptr) < 0):
                raise DataSetException(f"{d['indptr_file']}: {self.describe()}: indptr decreases")
            indptr = indptr - v0
            full = np.concatenate([np.zeros(a - lo, dtype=np.int64), indptr,
                                   np.full(hi - b, indptr[-1], dtype=np.int64)])
        else:  # every frame outside the files: empty rows
            full = np.zeros(hi - lo + 1, dtype=np.int64)
            indices = np.zeros(0, dtype=np.int32)
            values = np.zeros(0, dtype=self.meta.raw_dtype)
        if not values.dtype.isnative:
            values = values.astype(values.dtype.newbyteorder("="))
        return sp.csr_matrix((values, indices, full), shape=(self.stop - self.start, pixels))


class RawCSRDataSet(DataSet):
    """``ctx.load("raw_csr", path="scan.toml")``: a CSR matrix in three raw files (see the module docs)."""

    format_name = "raw_csr"
    file_extensions = ("toml",)
    initialize_on_worker = True
    native_backend = SCIPY_CSR
    array_backends = (SCIPY_CSR,)
    params_schema = {
        "path": {"type": "path", "required": True},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        "sync_offset": {"type": "int"},
    }

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None, sig_shape: tuple[int, ...] | None = None,
                 sync_offset: int = 0, **kwargs):
        super().__init__(**kwargs)
        self._path = path
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._sync_offset = sync_offset
        self._desc: dict[str, Any] = {}
        self._rows_in_files = 0

    @classmethod
    def _detect_params(cls, path: str) -> dict | None:
        """``{"path": path}`` for a ``.toml`` file whose ``[params] filetype`` is ``raw_csr``."""
        if not cls.has_file_extension(path) or os.path.getsize(path) > 1 << 20:
            return None
        try:
            read_raw_csr_descriptor(path)
        except DataSetException:
            return None
        return {"path": path}

    def _do_initialize(self) -> DataSetMeta:
        if not os.path.isfile(self._path):
            raise DataSetException(f"{self._path}: file not found")
        desc = read_raw_csr_descriptor(self._path)
        for name in ("indptr", "indices", "data"):
            if not os.path.isfile(desc[name + "_file"]):
                raise DataSetException(f"{self._path}: its {name}_file {desc[name + '_file']} does not exist")
        indptr = _map(desc["indptr_file"], desc["indptr_dtype"])
        n_idx = os.path.getsize(desc["indices_file"]) // desc["indices_dtype"].itemsize
        n_val = os.path.getsize(desc["data_file"]) // desc["data_dtype"].itemsize
        _map(desc["indices_file"], desc["indices_dtype"])
        _map(desc["data_file"], desc["data_dtype"])
        if len(indptr) < 1:
            raise DataSetException(f"{desc['indptr_file']}: empty indptr (it needs frames + 1 entries)")
        if n_idx != n_val:
            raise DataSetException(f"{self._path}: {n_idx} indices but {n_val} values; the files do not match")
        if int(indptr[0]) != 0 or int(indptr[-1]) != n_val:
            raise DataSetException(f"{desc['indptr_file']}: indptr runs from {int(indptr[0])} to {int(indptr[-1])}, "
                                   f"the files hold {n_val} values (truncated or mismatched files?)")
        sig = self._sig_shape or desc["sig_shape"]
        if math.prod(sig) != math.prod(desc["sig_shape"]):
            raise DataSetException(f"{self._path}: sig_shape {sig} has {math.prod(sig)} pixels, the descriptor's "
                                   f"{desc['sig_shape']} {math.prod(desc['sig_shape'])}")
        nav = self._nav_shape or desc["nav_shape"]
        rows = len(indptr) - 1
        check_sync_offset(self._path, self._sync_offset, math.prod(nav), rows)
        if self._sync_offset == 0 and rows < math.prod(nav):
            raise DataSetException(f"{self._path}: the files hold {rows} frames, nav_shape {nav} needs "
                                   f"{math.prod(nav)}")
        self._desc = desc
        self._rows_in_files = rows
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)),
                           raw_dtype=desc["data_dtype"].newbyteorder("="),
                           sync_offset=self._sync_offset, image_count=rows)

    def get_cache_key(self) -> Any:
        stats = tuple((p, os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in
                      (self._path, self._desc["indptr_file"], self._desc["indices_file"], self._desc["data_file"]))
        return ("raw_csr", stats, self.shape.to_tuple(), self._sync_offset)

    def get_partitions(self) -> list[Partition]:
        return [RawCSRPartition(self.meta, sl, idx, self._desc, self._rows_in_files)
                for idx, sl in enumerate(self.get_slices())]
