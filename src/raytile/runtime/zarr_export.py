"""Export a data set as a Zarr v3 array, written in parallel by the workers (``ctx.export_dataset(format="zarr")``).

The driver makes the array (metadata only, one chunk per frame: no two
workers ever write the same chunk, so no locking is needed); every task
opens it where it runs and writes its tiles, zarr encoding and putting the
chunks of a tile concurrently. The target may be a local directory (which
the workers must share) or an object store URL with ``storage_options``: a
session of MIB or DECTRIS files goes to the cloud in one call.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from raytile.io.dataset import DataSet
from raytile.io.formats.hdf5 import nav_runs
from raytile.io.formats.zarr import create_zarr_array, open_zarr_array
from raytile.io.store import StorageOptions, is_url, store_for
from raytile.udf.base import UDF
from raytile.udf.record import record_shape

__all__ = ["ZarrWriteUDF", "export_zarr"]


class ZarrWriteUDF(UDF):
    """Writes each tile into the Zarr array at ``path`` (made beforehand by :func:`export_zarr`)."""

    def __init__(self, path: str, storage_options: Mapping[str, Any] | None = None):
        super().__init__(path=path, storage_options=StorageOptions(storage_options))

    def get_preferred_input_dtype(self) -> np.dtype:
        return self.USE_NATIVE_DTYPE

    def get_result_buffers(self) -> dict:
        return {}

    def get_task_data(self) -> dict[str, Any]:
        store = store_for(self.params.path, self.params.storage_options)
        arr = open_zarr_array(self.params.path, store, mode="r+")
        sig_dims = len(self.meta.dataset_shape.sig)
        return {"array": arr, "nav": tuple(arr.shape[:arr.ndim - sig_dims])}

    def process_tile(self, tile: Any) -> None:
        where = self.meta.slice
        assert where is not None  # set while tiles are processed
        arr, nav = self.task_data.array, self.task_data.nav
        a = int(where.origin[0])
        sig_sl = tuple(slice(o, o + n) for o, n in zip(where.origin[1:], where.shape[1:]))
        data = np.asarray(tile)
        for pos, end, sel in nav_runs(a, a + data.shape[0], nav):
            arr[sel + sig_sl] = data[pos - a:end - a]


def export_zarr(ctx: Any, dataset: DataSet, path: str | os.PathLike, storage_options: Mapping[str, Any] | None = None,
                overwrite: bool = False, compressor: str | None = "zstd", progress: bool = False,
                roi: Any = None) -> None:
    """Write ``dataset`` (or its ROI's frames, in one nav axis) to a new Zarr v3 array at ``path``."""
    target = os.fspath(path)
    if not is_url(target):
        target = os.path.abspath(target)
    store = store_for(target, storage_options)
    roi_arr = None if roi is None else np.asarray(roi, dtype=bool).reshape(-1)
    shape = record_shape(dataset.shape, roi_arr)
    create_zarr_array(target, shape, np.dtype(dataset.dtype), len(dataset.shape.sig), store,
                      compressor=compressor, overwrite=overwrite)
    ctx.run_udf(dataset=dataset, udf=ZarrWriteUDF(target, storage_options), roi=roi, progress=progress)
