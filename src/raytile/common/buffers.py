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
from raytile.common.math import prod
from raytile.common.slice import Slice

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = [
    "BufferSize", "BufferKind", "BufferLocation", "BufferUse", "reshaped_view", "to_numpy", "bytes_aligned",
    "empty_aligned", "zeros_aligned", "disjoint", "BufferWrapper", "AuxBufferWrapper", "PlaceholderBufferWrapper",
    "ArrayWithMask",
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
