"""Numeric helpers at the path of ``libertem.common.numba`` that UDFs import.

The index helpers are numba-compiled, so UDFs call them from their own
``numba.njit`` code as well as from Python:

>>> import numpy as np
>>> int(numba_ravel_multi_index_single((1, 2, 3), (4, 5, 6)))
45
>>> numba_unravel_index_single(45, (4, 5, 6)).tolist()
[1, 2, 3]
>>> import scipy.sparse as sp
>>> left = np.arange(6.0).reshape(2, 3)
>>> right = sp.csr_matrix(np.array([[1.0, 0], [0, 2], [1, 0]]))
>>> rmatmul(left, right)
array([[2., 2.],
       [8., 8.]])
"""

from __future__ import annotations

from typing import Any, Callable

import numba
import numpy as np
import scipy.sparse as sp

__all__ = [
    "numba_dtypes", "numba_ravel_multi_index_single", "numba_ravel_multi_index_multi",
    "numba_unravel_index_single", "numba_unravel_index_multi", "rmatmul", "cached_njit",
]

#: dtypes numba compiles for.
numba_dtypes = frozenset(np.dtype(t) for t in (
    bool, int, float, np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
    np.float32, np.float64, np.complex64, np.complex128, np.intc, np.intp, np.uintc, np.uintp,
))


def cached_njit(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit`` with the on-disk cache on; used with parentheses: ``@cached_njit()``."""
    kwargs["cache"] = True
    return numba.njit(*args, **kwargs)


@numba.njit(boundscheck=True, nogil=True, cache=True)
def numba_ravel_multi_index_single(multi_index, dims):
    """Flat C-order index of one multi-index (``numpy.ravel_multi_index`` for a single index)."""
    res = 0
    for d in range(len(dims)):
        res = res * dims[d] + multi_index[d]
    return res


@numba.njit(boundscheck=True, nogil=True, cache=True)
def numba_ravel_multi_index_multi(multi_index, dims):
    """Flat C-order indices of ``multi_index`` shaped ``(len(dims), n)``."""
    n = multi_index.shape[1]
    res = np.zeros(n, dtype=np.intp)
    for i in range(n):
        acc = 0
        for d in range(len(dims)):
            acc = acc * dims[d] + multi_index[d, i]
        res[i] = acc
    return res


@numba.njit(boundscheck=True, nogil=True, cache=True)
def numba_unravel_index_single(index, shape):
    """The multi-index of flat C-order ``index`` as an ``intp`` array (``numpy.unravel_index``)."""
    ndim = len(shape)
    result = np.zeros(ndim, dtype=np.intp)
    rem = index
    for d in range(ndim - 1, 0, -1):
        result[d] = rem % shape[d]
        rem = rem // shape[d]
    result[0] = rem
    return result


@numba.njit(boundscheck=True, nogil=True, cache=True)
def numba_unravel_index_multi(indices, shape):
    """Multi-indices ``(len(shape), n)`` of the flat C-order ``indices``."""
    ndim = len(shape)
    n = len(indices)
    result = np.zeros((ndim, n), dtype=np.intp)
    for i in range(n):
        rem = indices[i]
        for d in range(ndim - 1, 0, -1):
            result[d, i] = rem % shape[d]
            rem = rem // shape[d]
        result[0, i] = rem
    return result


def rmatmul(left_dense: np.ndarray, right_sparse: Any) -> np.ndarray:
    """``left_dense @ right_sparse`` as a dense array, for a scipy CSR or CSC ``right_sparse``.

    Computed as ``(right.T @ left.T).T``: scipy multiplies a sparse matrix by
    a dense block without densifying, where ``dense @ sparse`` goes through
    slower generic paths for large tiles.
    """
    if left_dense.ndim != 2:
        raise ValueError(f"left_dense must be 2D, got shape {left_dense.shape}")
    if len(right_sparse.shape) != 2:
        raise ValueError(f"right_sparse must be 2D, got shape {right_sparse.shape}")
    if left_dense.shape[1] != right_sparse.shape[0]:
        raise ValueError(
            f"shape mismatch: left_dense.shape[1] != right_sparse.shape[0] "
            f"({left_dense.shape[1]} != {right_sparse.shape[0]})"
        )
    if not (isinstance(right_sparse, (sp.csr_matrix, sp.csc_matrix, sp.csr_array, sp.csc_array))):
        raise TypeError(f"right_sparse must be a scipy CSR or CSC matrix, got {type(right_sparse).__name__}")
    dtype = np.result_type(left_dense.dtype, right_sparse.dtype)
    product = right_sparse.T @ np.ascontiguousarray(left_dense.T)
    return np.asarray(product, dtype=dtype).T
