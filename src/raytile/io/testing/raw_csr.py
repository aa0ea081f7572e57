"""Write ``raw_csr`` data sets: a TOML descriptor and the three raw files of a CSR matrix.

The layout LiberTEM documents for its ``raw_csr`` format: ``indptr`` (frames + 1
entries), ``indices`` (flat signal index of each value) and ``data`` as raw
arrays, named with their dtypes in the TOML file's ``[raw_csr]`` section.

>>> toml = write_raw_csr(tmp_path / "scan", frames, nav_shape=(8, 8))   # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

__all__ = ["write_raw_csr"]


def write_raw_csr(prefix: str | os.PathLike, frames: Any, nav_shape: Sequence[int] | None = None,
                  sig_shape: Sequence[int] | None = None, indptr_dtype: Any = "<i8", indices_dtype: Any = "<i4",
                  data_dtype: Any = None) -> str:
    """Write ``frames`` (dense ``(n, *sig)`` or a scipy CSR matrix ``(n, pixels)`` with ``sig_shape``).

    Files: ``{prefix}.toml``, ``{prefix}_indptr.raw``, ``{prefix}_indices.raw``,
    ``{prefix}_data.raw``. Returns the TOML path.
    """
    import scipy.sparse as sp

    if sp.issparse(frames):
        csr = sp.csr_matrix(frames)
        if sig_shape is None:
            raise ValueError("sig_shape is needed with a sparse matrix")
        sig = tuple(int(v) for v in sig_shape)
    else:
        dense = np.asarray(frames)
        sig = tuple(int(v) for v in (sig_shape or dense.shape[-2:]))
        csr = sp.csr_matrix(dense.reshape(-1, int(np.prod(sig))))
    n = csr.shape[0]
    nav = tuple(int(v) for v in (nav_shape or (n,)))
    prefix = os.fspath(prefix)
    dtype = np.dtype(data_dtype or csr.dtype)
    names = {}
    for name, arr, dt in (("indptr", csr.indptr, indptr_dtype), ("indices", csr.indices, indices_dtype),
                          ("data", csr.data, dtype)):
        path = f"{prefix}_{name}.raw"
        np.asarray(arr).astype(np.dtype(dt)).tofile(path)
        names[name] = (os.path.basename(path), np.dtype(dt).str)
    lines = [
        "[params]",
        'filetype = "raw_csr"',
        f"nav_shape = {list(nav)}",
        f"sig_shape = {list(sig)}",
        "",
        "[raw_csr]",
    ]
    for name in ("indptr", "indices", "data"):
        lines += [f'{name}_file = "{names[name][0]}"', f'{name}_dtype = "{names[name][1]}"']
    toml = prefix + ".toml"
    with open(toml, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return toml
