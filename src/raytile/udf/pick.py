"""`PickUDF`: copy the frames selected by an ROI."""

from __future__ import annotations

from raytile.udf._tiles import TILE_BACKENDS, dense
from raytile.udf.base import UDF

__all__ = ["PickUDF"]


class PickUDF(UDF):
    """Pick whole frames: ``intensity`` holds every frame in the ROI, in the data's dtype.

    Meant for a small ROI; without one it copies the whole data set into
    memory. ``res["intensity"].raw_data`` is ``(frames in ROI, *sig)`` in nav
    order; ``.data`` places them in the full nav shape (zeros elsewhere).

    Example::

        >>> roi = np.zeros(ds.shape.nav.to_tuple(), dtype=bool); roi[3, 4] = True
        >>> frame = ctx.run_udf(dataset=ds, udf=PickUDF(), roi=roi)["intensity"].raw_data[0]
    """

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def get_backends(self) -> tuple[str, ...]:
        return TILE_BACKENDS

    def get_result_buffers(self):
        sig = self.meta.dataset_shape.sig.to_tuple()
        # the data set's own dtype, even when other UDFs in the run asked for float tiles
        # (the conversion back is exact); corrected data keeps the (float) input dtype
        dtype = self.meta.dataset_dtype if self.meta.corrections is None else self.meta.input_dtype
        return {"intensity": self.buffer(kind="nav", extra_shape=sig, dtype=dtype, where="device")}

    def process_tile(self, tile) -> None:
        view = self.results.intensity[(slice(None),) + self.meta.sig_slice.get()]
        view[...] = dense(tile, view.shape, xp=self.xp)
