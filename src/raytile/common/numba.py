"""Numeric helpers at the path of ``libertem.common.numba`` that UDFs import.

>>> import numpy as np, scipy.sparse as sp
>>> left = np.arange(6.0).reshape(2, 3)
>>> right = sp.csr_matrix(np.array([[1.0, 0], [0, 2], [1, 0]]))
>>> rmatmul(left, right)
array([[2., 2.],
       [8., 8.]])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["rmatmul"]


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
