"""The ``npy`` format: a .npy file, its shape and dtype read from the header."""

from __future__ import annotations

import math

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSetMeta
from raytile.io.decoders import NativeDecoder
from raytile.io.fileset import REMOTE_PARAMS, File, FileDataSet, FileSet, check_sync_offset
from raytile.io.formats.raw import check_file
from raytile.common.shape import Shape
from raytile.io.store import ObjectStore, open_path, path_size

__all__ = ["NPYDataSet", "read_npy_header"]


def read_npy_header(path: str, store: ObjectStore | None = None) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Return (shape, dtype, fortran_order, data offset) of a .npy file (or object of ``store``)."""
    try:
        with open_path(path, store) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            return shape, dtype, fortran, f.tell()
    except ValueError as e:
        raise DataSetException(f"{path}: not a valid .npy file ({e})") from None


class NPYDataSet(FileDataSet):
    """A .npy file; the last ``sig_dims`` axes are the signal.

    ``nav_shape``/``sig_shape`` may reshape it (same number of elements).
    """

    format_name = "npy"
    file_extensions = ("npy",)
    params_schema = {
        "path": {"type": "path", "required": True},
        "sig_dims": {"type": "int", "min": 1},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        "sync_offset": {"type": "int"},
        **REMOTE_PARAMS,
    }

    def __init__(self, path: str, sig_dims: int = 2, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, sync_offset: int = 0, **kwargs):
        super().__init__(**kwargs)
        self._path = path
        self._sig_dims = sig_dims if sig_shape is None else len(sig_shape)
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._sync_offset = sync_offset
        self._store = self.store_of(path)

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict | None:
        """``{"path": path}`` for a file (or an object of ``store``) starting with the .npy magic
        ``\\x93NUMPY``, with LiberTEM's ``nav_shape`` and ``sig_shape`` (the last two axes) for 3 or more
        dimensions."""
        try:
            with open_path(path, store) as f:
                magic = f.read(6)
        except (OSError, DataSetException):
            return None
        if magic != b"\x93NUMPY":
            return None
        shape = read_npy_header(path, store)[0]  # a broken header: DataSetException naming it
        if len(shape) < 3:
            return {"path": path}
        return {"path": path, "nav_shape": tuple(shape[:-2]), "sig_shape": tuple(shape[-2:])}

    def _do_initialize(self) -> DataSetMeta:
        check_file(self._path, self._store)
        shape, dtype, fortran, offset = read_npy_header(self._path, self._store)
        if fortran:
            raise DataSetException(f"{self._path}: Fortran-ordered .npy files are not supported")
        if dtype.hasobject:
            raise DataSetException(f"{self._path}: object arrays cannot be read")
        if len(shape) <= self._sig_dims and self._nav_shape is None:
            raise DataSetException(f"{self._path}: array of shape {shape} has no nav axis")
        sig = self._sig_shape or tuple(shape[len(shape) - self._sig_dims:])
        nav = self._nav_shape or tuple(shape[: len(shape) - self._sig_dims])
        total = math.prod(shape)
        frame = math.prod(sig)
        self._file_frames = total // frame
        if total % frame:  # LiberTEM reads the whole frames and cuts off the rest
            self.warn_on_load(f"{self._path}: array of shape {shape} holds {self._file_frames} whole frames of "
                              f"sig_shape {sig}; its last {total % frame} values are not read")
        check_sync_offset(self._path, self._sync_offset, math.prod(nav), self._file_frames)
        if math.prod(nav) + max(self._sync_offset, 0) > self._file_frames and self._sync_offset == 0:
            raise DataSetException(
                f"{self._path}: array of shape {shape} holds {self._file_frames} frames, "
                f"nav_shape {nav} needs {math.prod(nav)}"
            )
        expected = offset + total * np.dtype(dtype).itemsize
        actual = path_size(self._path, self._store)
        if actual < expected:
            raise DataSetException(
                f"{self._path}: file is too short: the header promises {shape} {dtype} "
                f"({expected} bytes), the file has {actual} bytes (truncated?)"
            )
        self._offset = offset
        dtype = np.dtype(dtype)
        self._decoder = NativeDecoder(dtype)
        self._native_dtype = dtype
        self._fileset = FileSet([File(self._path, 0, self._file_frames, offset)], sig, dtype.itemsize * 8,
                                store=self._store)
        return DataSetMeta(shape=Shape(nav + sig, sig_dims=len(sig)), raw_dtype=dtype.newbyteorder("="),
                           sync_offset=self._sync_offset, image_count=self._file_frames)

    def get_cache_key(self):
        import os

        if self._store is not None:
            return ("npy", self._path, self._store.identity(self._path), self.shape.to_tuple())
        st = os.stat(self._path)
        return ("npy", os.path.abspath(self._path), st.st_mtime_ns, st.st_size, self.shape.to_tuple())
