"""Conversions between dense and sparse arrays, mirroring ``libertem.common.sparse``.

>>> import numpy as np
>>> from raytile.common.sparse import to_sparse, to_dense, is_sparse
>>> s = to_sparse(np.eye(3))
>>> is_sparse(s), type(s).__name__, to_dense(s).sum()
(True, 'COO', np.float64(3.0))
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp
import sparse
import sparseconverter

__all__ = ["to_dense", "to_sparse", "sparse_to_coo", "is_sparse", "assert_sparse"]


def to_dense(a: Any) -> np.ndarray:
    """``a`` (numpy, pydata sparse, scipy.sparse, cupy...) as a numpy array."""
    if sparseconverter.get_backend(a) is None:
        return np.array(a)
    return sparseconverter.for_backend(a, sparseconverter.NUMPY)


def to_sparse(a: Any, shape: Sequence[int] | None = None) -> sparse.COO:
    """``a`` as a ``sparse.COO`` array.

    ``a`` may also be a tuple/list of ``((y, x, ...), value)`` entries with one
    common truth value, or one coordinate ``(y, x, ...)`` of ints (value
    ``True``): the result is then a bool array of ``shape`` that is ``value``
    at those coordinates and ``not value`` elsewhere (ROIs given sparsely).

    >>> to_sparse([((0, 1), True), ((1, 0), True)], shape=(2, 2)).todense()
    array([[False,  True],
           [ True, False]])
    """
    if isinstance(a, (tuple, list)):
        if shape is None:
            raise ValueError("to_sparse of a list of coordinates needs shape")
        items: Sequence[Any] = a
        if all(isinstance(item, int) for item in items):
            items = ((tuple(items), True),)
        values = {bool(item[-1]) for item in items}
        if len(values) != 1:
            raise ValueError(f"cannot cast coordinates with more than one truth value {values}")
        value = values.pop()
        return sparse.COO.from_iter(items, shape=tuple(shape), fill_value=not value, dtype=bool)
    if isinstance(a, sparse.COO):
        return a
    if sp.issparse(a):
        # directly, not through sparseconverter: its scipy -> pydata path first probes
        # pydata sparse's GCXS with numba-compiled code, seconds in every fresh process
        return sparse.COO.from_scipy_sparse(a.tocoo())
    return sparseconverter.for_backend(a, sparseconverter.SPARSE_COO)


def sparse_to_coo(a: Any, shape: Sequence[int] | None = None) -> Any:
    """``None`` and numpy arrays unchanged, anything else through :func:`to_sparse`."""
    if a is None or isinstance(a, np.ndarray):
        return a
    return to_sparse(a, shape=shape)


def is_sparse(a: Any) -> bool:
    """True for pydata ``sparse`` arrays and scipy.sparse matrices/arrays."""
    return isinstance(a, sparse.SparseArray) or sp.issparse(a)


def assert_sparse(a: Any) -> sparse.SparseArray:
    """``a`` itself; raises ``AssertionError`` unless it is sparse."""
    assert is_sparse(a), f"expected a sparse array, got {type(a).__name__}"
    return a
