"""`ApplyMasksEngine`: the products of tiles (or shifted frames) with a stack of masks.

The one implementation of mask application in raytile. :class:`~raytile.udf.applymasks.ApplyMasksUDF`
and :class:`~raytile.udf.com.CoMUDF` run on it, and so do UDFs ported from
LiberTEM that build on ``libertem.udf.masks.ApplyMasksEngine`` (its
``com.py``): the constructor, :meth:`ApplyMasksEngine.process_tile` and
:meth:`ApplyMasksEngine.process_frame_shifted` are LiberTEM's.

A UDF makes the engine in ``get_task_data`` from a
:class:`~raytile.common.container.MaskContainer` and ``self.meta``; the
engine reads ``meta.sig_slice`` at every call, so it always multiplies with
the masks' part under the current tile (cut once per signal region by the
container, and cached there)::

    def get_task_data(self):
        masks = MaskContainer(self.params.mask_factories, dtype=np.float32)
        return {"engine": ApplyMasksEngine(masks, self.meta)}

    def process_tile(self, tile):
        self.results.intensity[:] += self.forbuf(self.task_data.engine.process_tile(tile),
                                                 self.results.intensity)

Tiles may be dense (numpy, cupy) or sparse (``sparse.COO``/``GCXS``,
scipy and cupyx matrices); masks dense or sparse. Sparse masks are
multiplied as scipy (cupyx on the GPU) matrices, also when the container
holds them as ``sparse.pydata``: the product is the same, and pydata
sparse's JIT compilation would cost seconds in every fresh worker.
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import numpy as np
from sparseconverter import CUPY_BACKENDS

from raytile.common.container import MaskContainer
from raytile.common.math import prod
from raytile.common.numba import rmatmul
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.udf._tiles import dense, flat2d, is_scipy_like
from raytile.udf.integer_tiles import MaskRuns, dot_rows_into, is_integer_tile, mask_runs, mask_spans, sum_runs_into
from raytile.udf.meta import UDFMeta

__all__ = ["ApplyMasksEngine"]

#: Per mask container, per cut of its masks (id of the rows: the rows, then their :func:`mask_runs` where
#: runs pay, else their :func:`mask_spans`), for integer tiles. A worker's partitions share one container
#: (``ApplyMasksUDF`` keeps it in the worker cache) but each makes its own engine: the masks are scanned
#: once a worker, not once a partition (16 rings of 256x256: 1.6 ms; one ring 0.3 ms, which is 1.2 us a
#: frame of a live partition of 256 frames).
_PLANS: weakref.WeakKeyDictionary[MaskContainer, dict[int, tuple[Any, MaskRuns | np.ndarray]]] = \
    weakref.WeakKeyDictionary()


def _sig_part(sl: Slice) -> Slice:
    """The signal dims of ``sl`` as a slice of their own."""
    nd = sl.shape.nav_dims
    sig = sl.shape.to_tuple()[nd:]
    return Slice(sl.origin[nd:], Shape(sig, sig_dims=len(sig)))


class ApplyMasksEngine:
    """Multiplies tiles or single frames with the masks of ``masks`` (``n`` masks).

    Parameters
    ----------
    masks
        The masks; their ``backend`` must be the array library of the tiles
        (numpy, or cupy for the CuPy backends).
    meta
        The UDF's ``self.meta``: the current tile's signal region and the
        array backend are read from it at every call.
    use_torch
        Accepted for LiberTEM's signature; raytile multiplies with numpy,
        scipy or cupy (no PyTorch path).
    dtype
        The dtype products are computed and returned in (default:
        ``np.result_type`` of the tile and the masks). Integer tiles are then
        multiplied as that dtype: dense numpy ones without a converted copy
        (:mod:`raytile.udf.integer_tiles`), others converted first.
    """

    def __init__(self, masks: MaskContainer, meta: UDFMeta, use_torch: bool = False, dtype: Any = None):
        self.masks = masks
        self.meta = meta
        self.use_torch = use_torch
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._pixel_index: np.ndarray | None = None
        self._plans = _PLANS.setdefault(masks, {})

    def _product_dtype(self, tile_dtype: Any) -> np.dtype:
        return self.dtype if self.dtype is not None else np.result_type(tile_dtype, self.masks.dtype)

    # -- the masks -------------------------------------------------------------------------------
    @property
    def _xp(self) -> Any:
        if self.meta.array_backend in CUPY_BACKENDS:
            import cupy  # only on a CuPy backend

            return cupy
        return np

    def _sparse_format(self, rows: bool = False) -> Any:
        """The container's sparse format to multiply with: False (dense) or a scipy format.

        ``rows``: the masks will be indexed by pixel rows (CSR selects rows cheaply).
        """
        fmt = self.masks.use_sparse
        if fmt is False:
            return False
        if rows:
            return "scipy.sparse.csr"
        return fmt if fmt.startswith("scipy.sparse") else "scipy.sparse.csc"

    def masks_for_tile(self) -> Any:
        """The masks under the current tile, ``(pixels of the tile's signal region, n)``."""
        return self.masks.get_for_sig_slice(self.meta.sig_slice, sparse_backend=self._sparse_format(),
                                            transpose=True)

    # -- products --------------------------------------------------------------------------------
    def product(self, flat: Any, masks: Any) -> Any:
        """``flat @ masks`` as a dense array: ``flat`` is ``(frames, pixels)``, ``masks`` ``(pixels, n)``."""
        if is_scipy_like(masks) and not is_scipy_like(flat):
            if isinstance(flat, np.ndarray):
                res = rmatmul(flat, masks)
            else:  # cupy @ cupyx: multiply through the sparse operand as well
                res = (masks.T @ flat.T).T
        else:
            res = flat @ masks
        return dense(res, xp=self._xp)

    def integer_rows(self, flat: Any) -> np.ndarray | None:
        """The masks under the current tile as dense rows ``(n, pixels)`` in the product dtype, if the
        integer kernels (:mod:`raytile.udf.integer_tiles`) multiply ``flat`` (a 2D tile of 8- or 16-bit
        integers, float32 products, dense masks); else None (the tile is converted and multiplied by BLAS
        or scipy). Fused passes over a tile (:mod:`raytile.udf.fused_tiles`) ask the same question."""
        dtype = self._product_dtype(flat.dtype)
        if not (is_integer_tile(flat, dtype) and self._sparse_format() is False):
            return None
        rows: np.ndarray = self.masks.get_for_sig_slice(self.meta.sig_slice, dtype=dtype, sparse_backend=False,
                                                        transpose=False)
        return rows

    def process_tile(self, tile: Any) -> Any:
        """``(frames, n)``: each frame of ``tile`` times each mask, over the tile's signal region."""
        flat = flat2d(tile)
        dtype = self._product_dtype(flat.dtype)
        rows = self.integer_rows(flat)
        if rows is not None:
            # the container's cut of the masks, one per signal region: scanned once, not once a tile, for
            # their runs of one value (virtual detectors: summed exactly, work by non-zero pixels) or, where
            # runs do not pay (soft or scattered masks), their spans for the dense kernel
            hit = self._plans.get(id(rows))
            if hit is None or hit[0] is not rows:
                runs = mask_runs(rows)
                hit = self._plans[id(rows)] = (rows, mask_spans(rows) if runs is None else runs)
            out = np.zeros((flat.shape[0], rows.shape[0]), dtype=dtype)
            if isinstance(hit[1], MaskRuns):
                sum_runs_into(flat, hit[1], out)
            else:
                dot_rows_into(flat, rows, out, spans=hit[1])
            return out
        if flat.dtype != dtype:
            flat = flat.astype(dtype)
        return self.product(flat, self.masks_for_tile())

    def process_frame_shifted(self, frame: Any, shifts: Sequence[int] | np.ndarray) -> Any:
        """``(n,)``: ``frame`` times each mask moved by ``shifts`` (integers, one per signal dim).

        A positive shift moves the mask down (right) relative to the frame:
        frame pixel ``p`` meets mask pixel ``p - shifts``. Pixels where frame
        and moved mask do not overlap count as zero; no overlap at all gives
        zeros.
        """
        xp = self._xp
        sig = tuple(self.meta.dataset_shape.sig.to_tuple())
        offset = tuple(int(s) for s in np.asarray(shifts).reshape(-1))
        if len(offset) != len(sig):
            raise ValueError(f"shifts {offset} must have one entry per signal dim, the signal is {sig}")
        region = _sig_part(self.meta.sig_slice)  # where the frame's pixels lie in the signal
        whole = Slice.from_shape(sig, sig_dims=len(sig))
        seen = region.intersection_with(whole.shift_by(offset))  # frame pixels whose mask pixel exists
        if seen.is_null():
            return xp.zeros(len(self.masks), dtype=self._product_dtype(self.meta.input_dtype))
        pixels = dense(frame, xp=xp).reshape(region.shape.to_tuple())
        values = seen.shift(region).get(pixels).reshape((1, -1))
        dtype = self._product_dtype(values.dtype)
        if values.dtype != dtype:
            values = values.astype(dtype)
        if self._pixel_index is None:
            self._pixel_index = np.arange(prod(sig)).reshape(sig)
        rows = seen.shift_by(tuple(-o for o in offset)).get(self._pixel_index).reshape(-1)
        masks = self.masks.get_for_sig_slice(whole, sparse_backend=self._sparse_format(rows=True), transpose=True)
        return self.product(values, masks[rows if xp is np else xp.asarray(rows)]).reshape(-1)
