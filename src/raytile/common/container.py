"""`MaskContainer`: a stack of masks from factory functions, sliced per tile and cached.

Mirrors ``libertem.common.container.MaskContainer``: the same constructor,
``get`` / ``get_for_sig_slice`` / ``get_for_idx``, ``dtype``,
``use_sparse``, ``computed_masks`` and ``len()``. Masks are computed on
first use (in the worker, not when the UDF is built), and each signal region
of a tiling scheme is cut from the stack once per combination of dtype,
sparse format, orientation and array backend.

>>> import numpy as np
>>> from raytile.common import Shape, Slice
>>> mc = MaskContainer([lambda: np.ones((4, 4)), lambda: np.eye(4)], dtype=np.float32)
>>> len(mc), mc.use_sparse
(2, False)
>>> tile = Slice((0, 0, 2), Shape((3, 4, 2), sig_dims=2))   # 3 frames, columns 2..3 of the signal
>>> m = mc.get(tile)                                           # (pixels, masks), ready for tile @ m
>>> m.shape, m.dtype, float(m[:, 1].sum())
((8, 2), dtype('float32'), 2.0)

Sparse masks stay sparse (``use_sparse=None`` chooses sparse when every
factory returns a sparse mask): ``scipy.sparse`` CSR by default, or any of
``'scipy.sparse.csc'``, ``'sparse.pydata'``, ``'sparse.pydata.GCXS'``.
Slicing a sparse stack goes through scipy (column selection of a CSC
matrix), not through pydata sparse indexing, whose JIT compilation costs
seconds in every fresh worker process.

``to_sparse`` is :func:`raytile.common.sparse.to_sparse`, importable from
here as from ``libertem.common.container``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Literal, Sequence, Union

import cloudpickle
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import sparse
from sparseconverter import CPU_BACKENDS, CUDA, CUPY_BACKENDS, NUMPY, for_backend

from raytile.common.math import prod
from raytile.common.slice import Slice
from raytile.common.sparse import is_sparse, to_dense, to_sparse
from raytile.common.tiling import TilingScheme

__all__ = ["MaskContainer", "FactoryT", "SparseSupportedT", "to_sparse"]

log = logging.getLogger(__name__)

#: A mask factory: no arguments, returns one mask or (a single factory) a stack of masks.
FactoryT = Callable[[], Any]
#: Sparse formats the container hands out.
SparseSupportedT = Literal["sparse.pydata", "sparse.pydata.GCXS", "scipy.sparse", "scipy.sparse.csc",
                           "scipy.sparse.csr"]
_SPARSE_FORMATS = ("sparse.pydata", "sparse.pydata.GCXS", "scipy.sparse", "scipy.sparse.csc", "scipy.sparse.csr")
#: Pickled factories larger than this draw a warning: they travel with every task.
FACTORY_SIZE_WARNING = 2**20

_SigKey = tuple[tuple[int, ...], tuple[int, ...]]


def _as_coo(m: Any) -> sparse.COO:
    """Any mask as ``sparse.COO`` without pydata sparse's JIT-compiled paths where possible."""
    if isinstance(m, sparse.COO):
        return m
    if sp.issparse(m):
        return sparse.COO.from_scipy_sparse(m.tocoo())
    if isinstance(m, sparse.SparseArray):
        return m.tocoo() if hasattr(m, "tocoo") else sparse.COO(m)
    return sparse.COO.from_numpy(to_dense(m))


def _to_scipy(m: Any, fmt: str, dtype: npt.DTypeLike, backend: str) -> Any:
    if backend in CPU_BACKENDS or backend == CUDA:
        lib: Any = sp
    elif backend in CUPY_BACKENDS:
        import cupyx.scipy.sparse  # only on a CuPy backend

        lib = cupyx.scipy.sparse
    else:
        raise ValueError(f"backend {backend!r} is not supported for sparse_backend {fmt!r}")
    host = sp.csc_matrix(m, dtype=dtype) if fmt == "scipy.sparse.csc" else sp.csr_matrix(m, dtype=dtype)
    host.sum_duplicates()
    if lib is sp:
        return host
    return lib.csc_matrix(host) if fmt == "scipy.sparse.csc" else lib.csr_matrix(host)


def _build_sparse(m: Any, dtype: npt.DTypeLike, sparse_backend: str, backend: str) -> Any:
    """A 2D scipy matrix ``m`` in the requested sparse format, dtype and backend."""
    if sparse_backend.startswith("scipy.sparse"):
        return _to_scipy(m, sparse_backend, dtype, backend)
    if sparse_backend in ("sparse.pydata", "sparse.pydata.GCXS") and backend == NUMPY:
        coo = sparse.COO.from_scipy_sparse(sp.coo_matrix(m, dtype=dtype))
        return coo if sparse_backend == "sparse.pydata" else sparse.GCXS(coo)
    raise ValueError(
        f"sparse_backend {sparse_backend!r} is not implemented for backend {backend!r}: CPU backends support "
        "'sparse.pydata', 'sparse.pydata.GCXS', 'scipy.sparse', 'scipy.sparse.csc' and 'scipy.sparse.csr'; "
        "CUDA backends 'scipy.sparse', 'scipy.sparse.csc' and 'scipy.sparse.csr'"
    )


