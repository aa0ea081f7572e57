"""pydata ``sparse`` tiles as scipy CSR matrices: the one conversion both the I/O layer (sparse data
sets) and the UDF layer (tiles handed to UDFs) use."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["pydata_to_csr"]


def pydata_to_csr(tile: Any) -> sp.csr_matrix:
    """A ``sparse.COO``/``GCXS`` tile ``(n, *sig)`` as a scipy CSR matrix ``(n, prod(sig))``.

    >>> import sparse
    >>> pydata_to_csr(sparse.COO.from_numpy(np.eye(3).reshape(3, 1, 3))).toarray().tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    coo = tile if hasattr(tile, "coords") else tile.tocoo()
    shape = tuple(coo.shape)
    n, pixels = shape[0], math.prod(shape[1:])
    coords = np.asarray(coo.coords)
    cols = coords[1] if len(shape) == 2 else np.ravel_multi_index(tuple(coords[1:]), shape[1:])
    return sp.csr_matrix((np.asarray(coo.data), (coords[0], cols)), shape=(n, pixels))
