"""Helpers that let built-in UDFs treat every array backend alike.

Tiles arrive as ``(n, *sig)`` arrays (numpy, cupy, ``sparse.COO``,
``sparse.GCXS``) or, for the scipy/cupyx backends, as 2D matrices
``(n, prod(sig))``. These helpers give a 2D ``(n, pixels)`` view of either
kind and bring reductions back as dense arrays of a requested shape.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from raytile.common.csr import pydata_to_csr
from raytile.udf.base import (
    BACKEND_CUPY, BACKEND_CUPY_SCIPY_CSC, BACKEND_CUPY_SCIPY_CSR, BACKEND_NUMPY, BACKEND_SCIPY_CSC,
    BACKEND_SCIPY_CSR, BACKEND_SPARSE_COO, BACKEND_SPARSE_GCXS, UDF,
)

#: Backends of the built-ins written with these helpers, in order of preference: LiberTEM's
#: ``ApplyMasksUDF`` list on the CPU (the scipy.sparse matrices, ``coo_matrix`` included).
TILE_BACKENDS = (BACKEND_NUMPY, BACKEND_SPARSE_COO, BACKEND_SPARSE_GCXS, BACKEND_SCIPY_CSR,
                 BACKEND_SCIPY_CSC, UDF.BACKEND_SCIPY_COO, BACKEND_CUPY)
#: The scipy.sparse sparse arrays (``coo_array``, ``csr_array``, ``csc_array``), which LiberTEM's
#: ``BACKEND_ALL`` (its ``SumUDF``, ``SumSigUDF`` and ``CoMUDF``) lists besides the matrices.
SCIPY_ARRAY_BACKENDS = (UDF.BACKEND_SCIPY_CSR_ARRAY, UDF.BACKEND_SCIPY_CSC_ARRAY, UDF.BACKEND_SCIPY_COO_ARRAY)
#: Plain sums work on the cupyx sparse matrices too.
SUM_BACKENDS = TILE_BACKENDS + SCIPY_ARRAY_BACKENDS + (BACKEND_CUPY_SCIPY_CSR, BACKEND_CUPY_SCIPY_CSC)


def is_scipy_like(tile: Any) -> bool:
    """True for scipy.sparse / cupyx.scipy.sparse matrices (always 2D)."""
    mod = type(tile).__module__
    return mod.startswith("scipy.sparse") or mod.startswith("cupyx.scipy.sparse")


def is_pydata_sparse(tile: Any) -> bool:
    return type(tile).__module__.startswith("sparse")


def flat2d(tile: Any) -> Any:
    """``tile`` as a 2D ``(frames, pixels)`` array or matrix.

    Dense tiles keep their backend (a reshaped view). pydata ``sparse`` tiles
    become a scipy CSR matrix built from their coordinates: that is cheap and
    avoids the JIT compilation that pydata sparse reductions trigger on first
    use in every worker process.
    """
    if is_scipy_like(tile):
        return tile
    if is_pydata_sparse(tile):
        return pydata_to_csr(tile)
    n = tile.shape[0]
    pixels = math.prod(tile.shape[1:])
    if tuple(tile.shape) == (n, pixels):
        return tile
    return tile.reshape((n, pixels))


def dense(arr: Any, shape: tuple[int, ...] | None = None, xp=np) -> Any:
    """A dense ``xp`` array of ``arr`` (np.matrix, sparse, scipy or cupy), reshaped to ``shape``."""
    if is_scipy_like(arr) or is_pydata_sparse(arr):
        arr = arr.toarray() if hasattr(arr, "toarray") else arr.todense()
    if isinstance(arr, np.matrix):
        arr = np.asarray(arr)
    if xp is np and not isinstance(arr, np.ndarray):
        get = getattr(arr, "get", None)  # cupy -> numpy
        arr = get() if get is not None else np.asarray(arr)
    else:
        arr = xp.asarray(arr)
    if shape is not None:
        arr = arr.reshape(shape)
    return arr


def sparse_entries(tile: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stored entries of a sparse 2D-able tile as ``(rows, flat_pixel_cols, values)`` (numpy)."""
    if is_scipy_like(tile):
        coo = tile.tocoo()
        return np.asarray(coo.row), np.asarray(coo.col), np.asarray(coo.data)
    coo = flat2d(tile).tocoo()
    return np.asarray(coo.row), np.asarray(coo.col), np.asarray(coo.data)

