"""The ``raw`` format: binary files of frames of one dtype.

One file or many (a list, or a glob pattern; files in sorted order), each
optionally starting with ``file_header_bytes`` and with
``frame_header_bytes``/``frame_footer_bytes`` around every frame. Read
through :class:`~raytile.io.fileset.FilePartition` and an IO backend
(``io_backend="mmap"|"buffered"|"direct"``).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.io.dataset import DataSetMeta
from raytile.io.decoders import NativeDecoder
from raytile.io.fileset import (REMOTE_PARAMS, File, FileDataSet, FileSet, check_sync_offset, exact_frame_stride,
                                expand_paths)
from raytile.io.store import ObjectStore, check_path_file
from raytile.io.params import INT64_MAX
from raytile.common.shape import Shape

__all__ = ["RawFileDataSet", "check_file"]


def check_file(path: str, store: ObjectStore | None = None) -> int:
    """The size of ``path``, a regular file (or an object of ``store``); DataSetException naming it otherwise."""
    return check_path_file(path, store)


def _deprecated(owner: str, old: str, old_value: Any, new: str, new_value: Any) -> Any:
    """``new_value``, or ``old_value`` given under LiberTEM's deprecated name ``old`` (with its FutureWarning)."""
    if old_value is None:
        return new_value
    warnings.warn(f"{old} argument is deprecated. please specify {new} instead", FutureWarning, stacklevel=4)
    if new_value is not None:
        raise ConfigValidationError(f"{owner}: give {new} or {old}, not both")
    return old_value


