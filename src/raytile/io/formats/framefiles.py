"""Detector files whose frames lie at a fixed stride after a header: the shared part of their readers.

EMPAD, MRC, BLO, DM, SEQ, SER and TVIPS files all hold frames of one numpy
dtype at a fixed byte stride (a frame, optionally with header/footer bytes
around it) after a file header whose length the file itself states. A
format reads its header in :meth:`FrameFileDataSet._read_layout` and
returns a :class:`FrameLayout`; this base checks the user's ``nav_shape``,
``sig_shape`` and ``sync_offset`` against it (LiberTEM 0.16's parameter
names and defaults; as raytile's ``raw``, and unlike LiberTEM, a nav shape
needing more frames than the file holds is an error unless a
``sync_offset`` asks for blank frames) and reads the frames through
:class:`~raytile.io.fileset.FileSet` and the IO backends (mmap, buffered,
direct; "straight" zero-copy reads where no conversion is needed). The
headers are parsed with ``struct``/numpy, so nothing is compiled: a fresh
worker reads its first tile without numba.

Example::

    class MyFormat(FrameFileDataSet):
        format_name = "my"

        def _read_layout(self) -> FrameLayout:
            header = parse(self._path)
            return FrameLayout(files=[File(self._path, 0, header.count, header.size)],
                               sig_shape=(header.h, header.w), dtype=np.dtype("<u2"),
                               nav_shape=(header.count,))
"""

from __future__ import annotations

import math
import os
import warnings
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.io.dataset import DataSetMeta
from raytile.io.decoders import NativeDecoder
from raytile.io.fileset import FILE_FRAME_PARAMS, File, FileDataSet, FileSet, check_sync_offset
from raytile.io.store import ObjectStore, check_path_file, is_url

__all__ = ["FrameLayout", "FrameFileDataSet", "read_exact", "square_nav"]


@dataclass
class FrameLayout:
    """Where a file's frames are: files in frame order, frame geometry and dtype, the nav shape it states.

    ``files`` carry the global frame range of each file and the bytes before
    its first frame (``file_header``); ``frame_header``/``frame_footer`` are
    bytes around every frame; ``dtype`` is the stored dtype (with its byte
    order); ``nav_shape`` is the shape the file's metadata gives, used when the
    user gives none; ``info`` adds lines to ``get_diagnostics``.
    """

    files: list[File]
    sig_shape: tuple[int, ...]
    dtype: np.dtype
    nav_shape: tuple[int, ...]
    frame_header: int = 0
    frame_footer: int = 0
    info: dict[str, str] = field(default_factory=dict)

    @property
    def num_frames(self) -> int:
        return self.files[-1].end_idx if self.files else 0


def read_exact(path: str, offset: int, size: int, what: str, store: ObjectStore | None = None) -> bytes:
    """``size`` bytes of ``path`` (a file, or an object of ``store``: one ranged GET) at ``offset``, or a
    DataSetException naming the path and ``what`` was read."""
    if store is not None and is_url(path):
        available = max(0, store.size(path) - offset)  # a corrupt header may state any size
        n = min(size, available)
        data = store.get_range(path, offset, offset + n) if n > 0 else b""
        if len(data) != size:
            raise DataSetException(f"{path}: object too short for its {what} ({len(data)} of {size} bytes at "
                                   f"offset {offset}); truncated, or not a file of this format?")
        return data
    try:
        with open(path, "rb") as f:
            # a corrupt header may state any size: never ask for more than the file has
            available = max(0, os.fstat(f.fileno()).st_size - offset)
            f.seek(offset)
            data = f.read(min(size, available))
    except (OSError, OverflowError, ValueError) as e:
        raise DataSetException(f"{path}: cannot read the {what}: {e}") from None
    if len(data) != size:
        raise DataSetException(f"{path}: file too short for its {what} ({len(data)} of {size} bytes at offset "
                               f"{offset}); truncated, or not a file of this format?")
    return data


def square_nav(count: int) -> tuple[int, ...]:
    """``(n, n)`` when ``count`` is a square ``n * n``, else ``(count,)`` (LiberTEM's ``make_2D_square``)."""
    side = math.isqrt(count)
    return (side, side) if side * side == count else (count,)


