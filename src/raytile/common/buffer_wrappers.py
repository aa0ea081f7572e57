"""Result buffers a UDF declares, and auxiliary per-frame data passed as a parameter.

They live in the shared vocabulary (as LiberTEM's ``libertem.common.buffers``
owns ``BufferWrapper``): the UDF layer (:mod:`raytile.udf.buffers`,
:mod:`raytile.udf.base`) and :mod:`raytile.common.buffers` import them from here.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import numpy as np

from raytile.common.errors import InvalidMaskError, UDFException

__all__ = [
    "BufferWrapper", "AuxBufferWrapper", "PlaceholderBufferWrapper", "NavBufferView", "ArrayWithMask", "BufferKind",
    "BufferUse", "BufferLocation", "expand_nav", "check_mask_shape",
]

#: What a result buffer is indexed by: one entry per frame, per signal pixel, or one for all.
BufferKind = Literal["nav", "sig", "single"]
#: Where a buffer lives while ``process_*`` runs: with the array backend (``'device'``) or in numpy.
BufferLocation = Literal["device", None]
#: ``'private'``: merged but not returned; ``'result_only'``: made in ``get_results``; None: a result.
BufferUse = Literal["private", "result_only", None]


class ArrayWithMask:
    """A result array with an explicit validity mask (see :meth:`UDF.with_mask`).

    As LiberTEM's: the mask must be bool, else :class:`~raytile.common.errors.InvalidMaskError`; so must
    a mask that does not broadcast to the result's shape (checked where the result is shaped, as a nav
    result of an ROI run may be given ROI-compressed or nav-shaped: :func:`check_mask_shape`).
    """

    def __init__(self, data: np.ndarray, mask: np.ndarray | bool):
        arr = np.asarray(mask)
        if arr.dtype != np.dtype(bool):
            raise InvalidMaskError(f"with_mask: the mask must have dtype bool, got {arr.dtype}")
        self.data = data
        self.mask = mask


def check_mask_shape(mask: Any, *shapes: tuple[int, ...]) -> np.ndarray:
    """``mask`` broadcast to the first of ``shapes`` it fits; InvalidMaskError when it fits none."""
    arr = np.asarray(mask)
    for shape in shapes:
        try:
            return np.broadcast_to(arr, shape)
        except ValueError:
            continue
    raise InvalidMaskError(f"with_mask: a mask of shape {arr.shape} does not broadcast to the result's shape "
                           f"{shapes[0]}")


def expand_nav(arr: np.ndarray, nav_shape: tuple[int, ...], roi: np.ndarray | None,
               extra_shape: tuple[int, ...]) -> np.ndarray:
    """Place ROI-compressed nav values ``(n_roi, *extra)`` into a full nav-shaped array.

    Positions outside the ROI are NaN for float and complex results (as in
    LiberTEM), zero (False) for others. Without an ROI the result is a
    reshaped view of ``arr``.

    >>> expand_nav(np.array([1.0, 2.0]), (2, 2), np.array([[True, False], [False, True]]), ()).tolist()
    [[1.0, nan], [nan, 2.0]]
    """
    arr = np.asarray(arr)
    full_shape = tuple(nav_shape) + tuple(extra_shape)
    if roi is None:
        return arr.reshape(full_shape)
    fill = np.nan if arr.dtype.kind in "fc" else 0
    flat_roi = np.asarray(roi, dtype=bool).reshape(-1)
    out = np.full((flat_roi.size,) + tuple(extra_shape), fill, dtype=arr.dtype)
    out[flat_roi] = arr
    return out.reshape(full_shape)


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

    def make_default_mask(self, valid_nav_mask: np.ndarray, dataset_shape: Any,
                          roi: np.ndarray | None = None) -> np.ndarray:
        """The valid mask a result of this buffer has by default (LiberTEM's ``make_default_mask``): for
        ``nav``, ``valid_nav_mask`` (the merged positions, flat and ROI-compressed) over the extra shape;
        for ``sig`` and ``single``, all True. Shaped as the buffer is allocated."""
        frames = int(np.count_nonzero(roi)) if roi is not None else int(dataset_shape.nav.size)
        shape = self.shape_for(frames, tuple(dataset_shape.sig))
        if self.kind != "nav":
            return np.ones(shape, dtype=bool)
        nav = np.asarray(valid_nav_mask, dtype=bool).reshape(-1)
        return np.broadcast_to(nav.reshape(nav.shape + (1,) * len(self.extra_shape)), shape).copy()

    def allocate(self, num_frames: int, sig_shape: tuple[int, ...], xp=np) -> None:
        self.data = xp.zeros(self.shape_for(num_frames, sig_shape), dtype=self.dtype)

    @property
    def is_allocated(self) -> bool:
        return self.data is not None

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The allocated array's shape (the whole buffer, not a view), None before allocation."""
        return None if self.data is None else tuple(self.data.shape)

    @property
    def raw_data(self) -> Any:
        """The array as stored: for ``nav`` buffers flat and ROI-compressed (LiberTEM's ``raw_data``)."""
        return self.data

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


class PlaceholderBufferWrapper(BufferWrapper):
    """A declaration that is never allocated: what ``UDF.buffer(..., use="result_only")`` returns.

    As in LiberTEM, such a result exists only once ``get_results`` computes
    it; its ``data`` stays ``None`` on the workers and on the main node.
    """

    def allocate(self, num_frames: int, sig_shape: tuple[int, ...], xp=np) -> None:
        """Nothing to allocate."""


class NavBufferView:
    """A ``nav`` buffer on the main node as LiberTEM's ``get_buffer`` shows it: ``data`` shaped like the data set.

    ``self.results.get_buffer(name)`` returns this for an allocated ``nav``
    buffer on the main node (in ``merge``, ``get_results``, the main node's
    ``preprocess``), so that ``get_buffer(name).data`` is ``nav_shape +
    extra_shape`` with NaN (float) or 0 outside the ROI, as in LiberTEM;
    ``raw_data`` is the stored, ROI-compressed array and ``buffer`` the
    :class:`BufferWrapper` itself. Without an ROI ``data`` is a view of the
    stored array; with one it is a new array.
    """

    def __init__(self, buffer: BufferWrapper, nav_shape: tuple[int, ...], roi: np.ndarray | None):
        self.buffer = buffer
        self.nav_shape = tuple(nav_shape)
        self.roi = roi

    @property
    def kind(self) -> BufferKind:
        return self.buffer.kind

    @property
    def extra_shape(self) -> tuple[int, ...]:
        return self.buffer.extra_shape

    @property
    def dtype(self) -> np.dtype:
        return self.buffer.dtype

    @property
    def where(self) -> BufferLocation:
        return self.buffer.where

    @property
    def use(self) -> BufferUse:
        return self.buffer.use

    @property
    def raw_data(self) -> Any:
        return self.buffer.data

    @property
    def data(self) -> np.ndarray:
        return expand_nav(self.buffer.data, self.nav_shape, self.roi, self.buffer.extra_shape)

    def __repr__(self) -> str:
        return f"NavBufferView({self.buffer!r}, nav_shape={self.nav_shape})"


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
