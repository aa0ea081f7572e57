"""`TileConverter`: one tile in every array backend a run's UDFs need, each made once.

The execution plan (:mod:`raytile.runtime.execution_plan`) says which
backends a tile is needed in; the converter makes each from the cheapest
source it already holds (``sparseconverter.cheapest_pair``), with direct
routes for the conversions that sparseconverter would compile a numba
kernel for in every fresh worker.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sparseconverter import CUDA, CUPY, D2_BACKENDS, ND_BACKENDS, NUMPY, cheapest_pair, for_backend, get_backend

__all__ = ["TileConverter"]


def _csr_to_gcxs(arr, shape):
    """scipy CSR ``(n, pixels)`` -> ``sparse.GCXS`` of ``shape`` compressed along frames.

    The same three arrays; sparseconverter's route goes through a numba
    kernel that takes seconds to compile in every fresh worker.
    """
    import sparse

    if not arr.has_canonical_format:
        arr = arr.copy()
        arr.sum_duplicates()
    return sparse.GCXS((arr.data, arr.indices, arr.indptr), shape=tuple(shape), compressed_axes=(0,))


def _gcxs_to_csr(arr, shape):
    import scipy.sparse as sp

    if tuple(arr.compressed_axes) != (0,):
        return for_backend(arr, "scipy.sparse.csr_matrix")
    flat = (shape[0], int(np.prod(shape[1:], dtype=np.int64)))
    return sp.csr_matrix((arr.data, arr.indices, arr.indptr), shape=flat)


def _scipy_to_coo(arr, shape):
    """scipy CSR/CSC ``(n, pixels)`` -> ``sparse.COO`` of ``shape`` from its coordinates."""
    import sparse

    csr = arr.format == "csr"
    if not arr.has_canonical_format:
        arr = arr.copy()
        arr.sum_duplicates()
    coo = arr.tocoo()
    coords = np.stack([coo.row, *np.unravel_index(coo.col, tuple(shape[1:]))]).astype(np.intp, copy=False)
    return sparse.COO(coords, coo.data, shape=tuple(shape), has_duplicates=False, sorted=csr)


#: Conversions done here instead of by sparseconverter: (source, target) -> f(arr, tile_shape).
_FAST_CONVERSIONS = {
    ("scipy.sparse.csr_matrix", "sparse.GCXS"): _csr_to_gcxs,
    ("sparse.GCXS", "scipy.sparse.csr_matrix"): _gcxs_to_csr,
    ("scipy.sparse.csr_matrix", "sparse.COO"): _scipy_to_coo,
    ("scipy.sparse.csc_matrix", "sparse.COO"): _scipy_to_coo,
}


class TileConverter:
    """Converts one tile into each backend it is needed in, once per backend.

    The cache starts with the tile as it came (its backend found by
    ``sparseconverter.get_backend``); every further format is made from the
    cached format that is cheapest to convert from. 2D-only formats (scipy,
    cupyx) are ``(frames, prod(sig))``; N-D formats are shaped like the tile.
    ``conversions`` lists the ``(source, target)`` pairs made, for tests and
    tracing. ``to_device`` (optional) replaces the numpy -> cupy copy, e.g.
    with a copy through a pinned staging buffer on a copy stream.
    """

    def __init__(self, data: Any, shape: Sequence[int] | None = None, native_backend: str | None = None,
                 to_device=None):
        backend = get_backend(data) or native_backend or NUMPY
        self._shape = tuple(shape) if shape is not None else tuple(data.shape)
        self._cache: dict[str, Any] = {backend: data}
        self._to_device = to_device
        self.conversions: list[tuple[str, str]] = []

    @property
    def source_backend(self) -> str:
        return next(iter(self._cache))

    def get(self, backend: str) -> Any:
        res = self._cache.get(backend)
        if res is not None:
            return res
        if backend == CUDA:  # "cuda" UDFs get numpy tiles and launch their own kernels
            res = self.get(NUMPY)
            self._cache[CUDA] = res
            return res
        source, _ = cheapest_pair(tuple(self._cache), (backend,))
        data = self._cache[source]
        fast = _FAST_CONVERSIONS.get((source, backend))
        if self._to_device is not None and backend == CUPY and source in (NUMPY, CUDA):
            res = self._to_device(data)
        elif fast is not None:
            res = fast(data, self._shape)
        else:
            res = for_backend(data, backend)
        if backend in ND_BACKENDS:
            res = res.reshape(self._shape)
        elif backend in D2_BACKENDS:
            flat = (self._shape[0], int(np.prod(self._shape[1:], dtype=np.int64)))
            if tuple(res.shape) != flat:
                res = res.reshape(flat)
        self.conversions.append((source, backend))
        self._cache[backend] = res
        return res