class RawFileDataSet(FileDataSet):
    """Read frames from headerless (or fixed-header) binary files.

    Parameters: ``path`` (a file, a glob pattern or a list of files, read in
    that order), ``nav_shape``, ``sig_shape``, ``dtype`` (``">u2"`` etc. for
    big-endian data), and optionally ``sync_offset`` (frames to skip at the
    start; negative values insert blank frames), ``file_header_bytes`` (at the
    start of every file), ``frame_header_bytes``/``frame_footer_bytes``
    (around every frame), ``io_backend``; ``path`` may be a URL of an object
    store with ``storage_options`` (see docs/cloud.md). LiberTEM's deprecated ``scan_size``,
    ``detector_size`` (for ``nav_shape``, ``sig_shape``) and ``enable_direct``
    (``io_backend="direct"``) are taken with LiberTEM's ``FutureWarning``.

    A last file that ends in part of a frame is read as LiberTEM reads it: its
    whole frames, with a :class:`~raytile.common.errors.DataSetWarning` naming
    the bytes left out.
    """

    format_name = "raw"
    #: Whether the last file may end in part of a frame (cut off with a warning, as LiberTEM's raw does).
    partial_last_frame_ok = True
    params_schema = {
        "path": {"type": "paths", "required": True},
        "nav_shape": {"type": "shape", "required": True},
        "sig_shape": {"type": "shape", "required": True},
        "scan_size": {"type": "shape", "deprecated_for": "nav_shape"},
        "detector_size": {"type": "shape", "deprecated_for": "sig_shape"},
        "crop_detector_to": {"type": "shape", "deprecated_for": "sig_shape"},
        "detector_size_raw": {"type": "shape"},
        "enable_direct": {"type": "bool"},
        "dtype": {"type": "dtype", "required": True},
        "sync_offset": {"type": "int"},
        "file_header_bytes": {"type": "int", "min": 0},
        "frame_header_bytes": {"type": "int", "min": 0},
        "frame_footer_bytes": {"type": "int", "min": 0},
        **REMOTE_PARAMS,
    }

    def __init__(self, path: str | list[str], dtype: np.dtype | None = None,
                 scan_size: tuple[int, ...] | None = None, detector_size: tuple[int, ...] | None = None,
                 enable_direct: bool = False, detector_size_raw: tuple[int, ...] | None = None,
                 crop_detector_to: tuple[int, ...] | None = None, *, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, sync_offset: int = 0,
                 file_header_bytes: int = 0, frame_header_bytes: int = 0, frame_footer_bytes: int = 0, **kwargs):
        # (the positional order is LiberTEM's: ``ctx.load("raw", path, np.float32, nav_shape=...)``)
        owner = self.format_name
        if crop_detector_to is not None:  # LiberTEM's oldest names for sig_shape, with its FutureWarning
            warnings.warn("crop_detector_to and detector_size_raw are deprecated; please specify sig_shape "
                          "instead", FutureWarning, stacklevel=3)
            if detector_size is not None:
                raise ConfigValidationError(f"{owner}: give detector_size or crop_detector_to, not both")
            if detector_size_raw is not None and tuple(detector_size_raw) != tuple(crop_detector_to):
                raise ConfigValidationError(
                    f"{owner}: detector_size_raw {tuple(detector_size_raw)} differs from crop_detector_to "
                    f"{tuple(crop_detector_to)}: raw data sets do not crop frames (give sig_shape)")
            detector_size = crop_detector_to
        if enable_direct:
            if kwargs.get("io_backend") is not None:
                raise ConfigValidationError(f"{owner}: give io_backend or enable_direct, not both")
            warnings.warn("enable_direct is deprecated; pass `io_backend=DirectBackend()` instead",
                          FutureWarning, stacklevel=3)
            kwargs["io_backend"] = "direct"
        nav_shape = _deprecated(owner, "scan_size", scan_size, "nav_shape", nav_shape)
        sig_shape = _deprecated(owner, "detector_size", detector_size, "sig_shape", sig_shape)
        for name, value in (("nav_shape", nav_shape), ("sig_shape", sig_shape), ("dtype", dtype)):
            if value is None:
                raise ConfigValidationError(f"{owner}: parameter {name!r} is required, got None")
        assert nav_shape is not None and sig_shape is not None and dtype is not None
        super().__init__(**kwargs)
        self._paths_in = path
        self._path = path[0] if isinstance(path, list) else path
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._dtype = dtype
        self._sync_offset = sync_offset
        self._file_header = file_header_bytes
        self._frame_header = frame_header_bytes
        self._frame_footer = frame_footer_bytes
        self._store = self.store_of(path)
        self._check_byte_sizes()

    def _check_byte_sizes(self) -> None:
        """A frame, and all frames of ``nav_shape``, must fit int64 byte offsets (the read code's integers)."""
        owner = self.format_name
        stride = exact_frame_stride(self._bpp(), math.prod(self._sig_shape), self._frame_header, self._frame_footer)
        if stride > INT64_MAX:
            raise ConfigValidationError(
                f"{owner}: parameter 'sig_shape' {self._sig_shape} at {self._bpp()} bits per pixel "
                f"(+{self._frame_header}/{self._frame_footer} frame header/footer bytes) makes frames of {stride} "
                f"bytes, more than 64-bit file offsets reach"
            )
        total = self._file_header + math.prod(self._nav_shape) * stride
        if total > INT64_MAX:
            raise ConfigValidationError(
                f"{owner}: parameter 'nav_shape' {self._nav_shape} of {stride}-byte frames makes {total} bytes, "
                f"more than 64-bit file offsets reach"
            )

    def _bpp(self) -> int:
        return self._dtype.itemsize * 8

    def _make_fileset(self, files: list[File]) -> FileSet:
        return FileSet(files, self._sig_shape, self._bpp(), self._frame_header, self._frame_footer,
                       store=self._store)

    def _scan_files(self) -> list[File]:
        """One :class:`File` per path with as many frames as it holds (DataSetException naming a bad file)."""
        paths = expand_paths(self._paths_in, self._store)
        probe = self._make_fileset([File(paths[0], 0, 1, self._file_header)])
        stride = probe.frame_stride
        files, start = [], 0
        for i, p in enumerate(paths):
            size = check_file(p, self._store) - self._file_header
            if size < 0:
                raise DataSetException(f"{p}: file of {size + self._file_header} bytes is shorter than its "
                                       f"{self._file_header} byte header")
            if size % stride and self.partial_last_frame_ok and i == len(paths) - 1 and size >= stride:
                # LiberTEM reads the whole frames and cuts off the rest ("extra data at the end")
                self.warn_on_load(
                    f"{p}: file size {size + self._file_header} is not a multiple of the frame size {stride} "
                    f"(sig_shape {self._sig_shape}, dtype {self._dtype}); its last {size % stride} bytes are not "
                    "read. Check sig_shape and dtype")
            elif size % stride:
                # LiberTEM's words where not even one frame fits
                lt_words = (f"; sig_shape must be less than size: {size // self._dtype.itemsize} pixels"
                            if size < stride else "")
                raise DataSetException(
                    f"{p}: file size {size + self._file_header} is not a multiple of the frame size {stride} "
                    f"(sig_shape {self._sig_shape}, dtype {self._dtype}, {self._file_header} bytes file header, "
                    f"{self._frame_header}/{self._frame_footer} bytes frame header/footer); check sig_shape and dtype"
                    f"{lt_words}"
                )
            files.append(File(p, start, start + size // stride, self._file_header))
            start += size // stride
        return files

    def _do_initialize(self) -> DataSetMeta:
        files = self._scan_files()
        self._fileset = self._make_fileset(files)
        self._path = files[0].path if len(files) == 1 else f"{files[0].path} (+{len(files) - 1} files)"
        self._file_frames = self._fileset.num_frames
        check_sync_offset(self._path, self._sync_offset, math.prod(self._nav_shape), self._file_frames)
        needed = math.prod(self._nav_shape) + max(self._sync_offset, 0)
        if self._file_frames < needed and self._sync_offset == 0:
            raise DataSetException(
                f"{self._path}: file holds {self._file_frames} frames of {self._sig_shape} {self._dtype}, "
                f"but nav_shape {self._nav_shape} needs {needed}; the file is too short or the shape is wrong"
            )
        if self._file_frames > needed and self._sync_offset == 0:
            stride = self._fileset.frame_stride
            size = sum(check_file(f.path, self._store) for f in files)
            ratio = self._file_frames / needed
            hint = (f"; it holds exactly {ratio:.0f}x what nav_shape reads: if frames are {ratio:.0f}x larger than "
                    f"sig_shape {self._sig_shape} says, the result is garbage"
                    if ratio == int(ratio) else "")
            self.warn_on_load(
                f"{self._path}: {size} bytes hold {self._file_frames} frames of sig_shape {self._sig_shape} "
                f"{self._dtype} ({stride} bytes each); nav_shape {self._nav_shape} reads only the first {needed} "
                f"({needed * stride} bytes), {size - needed * stride} bytes are not read{hint}. Check nav_shape, "
                f"sig_shape and dtype")
        shape = Shape(self._nav_shape + self._sig_shape, sig_dims=len(self._sig_shape))
        self._decoder = NativeDecoder(self._dtype)
        self._native_dtype = self._dtype
        return DataSetMeta(shape=shape, raw_dtype=self._dtype.newbyteorder("="), sync_offset=self._sync_offset,
                           image_count=self._file_frames)

    def get_cache_key(self):
        return ("raw", self.fileset.cache_key(), self.shape.to_tuple(), self._dtype.str, self._sync_offset)
