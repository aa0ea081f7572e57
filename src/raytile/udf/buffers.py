"""Result buffers a UDF declares, and auxiliary per-frame data passed as a parameter."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from raytile.common.errors import UDFException

__all__ = ["BufferWrapper", "AuxBufferWrapper", "BufferKind", "BufferUse", "BufferLocation"]

BufferKind = Literal["nav", "sig", "single"]
BufferUse = Literal["private", "result_only", None]
BufferLocation = Literal["device", None]


class BufferWrapper:
    """A result buffer: its declaration and, once allocated, its data.

    ``kind`` says what it is indexed by: ``nav`` (one entry per frame),
    ``sig`` (one entry per signal pixel) or ``single`` (one value per
    partition and for the run). ``extra_shape`` is appended to each entry.
    ``use='private'`` buffers are merged like results and available to
    ``merge`` and ``get_results``, but are not returned to the user (as in
    LiberTEM); ``use='result_only'`` buffers are not allocated on workers and
    are filled in ``get_results``.
    """

    def __init__(self, kind: BufferKind, extra_shape: tuple = (), dtype: Any = "float32",
                 where: BufferLocation = None, use: BufferUse = None):
        if kind not in ("nav", "sig", "single"):
            raise UDFException(f"buffer kind must be 'nav', 'sig' or 'single', got {kind!r}")
        if use not in ("private", "result_only", None):
            raise UDFException(f"buffer use must be 'private', 'result_only' or None, got {use!r}")
        if where not in ("device", None):
            raise UDFException(f"buffer where must be 'device' or None, got {where!r}")
        if isinstance(extra_shape, int):
            extra_shape = (extra_shape,)
        self.kind = kind
        self.extra_shape = tuple(int(v) for v in extra_shape)
        self.dtype = np.dtype(dtype)
        self.where = where
        self.use = use
        self.data: Any = None

    def shape_for(self, num_frames: int, sig_shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.kind == "nav":
            return (num_frames,) + self.extra_shape
        if self.kind == "sig":
            return tuple(sig_shape) + self.extra_shape
        return self.extra_shape or (1,)

    def allocate(self, num_frames: int, sig_shape: tuple[int, ...], xp=np) -> None:
        self.data = xp.zeros(self.shape_for(num_frames, sig_shape), dtype=self.dtype)

    @property
    def is_allocated(self) -> bool:
        return self.data is not None

    # -- views into ``data`` for one unit of work ---------------------------
    def view_for_tile(self, nav_start: int, count: int, sig_index: tuple):
        """``nav_start``: tile's first frame relative to the partition."""
        if self.data is None:  # result_only buffers have no data on workers
            return None
        if self.kind == "nav":
            return self.data[nav_start:nav_start + count]
        if self.kind == "sig":
            return self.data[sig_index]
        return self.data

    def view_for_frame(self, nav_idx: int, sig_index: tuple):
        if self.data is None:
            return None
        if self.kind == "nav":
            if self.extra_shape:
                return self.data[nav_idx]
            return self.data[nav_idx:nav_idx + 1]
        if self.kind == "sig":
            return self.data[sig_index]
        return self.data

    def declaration(self) -> "BufferWrapper":
        """A copy of the declaration without data."""
        return BufferWrapper(self.kind, self.extra_shape, self.dtype, self.where, self.use)

    def __repr__(self) -> str:
        return (f"BufferWrapper(kind={self.kind!r}, extra_shape={self.extra_shape}, dtype={self.dtype}, "
                f"use={self.use!r}, allocated={self.is_allocated})")


class AuxBufferWrapper(BufferWrapper):
    """Per-frame auxiliary data handed to a UDF as a parameter (``UDF.aux_data``).

    Holds data for the whole data set (flat nav); a partition's copy holds
    the partition's frames (ROI applied), and views follow the current
    frame/tile like a ``nav`` result buffer.
    """

    def __init__(self, data: np.ndarray, kind: BufferKind = "nav", extra_shape: tuple = (),
                 dtype: Any = "float32"):
        if kind != "nav":
            raise UDFException(f"aux data must have kind 'nav', got {kind!r}")
        super().__init__(kind, extra_shape, dtype)
        data = np.asarray(data, dtype=self.dtype)
        n = data.size // max(1, int(np.prod(self.extra_shape, dtype=np.int64)))
        self.data = data.reshape((n,) + self.extra_shape)

    def for_partition(self, start: int, stop: int, roi: np.ndarray | None) -> "AuxBufferWrapper":
        part = self.data[start:stop]
        if roi is not None:
            part = part[roi[start:stop]]
        new = AuxBufferWrapper.__new__(AuxBufferWrapper)
        BufferWrapper.__init__(new, "nav", self.extra_shape, self.dtype)
        new.data = part
        return new
