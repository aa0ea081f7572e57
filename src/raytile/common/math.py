"""Small integer and array helpers, mirroring ``libertem.common.math``.

Sizes of large data sets overflow 32-bit integers (numpy's default ``int``
on 64-bit Windows), so shape products use Python integers here.

>>> from raytile.common.math import prod, count_nonzero
>>> prod((512, 512, 256, 256))
17179869184
>>> count_nonzero([0, 3, 0, 1])
2
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Union

import numpy as np

__all__ = [
    "ProdAccepted", "prod", "count_nonzero", "flat_nonzero", "make_2D_square", "ndenumerate",
]

_PROD_ACCEPTED = (int, bool, np.bool_, np.signedinteger, np.unsignedinteger)

#: Item types :func:`prod` multiplies (integers and booleans, Python or numpy).
ProdAccepted = Union[int, bool, np.bool_, np.signedinteger, np.unsignedinteger]


def prod(iterable: Iterable[ProdAccepted]) -> int:
    """Product of integers as an unbounded Python ``int``; 1 for an empty iterable.

    Floats and other types raise ``ValueError`` (a size must be integral).

    >>> prod([np.int32(2**20), 2**20])
    1099511627776
    >>> prod(())
    1
    """
    result = 1
    for item in iterable:
        if not isinstance(item, _PROD_ACCEPTED):
            raise ValueError(f"prod() accepts integers and booleans only, got {item!r} ({type(item).__name__})")
        result *= int(item)
    return result


def count_nonzero(array: Any) -> int:
    """Number of non-zero entries as an ``int``; works for dense and sparse arrays.

    >>> import sparse
    >>> count_nonzero(sparse.COO.from_numpy(np.eye(3)))
    3
    """
    try:
        return int(np.count_nonzero(array))
    except (TypeError, ValueError):
        return int(array.astype(bool).sum())


def flat_nonzero(array: Any) -> np.ndarray:
    """Indices of the non-zero entries of ``array`` flattened (C order).

    >>> flat_nonzero(np.array([[0, 1], [1, 0]]))
    array([1, 2])
    """
    return array.flatten().nonzero()[0]


def make_2D_square(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``(n*n,)`` becomes ``(n, n)``; any other shape is returned unchanged.

    >>> make_2D_square((16,)), make_2D_square((15,)), make_2D_square((4, 4))
    ((4, 4), (15,), (4, 4))

    Raises ``ValueError`` for a 1D shape of size zero. (LiberTEM returns the
    side as a float; raytile returns ``int``, equal in value.)
    """
    if len(shape) != 1:
        return shape
    size = prod(shape)
    if size < 1:
        raise ValueError(f"make_2D_square needs a positive size, got shape {shape}")
    side = int(round(size ** 0.5))
    if side * side == size:
        return (side, side)
    return shape


def _sparse_ndenumerate(array: Any) -> Iterator[tuple[tuple[int, ...], Any]]:
    flat = array.flatten()
    for idx in flat_nonzero(flat):
        coords = tuple(int(c) for c in np.unravel_index(int(idx), array.shape))
        yield coords, flat[idx]


def ndenumerate(array: Any) -> Iterator[tuple[tuple[int, ...], Any]]:
    """``numpy.ndenumerate`` for dense arrays; the non-zero entries for sparse ones.

    >>> list(ndenumerate(np.array([[5, 0]])))
    [((0, 0), np.int64(5)), ((0, 1), np.int64(0))]
    """
    try:
        yield from np.ndenumerate(array)
    except RuntimeError:
        yield from _sparse_ndenumerate(array)
