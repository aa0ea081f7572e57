"""`LogsumUDF`: sum over frames of the log of each background-subtracted frame."""

from __future__ import annotations

import numpy as np

from raytile.common.udf import WHOLE_FRAMES
from raytile.udf._tiles import flat2d, is_pydata_sparse
from raytile.udf.base import UDF
from raytile.udf.integer_tiles import PRODUCT_FRAMES, is_integer_tile, multiply_frames_into, split_exponents_into

__all__ = ["LogsumUDF", "run_logsum"]

#: Frames a product takes before its powers of two are split off: a multiple of four below PRODUCT_FRAMES,
#: so that the kernel's calls (tiles split at this boundary) take whole groups of four frames.
_FLUSH = PRODUCT_FRAMES - PRODUCT_FRAMES % 4
#: Frames a tile of LogsumUDF holds at most: two products' worth (two kernel calls a tile).
_TILE_FRAMES = 2 * _FLUSH
#: The most bytes a tile of LogsumUDF holds: four times the usual 4 MiB, so that 120 frames of 256x256 uint16 fit.
_TILE_BYTES = 16 * 2**20


class _Products:
    """A partition's running per-pixel product of ``frame - frame.min() + 1``, as ``values * 2**exponents``.

    ``frames``: frames multiplied into ``values`` since its exponents were last split off (at most
    ``_FLUSH``); ``held``: whether it holds any frame of this partition; ``one_min``: whether the last
    tile's frames shared one minimum (the kernel then tries its one-pass path on the next).
    """

    def __init__(self) -> None:
        self.values: np.ndarray | None = None
        self.exponents: np.ndarray | None = None
        self.frames = 0
        self.held = False
        self.one_min = True


class LogsumUDF(UDF):
    """``logsum`` (sig): the sum over all frames of ``log(frame - frame.min() + 1)``.

    Useful as a contrast-rich overview of diffraction data whose intensity
    spans orders of magnitude. Each frame's minimum is its own, so tiles are
    whole frames; the UDF takes a tile of them a call (``process_tile`` with
    the ``whole_frames`` tiling preference; LiberTEM's works frame by frame).

    Example::

        >>> res = ctx.run_udf(dataset=ds, udf=LogsumUDF())
        >>> res["logsum"].data.shape == ds.shape.sig.to_tuple()
        True
    """

    def __init__(self) -> None:
        super().__init__()  # no parameters: an unknown keyword is a TypeError, as in LiberTEM

    def get_backends(self) -> tuple[str, ...]:
        # LiberTEM's: every backend but the 2D sparse matrices (scipy.sparse, cupyx)
        return (self.BACKEND_NUMPY, self.BACKEND_CUPY, self.BACKEND_SPARSE_COO, self.BACKEND_SPARSE_GCXS)

    def get_preferred_input_dtype(self) -> np.dtype:
        # the data as it is: 8- and 16-bit frames are multiplied into a float64 product per pixel, one
        # log for up to 63 frames (no float copy); others are converted to the result's dtype frame by frame
        return self.USE_NATIVE_DTYPE

    def get_task_data(self) -> dict:
        return {"products": _Products()}

    def get_result_buffers(self):
        dtype = np.result_type(self.meta.input_dtype, np.float32)
        return {"logsum": self.buffer(kind="sig", dtype=dtype, where="device")}

    def get_tiling_preferences(self) -> dict:
        # whole frames, two products' worth (_FLUSH frames a kernel call; 256x256 uint16 measured 20.6
        # against 23.6 us/frame with the default 4 MiB tiles of 32 frames, which split products across calls),
        # in at most _TILE_BYTES (a call per frame cost as much as the products). Two products a tile rather
        # than one: the per-tile work paid half as often (inline, 16.1-17.0 against 16.7-17.9 us CPU a frame)
        return {"depth": _TILE_FRAMES, "total_size": _TILE_BYTES, WHOLE_FRAMES: True}

    def process_tile(self, tile) -> None:
        xp = self.xp
        out = self.results.logsum
        if is_pydata_sparse(tile):
            self._add_sparse(tile)
            return
        flat = tile.reshape((tile.shape[0], -1))
        if is_integer_tile(flat, out.dtype) and out.flags.c_contiguous:
            # log(a) + log(b) = log(a * b): the frames' terms multiplied, one log per pixel and partition
            # (measured 2-2.5x less time a frame than the float32 log below, 256x256 uint16); frames that
            # share one minimum in one pass (12.4 against 15.7 us/frame from the page cache), tried while
            # the tiles before shared one
            products = self.task_data.products
            if products.values is None or products.exponents is None:
                products.values = np.empty(flat.shape[1], np.float64)
                products.exponents = np.zeros(flat.shape[1], np.int64)
            start = 0
            while start < flat.shape[0]:
                take = min(flat.shape[0] - start, _FLUSH - products.frames)
                products.one_min = multiply_frames_into(flat[start:start + take], products.values,
                                                        fresh=not products.held, one_min=products.one_min)
                products.held = True
                products.frames += take
                start += take
                if products.frames == _FLUSH:
                    # the product's powers of two taken out (exact; 23 us against 93 for a log a flush,
                    # 65536 pixels), so that it takes another _FLUSH frames: one log per partition
                    split_exponents_into(products.values, products.exponents)
                    products.frames = 0
            return
        values = flat.astype(out.dtype, copy=False)  # (+ 1 would overflow integers at their maximum)
        terms = xp.log(values - values.min(axis=1, keepdims=True) + 1)
        out += terms.sum(axis=0).reshape(out.shape)

    def _add_sparse(self, tile) -> None:
        """A ``sparse.COO``/``GCXS`` tile's terms, added without making it dense.

        A frame's unstored pixels are zeros, each adding ``log(1 - min)``; the stored ones add
        ``log(v - min + 1)``. So every pixel gets the sum of the frames' ``log(1 - min)``, and each
        stored entry the difference between its term and that one (in float64).
        """
        out = self.results.logsum
        csr = flat2d(tile).tocsr()
        frames, pixels = csr.shape
        stored = np.diff(csr.indptr)
        rows = np.repeat(np.arange(frames), stored)
        values = np.asarray(csr.data, dtype=np.float64)
        minima = np.where(stored < pixels, 0.0, np.inf)  # an unstored pixel is a zero
        np.minimum.at(minima, rows, values)
        zero_terms = np.log1p(-minima)  # log(0 - min + 1)
        terms = np.bincount(csr.indices, weights=np.log1p(values - minima[rows]) - zero_terms[rows],
                            minlength=pixels)
        terms += zero_terms.sum()
        out += terms.reshape(out.shape).astype(out.dtype, copy=False)

    def _add_products(self) -> None:
        products = self.task_data.products
        if products.held and products.values is not None and products.exponents is not None:
            out = self.results.logsum
            logs = np.log(products.values)
            logs += products.exponents * np.log(2.0)
            out += logs.reshape(out.shape).astype(out.dtype, copy=False)
            products.exponents[:] = 0
            products.frames = 0
            products.held = False

    def postprocess(self) -> None:
        self._add_products()  # the frames still in the product, at the end of the partition

    def merge(self, dest, src) -> None:
        dest.logsum[:] += src.logsum


def run_logsum(ctx, dataset, roi=None):
    """Run :class:`LogsumUDF` on ``dataset`` (LiberTEM's ``run_logsum``): the result of ``ctx.run_udf``.

    The sum of log-scaled frames shows regions that are a little brighter in many frames beside
    ones that are very bright in a few, which the log of the sum hides.
    """
    return ctx.run_udf(dataset=dataset, udf=LogsumUDF(), roi=roi)
