"""Buffer helpers UDFs import from ``libertem.common.buffers``, at the mirrored path.

>>> import numpy as np
>>> from raytile.common.buffers import reshaped_view
>>> a = np.arange(6)
>>> v = reshaped_view(a, (2, 3))
>>> v[1, 0] = 99
>>> int(a[3])
99

The buffer classes ``BufferWrapper``, ``AuxBufferWrapper``,
``PlaceholderBufferWrapper`` and ``ArrayWithMask`` and the type aliases of a
buffer declaration (``BufferKind``, ``BufferLocation``, ``BufferUse``) are
defined in :mod:`raytile.common.buffer_wrappers` and importable from here
(and from :mod:`raytile.udf.buffers`, the UDF layer's path).
"""

from __future__ import annotations

import math
import mmap
from typing import TYPE_CHECKING, Any, Iterable, Union

import numpy as np

from raytile.common.buffer_wrappers import (
    ArrayWithMask, AuxBufferWrapper, BufferKind, BufferLocation, BufferUse, BufferWrapper, PlaceholderBufferWrapper,
)
from raytile.common.errors import InvalidMaskError
from raytile.common.math import prod
from raytile.common.slice import Slice

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = [
    "BufferSize", "BufferKind", "BufferLocation", "BufferUse", "reshaped_view", "to_numpy", "bytes_aligned",
    "empty_aligned", "zeros_aligned", "disjoint", "BufferWrapper", "AuxBufferWrapper", "PlaceholderBufferWrapper",
    "ArrayWithMask", "InvalidMaskError", "get_inner_slice", "get_bbox", "get_bbox_slice",
]

#: A buffer size: a number of items or a shape.
BufferSize = Union[int, tuple[int, ...]]

_BLOCK = 4096


def reshaped_view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` reshaped to ``shape`` as a view, never a copy.

    Raises ``AttributeError`` (as LiberTEM does) when the memory layout of
    ``a`` allows no such view.

    >>> reshaped_view(np.zeros((4, 4))[:, :2], (8,))
    Traceback (most recent call last):
    ...
    AttributeError: cannot reshape an array of shape (4, 2) to (8,) without copying
    """
    res = a.view()
    try:
        return np.reshape(res, shape, copy=False)
    except ValueError:
        raise AttributeError(
            f"cannot reshape an array of shape {tuple(a.shape)} to {tuple(shape)} without copying"
        ) from None


def to_numpy(a: Any) -> np.ndarray:
    """``a`` as a numpy array: numpy arrays unchanged, CuPy arrays copied to the host.

    Anything else raises ``TypeError``.
    """
    if isinstance(a, np.ndarray):
        return a
    if type(a).__module__.startswith("cupy"):
        import cupy  # only when a CuPy array is at hand

        if isinstance(a, cupy.ndarray):
            return cupy.asnumpy(a)
    raise TypeError(f"cannot convert {type(a).__name__} to a numpy array here")


def _alloc_aligned(size: int) -> mmap.mmap:
    """Anonymous shared memory of at least ``size`` bytes, page aligned."""
    return mmap.mmap(-1, max(1, math.ceil(size / _BLOCK)) * _BLOCK)


def bytes_aligned(size: int) -> memoryview:
    """``size`` bytes of page-aligned memory."""
    return memoryview(_alloc_aligned(size))[:size]


def empty_aligned(size: BufferSize, dtype: DTypeLike) -> np.ndarray:
    """An uninitialised page-aligned array (its memory comes from an anonymous mmap).

    >>> empty_aligned((2, 3), np.float32).ctypes.data % 4096
    0
    """
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    n = prod(shape)
    dt = np.dtype(dtype)
    buf = _alloc_aligned(dt.itemsize * n)
    return np.frombuffer(buf, dtype=dt)[:n].reshape(shape)


def zeros_aligned(size: BufferSize, dtype: DTypeLike) -> np.ndarray:
    """Like :func:`empty_aligned`, filled with zeros (object and empty arrays: ``np.zeros``).

    >>> zeros_aligned(3, np.int64)
    array([0, 0, 0])
    """
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    if np.dtype(dtype) == np.dtype(object) or prod(shape) == 0:
        return np.zeros(shape, dtype=dtype)
    res = empty_aligned(shape, dtype)
    res[...] = 0
    return res


def disjoint(sl: Slice, slices: Iterable[Slice]) -> bool:
    """True when ``sl`` overlaps none of ``slices``.

    >>> from raytile.common import Shape
    >>> a = Slice((0, 0), Shape((4, 4), 2))
    >>> disjoint(a, [Slice((4, 0), Shape((4, 4), 2))]), disjoint(a, [Slice((3, 3), Shape((4, 4), 2))])
    (True, False)
    """
    return all(sl.intersection_with(other).is_null() for other in slices)


def get_inner_slice(arr: np.ndarray, axis: int = 0) -> tuple[slice, ...]:
    """The slice of ``arr`` along ``axis`` over the first run of indices where every value on the other axes
    is non-zero (``slice(None)`` on those axes), as LiberTEM's; ``slice(n, 1)`` (empty) when there is none."""
    others = tuple(d for d in range(arr.ndim) if d != axis)
    full = np.all(arr != 0, axis=others)
    hits = np.flatnonzero(full)
    if hits.size == 0:
        lo, hi = arr.shape[axis], 1
    else:
        lo = int(hits[0])
        gaps = np.flatnonzero(~full[lo:])
        hi = lo + int(gaps[0]) if gaps.size else full.shape[0]
    return tuple(slice(lo, hi) if d == axis else slice(None) for d in range(arr.ndim))


def get_bbox(arr: np.ndarray) -> tuple[int, ...]:
    """The bounding box of the non-zero values of ``arr``: ``(min0, max0, min1, max1, ...)``, inclusive,
    as LiberTEM's (in 2D, values under 1e-8 in magnitude count as zero)."""
    nonzero = np.abs(arr) >= 1e-8 if arr.ndim == 2 else arr != 0
    out: list[int] = []
    for axis in range(arr.ndim):
        hits = np.flatnonzero(np.any(nonzero, axis=tuple(d for d in range(arr.ndim) if d != axis)))
        out.extend((int(hits[0]), int(hits[-1])) if hits.size else (arr.shape[axis], 0))
    return tuple(out)


def get_bbox_slice(arr: np.ndarray) -> tuple[slice, ...]:
    """:func:`get_bbox` as one slice per axis."""
    box = get_bbox(arr)
    return tuple(slice(box[i], box[i + 1] + 1) for i in range(0, len(box), 2))
