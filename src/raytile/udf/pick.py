"""`PickUDF`: copy the frames selected by an ROI."""

from __future__ import annotations

import logging
from typing import Any

from raytile.common.math import prod
from raytile.udf._tiles import TILE_BACKENDS, dense
from raytile.udf.base import UDF

__all__ = ["PickUDF", "PICK_WARN_BYTES"]

log = logging.getLogger(__name__)

#: Picking more than this many bytes logs a warning: the frames all travel to the main node.
PICK_WARN_BYTES = 2**28


class PickUDF(UDF):
    """Pick whole frames: ``intensity`` is ``(frames in the ROI, *sig)``, in nav order, as in LiberTEM.

    Meant for a small ROI, usually one frame; without an ROI it copies the
    whole data set to the main node (``(frames, *sig)``) and logs a warning
    above :data:`PICK_WARN_BYTES`. The frames come in the data set's own
    dtype, exactly, also when other UDFs in the same run ask for a float
    input dtype (corrected data keeps the float input dtype).

    ``intensity`` is a ``single`` result: ``.data`` and ``.raw_data`` are the
    same array. While the run goes on, frames of partitions not merged yet
    are zero. The frames travel from the workers as a private ``nav``
    buffer (each partition sends only its own frames).

    Example::

        >>> roi = np.zeros(ds.shape.nav.to_tuple(), dtype=bool); roi[3, 4] = True
        >>> frame = ctx.run_udf(dataset=ds, udf=PickUDF(), roi=roi)["intensity"].data[0]
    """

    def __init__(self) -> None:
        super().__init__()  # no parameters: an unknown keyword is a TypeError, as in LiberTEM

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def get_backends(self) -> tuple[str, ...]:
        return TILE_BACKENDS

    def _dtype(self) -> Any:
        # the data set's own dtype, even when other UDFs in the run asked for float tiles
        # (the conversion back is exact); corrected data keeps the (float) input dtype
        return self.meta.dataset_dtype if self.meta.corrections is None else self.meta.input_dtype

    def _frames(self) -> int:
        roi = self.meta.roi
        return int(roi.sum()) if roi is not None else prod(self.meta.dataset_shape.nav.to_tuple())

    def get_result_buffers(self):
        sig = tuple(self.meta.dataset_shape.sig.to_tuple())
        frames, dtype = self._frames(), self._dtype()
        return {
            "frames": self.buffer(kind="nav", extra_shape=sig, dtype=dtype, where="device", use="private"),
            "intensity": self.buffer(kind="single", extra_shape=(frames,) + sig, dtype=dtype, use="result_only"),
        }

    def preprocess(self) -> None:
        if not self.meta.on_main_node:
            return
        size = self._frames() * prod(self.meta.dataset_shape.sig.to_tuple()) * self._dtype().itemsize
        if size > PICK_WARN_BYTES:
            log.warning("PickUDF picks %d bytes (more than %d), all sent to the main node: consider a UDF "
                        "that reduces the data on the workers", size, PICK_WARN_BYTES)

    def process_tile(self, tile) -> None:
        view = self.results.frames[(slice(None),) + self.meta.sig_slice.get()]
        view[...] = dense(tile, view.shape, xp=self.xp)

    def get_results(self) -> dict[str, Any]:
        return {"intensity": self.results.frames}
