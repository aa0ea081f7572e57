"""`UDFMeta`: what a UDF may know about the data and the unit it processes."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from raytile.common.device_class import DeviceClass
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import TilingScheme
from raytile.udf.worker_cache import WorkerCache

__all__ = ["UDFMeta"]


class UDFMeta:
    """Read-only facts for ``process_*``, ``merge`` and ``get_results``.

    ``slice`` is the current frame/tile/partition in the flat, ROI-compressed
    nav space; ``coordinates`` gives the nav coordinates of its frames in the
    full data set.
    """

    def __init__(
        self,
        partition_slice: Slice | None,
        dataset_shape: Shape,
        roi: np.ndarray | None,
        dataset_dtype: Any,
        input_dtype: Any,
        tiling_scheme: TilingScheme | None = None,
        corrections: Any = None,
        device_class: DeviceClass | str = DeviceClass.CPU,
        threads_per_worker: int | None = None,
        array_backend: str | None = None,
        valid_nav_mask: np.ndarray | Callable[[], np.ndarray] | None = None,
        worker_cache: WorkerCache | None = None,
    ):
        self._partition_slice = partition_slice
        self._dataset_shape = dataset_shape
        self._roi = None if roi is None else np.asarray(roi).reshape(dataset_shape.nav.to_tuple())
        self._dataset_dtype = np.dtype(dataset_dtype)
        self._input_dtype = np.dtype(input_dtype)
        self._tiling_scheme = tiling_scheme
        self._tiling_scheme_idx = 0
        self._corrections = corrections
        self._device_class = DeviceClass(device_class)
        self._threads_per_worker = threads_per_worker
        self._array_backend = array_backend
        self._valid_nav_mask = valid_nav_mask
        self._worker_cache = worker_cache
        self._slice: Slice | None = None
        self._frame_coords: np.ndarray | None = None

    @property
    def on_main_node(self) -> bool:
        """True for the main node's meta (planning, the main node's ``preprocess``, ``merge``,
        ``get_results``): no partition is being processed."""
        return self._partition_slice is None

    @property
    def partition_shape(self) -> Shape:
        """Shape of the current partition (frames counted after the ROI)."""
        if self._partition_slice is None:
            raise ValueError("partition_shape is only known while a partition is processed")
        return self._partition_slice.shape

    @property
    def dataset_shape(self) -> Shape:
        return self._dataset_shape

    @property
    def roi(self) -> np.ndarray | None:
        return self._roi

    @property
    def slice(self) -> Slice | None:
        return self._slice

    @slice.setter
    def slice(self, value: Slice) -> None:
        self._slice = value

    @property
    def sig_slice(self) -> Slice:
        """Signal slice of the current tile."""
        if self._tiling_scheme is None:
            raise ValueError("sig_slice is only known while tiles are processed")
        return self._tiling_scheme[self._tiling_scheme_idx]

    @property
    def tiling_scheme(self) -> TilingScheme | None:
        return self._tiling_scheme

    @property
    def tiling_scheme_idx(self) -> int:
        return self._tiling_scheme_idx

    @tiling_scheme_idx.setter
    def tiling_scheme_idx(self, idx: int) -> None:
        self._tiling_scheme_idx = idx

    @property
    def dataset_dtype(self) -> np.dtype:
        return self._dataset_dtype

    @property
    def input_dtype(self) -> np.dtype:
        """dtype of the data handed to ``process_*``: the data set's dtype and the UDFs' preference."""
        return self._input_dtype

    @property
    def corrections(self) -> Any:
        return self._corrections

    @property
    def device_class(self) -> DeviceClass:
        """``'cpu'`` or ``'cuda'``."""
        return self._device_class

    @property
    def threads_per_worker(self) -> int | None:
        """Threads the UDF may use in ``process_*`` (None: no limit set)."""
        return self._threads_per_worker

    @property
    def array_backend(self) -> str | None:
        return self._array_backend

    @property
    def worker_cache(self) -> WorkerCache | None:
        """Task data kept on this worker for this params version (e.g. masks), or None on the main
        node; see :mod:`raytile.udf.worker_cache`."""
        return self._worker_cache

    @property
    def coordinates(self) -> np.ndarray:
        """Nav coordinates ``(frames, nav_dims)`` of the frames in the current slice."""
        if self._slice is None or self._partition_slice is None:
            raise ValueError("coordinates are only known while a partition is processed")
        if self._frame_coords is None:
            nav = self._dataset_shape.nav.to_tuple()
            start = self._partition_slice.origin[0]
            n = self._partition_slice.shape[0]
            if self._roi is None:
                flat = np.arange(start, start + n)
            else:
                flat = np.flatnonzero(self._roi.reshape(-1))[start:start + n]
            self._frame_coords = np.stack(np.unravel_index(flat, nav), axis=1)
        first = self._slice.origin[0] - self._partition_slice.origin[0]
        return self._frame_coords[first:first + self._slice.shape[0]]

    def get_valid_nav_mask(self, full_nav: bool = False) -> np.ndarray | None:
        """Flat mask of nav positions merged so far (in ``merge`` and ``get_results``).

        ROI-compressed unless ``full_nav`` is set.
        """
        if callable(self._valid_nav_mask):  # made when first asked for (a worker's merge rarely asks)
            self._valid_nav_mask = self._valid_nav_mask()
        if self._valid_nav_mask is None:
            return None
        if full_nav and self._roi is not None:
            full = np.zeros(self._roi.size, dtype=bool)
            full[self._roi.reshape(-1)] = self._valid_nav_mask
            return full
        return self._valid_nav_mask

    def set_valid_nav_mask(self, mask: np.ndarray | Callable[[], np.ndarray] | None) -> None:
        """Set the mask ``get_valid_nav_mask`` returns; a callable makes it when first asked for."""
        self._valid_nav_mask = mask