class MaskContainer:
    """Masks made by factory functions, stacked, sliced per signal region and cached.

    Parameters
    ----------
    mask_factories
        One callable returning a stack ``(n, *sig)``, or a sequence of
        callables each returning one ``sig``-shaped mask. Masks may be numpy
        arrays, ``sparse`` arrays or scipy.sparse matrices.
    dtype
        dtype the masks are handed out in (default: the stack's dtype).
    use_sparse
        ``None``: sparse if every mask is sparse (``default_sparse``), else
        dense; ``True``: ``default_sparse``; ``False``: dense; or one of
        ``'scipy.sparse'``, ``'scipy.sparse.csc'``, ``'scipy.sparse.csr'``,
        ``'sparse.pydata'``, ``'sparse.pydata.GCXS'``.
    count
        Number of masks, so that ``len()`` needs no mask computation.
    backend
        Array backend of the masks handed out (default ``'numpy'``).
    default_sparse
        The sparse format ``use_sparse=None/True`` stands for.

    Masks are computed on first access to ``computed_masks``, ``use_sparse``
    (when not settled by the arguments), ``dtype`` (when not given),
    ``len()`` (when ``count`` is not given and one factory makes the stack)
    or any ``get``.
    """

    def __init__(
        self,
        mask_factories: Union[FactoryT, Sequence[FactoryT]],
        dtype: npt.DTypeLike | None = None,
        use_sparse: bool | SparseSupportedT | None = None,
        count: int | None = None,
        backend: str | None = None,
        default_sparse: SparseSupportedT = "scipy.sparse",
    ):
        self.mask_factories = mask_factories
        self._length = count
        self._dtype = dtype
        self.backend: str = NUMPY if backend is None else backend
        self._default_sparse: SparseSupportedT = default_sparse
        self._computed_masks: Any = None
        self._flat: Any = None  # (n, pixels): ndarray or scipy CSC, built from _computed_masks
        self._get_masks_for_slice: dict[tuple[Any, ...], dict[_SigKey, Any]] = {}
        self._columns: dict[_SigKey, np.ndarray | None] = {}
        self._use_sparse: Literal[False] | SparseSupportedT | None
        if use_sparse is True:
            self._use_sparse = default_sparse
        elif use_sparse is False:
            self._use_sparse = False
        elif isinstance(use_sparse, str) and use_sparse.lower().startswith(("scipy.sparse", "sparse.pydata")):
            self._use_sparse = use_sparse
        elif use_sparse is None:
            # pydata sparse has no CuPy implementation: densify on CuPy backends
            if default_sparse.startswith("sparse.pydata") and self.backend in CUPY_BACKENDS:
                self._use_sparse = False
            else:
                self._use_sparse = None  # settled when the masks are computed
        else:
            raise ValueError(f"use_sparse not an allowed value: {use_sparse!r}")
        self.validate_mask_functions()

    # -- pickling and checks ----------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_get_masks_for_slice"] = {}  # slices are cheap to recut, costly to ship
        state["_columns"] = {}
        state["_flat"] = None
        return state

    def validate_mask_functions(self) -> None:
        """Warn about factories that pickle to more than 1 MiB (they travel with every task)."""
        fns = [self.mask_factories] if callable(self.mask_factories) else list(self.mask_factories)
        for fn in fns:
            size = len(cloudpickle.dumps(fn))
            if size > FACTORY_SIZE_WARNING:
                log.warning("mask factory %r pickles to %d bytes (> %d): may be inefficient",
                            fn, size, FACTORY_SIZE_WARNING)

    # -- sizes and kinds --------------------------------------------------------
    def __len__(self) -> int:
        if self._length is not None:
            return self._length
        if not callable(self.mask_factories):
            return len(self.mask_factories)
        return len(self.computed_masks)

    @property
    def dtype(self) -> Any:
        """The dtype given to the constructor, else the computed stack's dtype."""
        if self._dtype is None:
            return self.computed_masks.dtype
        return self._dtype

    @property
    def use_sparse(self) -> Literal[False] | SparseSupportedT:
        """``False`` or the sparse format; may compute the masks to find out."""
        if self._use_sparse is None:
            self._use_sparse = self._default_sparse if is_sparse(self.computed_masks) else False
        return self._use_sparse

    @property
    def computed_masks(self) -> Any:
        """The whole stack ``(n, *sig)``: a numpy array or a ``sparse.COO``."""
        if self._computed_masks is None:
            self._computed_masks = self._compute_masks()
        return self._computed_masks

    def _compute_masks(self) -> Any:
        if callable(self.mask_factories):
            parts = [self.mask_factories()]
        else:
            parts = []
            for factory in self.mask_factories:
                m = factory()
                if sp.issparse(m):  # scipy.sparse is 2D only: make it N-D first
                    m = _as_coo(m)
                parts.append(m.reshape((1,) + tuple(m.shape)))
        use_sparse = self._use_sparse
        if use_sparse is None:
            use_sparse = self._default_sparse if all(is_sparse(m) for m in parts) else False
        if use_sparse is not False:
            return sparse.concatenate([_as_coo(m) for m in parts])
        return np.concatenate([to_dense(m) for m in parts])

    def _flat_masks(self) -> Any:
        """The stack as ``(n, pixels)``: dense numpy, or a scipy CSC matrix for sparse stacks."""
        if self._flat is None:
            masks = self.computed_masks
            n = masks.shape[0]
            if is_sparse(masks):
                coo = _as_coo(masks)
                sig = tuple(coo.shape[1:])
                cols = np.ravel_multi_index(tuple(coo.coords[1:]), sig) if sig else np.zeros(coo.nnz, np.intp)
                self._flat = sp.csc_matrix((coo.data, (coo.coords[0], cols)), shape=(n, prod(sig)))
            else:
                self._flat = masks
        return self._flat

    # -- slicing ----------------------------------------------------------------
    def get_for_idx(self, scheme: TilingScheme, idx: int, *args: Any, **kwargs: Any) -> Any:
        """Masks for signal region ``idx`` of ``scheme`` (see :meth:`get`)."""
        return self._get(scheme[idx], *args, **kwargs)

    def get_for_sig_slice(self, sig_slice: Slice, *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`get`, for a slice that has signal dims only (``self.meta.sig_slice``)."""
        return self._get(sig_slice, *args, **kwargs)

    def get(self, key: Slice, dtype: npt.DTypeLike | None = None, sparse_backend: Any = None,
            transpose: bool = True, backend: str | None = None) -> Any:
        """The masks for the signal region of ``key`` (a tile's or partition's Slice).

        Returns a 2D array ``(pixels of the region, n)`` (``transpose=True``,
        for ``flat_tile @ masks``) or ``(n, pixels)``, dense in ``backend`` or
        in the sparse format ``sparse_backend`` (default: :attr:`use_sparse`),
        converted to ``dtype`` (default: :attr:`dtype`).
        """
        if not isinstance(key, Slice):
            raise TypeError(f"MaskContainer.get() needs a Slice (e.g. self.meta.slice), got {type(key).__name__}")
        return self._get(key, dtype, sparse_backend, transpose, backend)

    def _get(self, slice_: Slice, dtype: npt.DTypeLike | None = None, sparse_backend: Any = None,
             transpose: bool = True, backend: str | None = None) -> Any:
        return self.get_masks_for_slice(slice_, dtype=dtype, sparse_backend=sparse_backend, transpose=transpose,
                                        backend=backend)

    def get_masks_for_slice(self, slice_: Slice, dtype: npt.DTypeLike | None = None, sparse_backend: Any = None,
                            transpose: bool = True, backend: str | None = None) -> Any:
        """The masks for the signal part of ``slice_``, cut once and cached."""
        if dtype is None:
            dtype = self.dtype
        if sparse_backend is None:
            sparse_backend = self.use_sparse
        if backend is None:
            backend = self.backend
        key = (np.dtype(dtype), sparse_backend, bool(transpose), backend)
        cache = self._get_masks_for_slice.setdefault(key, {})
        nd = slice_.shape.nav_dims
        sig_key: _SigKey = (slice_.origin[nd:], slice_.shape.to_tuple()[nd:])
        hit = cache.get(sig_key)
        if hit is None:
            hit = cache[sig_key] = self._cut(slice_, np.dtype(dtype), sparse_backend, bool(transpose), backend)
        return hit

    def _columns_for(self, slice_: Slice, sig_key: _SigKey) -> np.ndarray | None:
        """Flat pixel indices of the signal region, or None when it is the whole signal."""
        if sig_key not in self._columns:
            sig_shape = tuple(self.computed_masks.shape[1:])
            if sig_key == ((0,) * len(sig_shape), sig_shape):
                self._columns[sig_key] = None
            else:
                pixels = np.arange(prod(sig_shape)).reshape(sig_shape)
                self._columns[sig_key] = slice_.get(pixels, sig_only=True).reshape(-1)
        return self._columns[sig_key]

    def _cut(self, slice_: Slice, dtype: np.dtype, sparse_backend: Any, transpose: bool, backend: str) -> Any:
        masks = self.computed_masks
        n = masks.shape[0]
        nd = slice_.shape.nav_dims
        sig_key: _SigKey = (slice_.origin[nd:], slice_.shape.to_tuple()[nd:])
        if is_sparse(masks):
            cols = self._columns_for(slice_, sig_key)
            flat = self._flat_masks()
            m: Any = flat if cols is None else flat[:, cols]
        else:
            m = slice_.get(masks, sig_only=True).reshape((n, -1))
        if transpose:
            m = m.T
        if sparse_backend is False:
            if sp.issparse(m):
                m = m.toarray()
            return for_backend(m, backend).astype(dtype)
        if sparse_backend not in _SPARSE_FORMATS:
            raise ValueError(f"sparse_backend must be False or one of {_SPARSE_FORMATS}, got {sparse_backend!r}")
        return _build_sparse(m, dtype, sparse_backend, backend)
