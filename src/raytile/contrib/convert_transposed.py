"""Convert a data set stored "transposed" (signal-major, ``(sig, nav)``) into a ``(nav, sig)`` ``.npy`` file.

``libertem.contrib.convert_transposed`` at its ported path. Gatan Digital Micrograph ``.dm4`` STEM
files may store all values of one signal pixel together, so reading one frame traverses the whole
file; converted once, the ``.npy`` reads frame by frame::

    convert_dm4_transposed("scan.dm4", "scan.npy", ctx=ctx)
    ds = ctx.load("npy", path="scan.npy")

The data set is read with its dimensions swapped (its "frames" are the signal pixels); each
partition of signal pixels is written transposed into a memory map of the output file, which the
main node and every worker must share (as for :class:`~raytile.udf.record.RecordUDF`).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException, UDFException
from raytile.io.dataset import DataSet
from raytile.io.formats.dm import dm_image
from raytile.runtime.context import Context
from raytile.udf.record import RecordUDF

__all__ = ["ConvertTransposedDatasetUDF", "convert_dm4_transposed"]


class ConvertTransposedDatasetUDF(RecordUDF):
    """Write a data set whose nav axes are the signal pixels and whose sig axes are the scan positions into
    the ``.npy`` file ``filename`` with the two groups swapped: ``(scan..., signal...)``. No ROI."""

    def get_method(self) -> Any:
        return self.UDF_METHOD.PARTITION

    def _shape(self) -> tuple[int, ...]:
        if self.meta.roi is not None:
            raise UDFException("ConvertTransposedDatasetUDF: converts whole data sets; run it without an ROI")
        shape = self.meta.dataset_shape
        return tuple(shape.sig.to_tuple()) + tuple(shape.nav.to_tuple())

    def _view(self, memmap: np.memmap) -> np.ndarray:
        """``(scan positions, signal pixels)``: a partition of signal pixels fills a band of columns."""
        shape = self.meta.dataset_shape
        return memmap.reshape((math.prod(shape.sig.to_tuple()), math.prod(shape.nav.to_tuple())))

    def process_partition(self, partition: np.ndarray) -> None:
        pixels = partition.shape[0]
        where = self.meta.slice
        assert where is not None  # set while a partition is processed
        first = where.origin[0]
        self.task_data.memmap[:, first:first + pixels] = partition.reshape((pixels, -1)).T


def _convert_transposed_ds(ctx: Context, ds: DataSet, out_path: str | os.PathLike, **run_kwargs: Any) -> None:
    """Run :class:`ConvertTransposedDatasetUDF` on ``ds`` into ``out_path`` (``run_kwargs`` go to
    ``run_udf``, e.g. ``progress``)."""
    ctx.run_udf(dataset=ds, udf=ConvertTransposedDatasetUDF(out_path), **run_kwargs)


def convert_dm4_transposed(dm4_path: str | os.PathLike, out_path: str | os.PathLike, ctx: Context | None = None,
                           num_cpus: int | None = None, dataset_index: int | None = None,
                           progress: bool = False) -> None:
    """Convert the transposed (signal-major) STEM data of a ``.dm4`` file into a ``(nav, sig)`` ``.npy``.

    ``ctx``: the Context to run on; without one, a local one is made with ``num_cpus`` CPUs (giving
    both is a ValueError). ``dataset_index`` picks the image of a file with several. A file whose
    data is already C-ordered (not transposed) raises DataSetException: load it as it is.
    """
    if ctx is not None and num_cpus is not None:
        raise ValueError("convert_dm4_transposed: give either ctx or num_cpus, not both")
    path = os.fspath(dm4_path)
    if dm_image(path, dataset_index).c_order:
        raise DataSetException(f"{path}: the DM4 data is not transposed (it is stored C-ordered): load it as it is")
    if ctx is None:
        ctx = Context.make_with("dask", cpus=num_cpus)
    ds = ctx.load("dm", path=path, force_c_order=True, dataset_index=dataset_index)
    _convert_transposed_ds(ctx, ds, out_path, progress=progress)