class FrameFileDataSet(FileDataSet):
    """Base of formats whose header gives frames at a fixed stride (see the module docstring).

    Parameters, as in LiberTEM: ``path``, ``nav_shape`` (default: from the
    file), ``sig_shape`` (default: from the file; any shape of as many
    pixels), ``sync_offset`` (frames to skip at the start, negative inserts
    blank frames), plus the file formats' ``io_backend``, ``num_partitions``.
    """

    params_schema = FILE_FRAME_PARAMS

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, sync_offset: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self._path = path
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._sync_offset = sync_offset
        self._layout: FrameLayout | None = None
        self._store = self.store_of(path)

    @abstractmethod
    def _read_layout(self) -> FrameLayout:
        """Read the file's header: where the frames are (DataSetException naming the path if it is not one)."""

    def _check_path(self, path: str) -> int:
        if self._store is not None:
            return check_path_file(path, self._store)
        if not os.path.exists(path):
            raise DataSetException(f"{self.format_name}: file not found: {path}")
        if not os.path.isfile(path):
            raise DataSetException(f"{self.format_name}: not a regular file: {path}")
        return os.path.getsize(path)

    def _check_inputs(self) -> None:
        """Before reading headers: the given file exists (DataSetException naming it)."""
        self._check_path(self._path)

    def _do_initialize(self) -> DataSetMeta:
        self._check_inputs()
        layout = self._layout = self._read_layout()
        where = layout.files[0].path if len(layout.files) == 1 else (
            f"{layout.files[0].path} (+{len(layout.files) - 1} files)")
        if layout.num_frames == 0:
            raise DataSetException(f"{where}: the file holds no frames (empty or truncated?)")
        sig = self._sig_shape or layout.sig_shape
        if math.prod(sig) != math.prod(layout.sig_shape):
            raise DataSetException(
                f"{where}: sig_shape {tuple(sig)} has {math.prod(sig)} pixels, the file's frames of "
                f"{tuple(layout.sig_shape)} have {math.prod(layout.sig_shape)}"
            )
        nav = self._nav_shape or layout.nav_shape
        n_nav, n_file = math.prod(nav), layout.num_frames
        check_sync_offset(where, self._sync_offset, n_nav, n_file)
        if self._sync_offset == 0 and n_file < n_nav:
            raise DataSetException(
                f"{where}: the file{'s hold' if len(layout.files) > 1 else ' holds'} {n_file} frames of {tuple(layout.sig_shape)}, but nav_shape {tuple(nav)} "
                f"needs {n_nav}; the file is too short or nav_shape is wrong (a sync_offset pads with blank frames)"
            )
        if self._sync_offset == 0 and n_file > n_nav:
            warnings.warn(f"{where} holds {n_file} frames, nav_shape {tuple(nav)} reads only the first {n_nav}",
                          stacklevel=2)
        dtype = np.dtype(layout.dtype)
        self._fileset = FileSet(layout.files, tuple(sig), dtype.itemsize * 8, layout.frame_header,
                                layout.frame_footer, store=self._store)
        self._decoder = NativeDecoder(dtype)
        self._native_dtype = dtype
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)),
                           raw_dtype=dtype.newbyteorder("="), sync_offset=self._sync_offset, image_count=n_file)

    @classmethod
    def _probe(cls, path: str, extensions: tuple[str, ...]) -> tuple["FrameFileDataSet", FrameLayout] | None:
        """For ``_detect_params``: the data set of ``path`` and its layout, or None when ``path`` does not
        end with one of ``extensions`` (lower case) or its header is not this format's."""
        if not str(path).lower().endswith(extensions):
            return None
        try:
            ds = cls(path=path)
            return ds, ds._read_layout()
        except (DataSetException, OSError):
            return None

    def get_diagnostics(self) -> list[dict[str, Any]]:
        diag = super().get_diagnostics()
        if self._layout is not None:
            diag += [{"name": k, "value": v} for k, v in self._layout.info.items()]
        return diag
