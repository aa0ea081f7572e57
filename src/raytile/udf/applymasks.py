"""`ApplyMasksUDF`: dot products of every frame with a stack of masks."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence, Union

import numpy as np

from raytile.common.errors import UDFException
from raytile.udf._tiles import TILE_BACKENDS, dense, flat2d, is_pydata_sparse, is_scipy_like
from raytile.udf.base import UDF

__all__ = ["ApplyMasksUDF", "MaskFactory"]

MaskFactory = Callable[[], Any]


def _is_sparse(m: Any) -> bool:
    return is_scipy_like(m) or is_pydata_sparse(m)


class ApplyMasksUDF(UDF):
    """Apply masks to every frame: ``intensity[nav, i] = sum(frame * mask_i)``.

    Parameters
    ----------
    mask_factories
        A callable returning one sig-shaped mask or a stack ``(n, *sig)``
        of masks, or a list of callables each returning one sig-shaped mask.
        Masks may be dense numpy arrays, ``sparse.COO``/``GCXS`` or scipy
        sparse matrices (2D, shaped ``sig`` or ``(n, prod(sig))``).
    use_sparse
        ``None``: sparse if any factory returns a sparse mask; ``True``/``False``
        forces a scipy CSC (sparse) or a dense numpy mask stack.
    mask_count
        Number of masks when one callable returns a stack (found by calling
        it if left out).
    mask_dtype
        dtype the masks are converted to (default: the factories' dtype).
    shifts
        Optional per-frame ``(dy, dx)`` integer shifts of the masks, as
        ``ApplyMasksUDF.aux_data(shifts, kind="nav", extra_shape=(2,))``;
        pixels shifted out of the signal are ignored.

    Result: ``intensity`` (nav, ``extra_shape=(n_masks,)``).

    Example::

        >>> from raytile.udf import ApplyMasksUDF, masks
        >>> udf = ApplyMasksUDF(mask_factories=[
        ...     lambda: masks.disk(8, 8, 3, (16, 16)),
        ...     lambda: masks.ring(8, 8, 3, 7, (16, 16)),
        ... ])
        >>> ctx.run_udf(dataset=ds, udf=udf)["intensity"].data.shape  # nav + (2,)
    """

    def __init__(self, mask_factories: Union[MaskFactory, Sequence[MaskFactory]], use_sparse: bool | None = None,
                 mask_count: int | None = None, mask_dtype: Any = None, shifts: Any = None, **kwargs: Any):
        super().__init__(mask_factories=mask_factories, use_sparse=use_sparse, mask_count=mask_count,
                         mask_dtype=mask_dtype, shifts=shifts, **kwargs)

    # -- masks ---------------------------------------------------------------
    def _raw_masks(self) -> list[Any]:
        """Every factory's output, each a list of single masks (flattened to (1 or n, pixels))."""
        factories = self.params.mask_factories
        sig = tuple(self.meta.dataset_shape.sig.to_tuple())
        pixels = math.prod(sig)
        if callable(factories):
            factories = [factories]
        out = []
        for f in factories:
            if not callable(f):
                raise UDFException(f"{type(self).__name__}: mask_factories must be callables, got {f!r}")
            m = f()
            shape = tuple(m.shape)
            if shape == sig:
                n = 1
            elif shape[-len(sig):] == sig and len(shape) == len(sig) + 1:
                n = shape[0]
            elif len(shape) == 2 and shape[1] == pixels:
                n = shape[0]
            else:
                raise UDFException(
                    f"{type(self).__name__}: mask factory {getattr(f, '__name__', f)!r} returned shape "
                    f"{shape}, expected the signal shape {sig} or a stack (n, *{sig})"
                )
            if is_scipy_like(m):
                m = m.reshape((n, pixels)) if tuple(m.shape) != (n, pixels) else m
            else:
                m = m.reshape((n, pixels))
            out.append(m)
        return out

    def _mask_info(self) -> tuple[int, np.dtype]:
        count = self.params.mask_count
        dtype = self.params.mask_dtype
        if count is not None and dtype is not None:
            return int(count), np.dtype(dtype)
        raw = self._raw_masks()
        n = sum(m.shape[0] for m in raw)
        if count is not None and int(count) != n:
            raise UDFException(f"{type(self).__name__}: mask_count={count} but the factories make {n} masks")
        dt = np.dtype(dtype) if dtype is not None else np.result_type(*[m.dtype for m in raw])
        return n, dt

    def _mask_matrix(self):
        """All masks as a ``(pixels, n_masks)`` matrix: dense numpy or scipy CSC."""
        import scipy.sparse as sp

        raw = self._raw_masks()
        _, dtype = self._mask_info()
        use_sparse = self.params.use_sparse
        if use_sparse is None:
            use_sparse = any(_is_sparse(m) for m in raw)
        if use_sparse:
            parts = []
            for m in raw:
                if is_pydata_sparse(m):
                    m = m.tocsr() if hasattr(m, "tocsr") else sp.csr_matrix(m.to_scipy_sparse())
                elif not is_scipy_like(m):
                    m = sp.csr_matrix(np.asarray(m))
                parts.append(sp.csr_matrix(m))
            mat = sp.vstack(parts).T.tocsc().astype(dtype)
        else:
            mat = np.concatenate([dense(m) for m in raw], axis=0).T.astype(dtype)
            mat = np.ascontiguousarray(mat)
        return mat

    # -- UDF interface -------------------------------------------------------
    def get_backends(self) -> tuple[str, ...]:
        return TILE_BACKENDS

    def get_result_buffers(self):
        n, mask_dtype = self._mask_info()
        dtype = np.result_type(self.meta.input_dtype, mask_dtype)
        return {"intensity": self.buffer(kind="nav", extra_shape=(n,), dtype=dtype, where="device")}

    def get_task_data(self) -> dict[str, Any]:
        sig = tuple(self.meta.dataset_shape.sig.to_tuple())
        return {"masks": self._mask_matrix(), "pixel_index": np.arange(math.prod(sig)).reshape(sig)}

    def _masks_for_tile(self):
        """Rows of the mask matrix for the current tile's signal slice (cached per scheme index)."""
        cache = self.__dict__.setdefault("_tile_mask_cache", {})
        idx = self.meta.tiling_scheme_idx
        key = (id(self.task_data.masks), idx)
        m = cache.get(key)
        if m is None:
            masks = self.task_data.masks
            sig_slice = self.meta.sig_slice
            if len(self.meta.tiling_scheme) == 1:
                m = masks
            else:
                rows = self.task_data.pixel_index[sig_slice.get()].reshape(-1)
                m = masks[rows]
            if self.xp is not np and not _is_sparse(m):
                m = self.xp.asarray(m)
            cache[key] = m
        return m

    def _shifted_rows(self, frame_rows: np.ndarray, dy: int, dx: int) -> np.ndarray:
        """For each tile pixel, the mask pixel it sees under shift (dy, dx), or -1 if outside."""
        sig = self.meta.dataset_shape.sig.to_tuple()
        ys, xs = np.unravel_index(frame_rows, sig)
        ys, xs = ys - dy, xs - dx
        inside = (ys >= 0) & (ys < sig[0]) & (xs >= 0) & (xs < sig[1])
        out = np.full(frame_rows.shape, -1)
        out[inside] = np.ravel_multi_index((ys[inside], xs[inside]), sig)
        return out

    def process_tile(self, tile) -> None:
        flat = flat2d(tile)
        out = self.results.intensity
        if self.params.shifts is not None:
            self._process_shifted(flat, out)
            return
        masks = self._masks_for_tile()
        if _is_sparse(masks) and not is_scipy_like(flat):
            res = (masks.T @ flat.T).T  # scipy @ dense: ndarray
        else:
            res = flat @ masks
        out += dense(res, out.shape, xp=self.xp).astype(out.dtype, copy=False)

    def _process_shifted(self, flat, out) -> None:
        if len(self.meta.dataset_shape.sig) != 2:
            raise UDFException(f"{type(self).__name__}: shifts need a 2D signal")
        masks = self.task_data.masks
        rows = self.task_data.pixel_index[self.meta.sig_slice.get()].reshape(-1)
        shifts = np.asarray(self.params.shifts).reshape(-1, 2).astype(np.int64)
        for i in range(flat.shape[0]):
            src_rows = self._shifted_rows(rows, int(shifts[i, 0]), int(shifts[i, 1]))
            ok = src_rows >= 0
            frame = dense(flat[i], (-1,))
            m = masks[src_rows[ok]]
            v = frame[ok] @ m if not _is_sparse(m) else (m.T @ frame[ok])
            out[i] += dense(v, out.shape[1:], xp=self.xp).astype(out.dtype, copy=False)
