"""`Partition`: a contiguous run of frames read by one task; how a data set is split into them, how their
frames reach the worker (:class:`FrameDelivery`) and which array backends their tiles come in."""

from __future__ import annotations

import enum
import functools
import inspect
import math
import warnings
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io.dataset.meta import DataSetMeta
from raytile.io.dataset.tiles import iter_array_tiles

__all__ = [
    "Partition", "FrameDelivery", "TakesFrames", "partition_slices", "choose_num_partitions", "check_array_backend",
    "DEFAULT_PARTITION_BYTES", "NUMPY_BACKENDS",
]

#: Partition size aimed for by default, in bytes of raw data.
DEFAULT_PARTITION_BYTES = 128 * 1024 * 1024
#: The array backends of a format that declares none: dense numpy tiles.
NUMPY_BACKENDS: tuple[str, ...] = ("numpy",)


class FrameDelivery(enum.Enum):
    """How a partition's frames reach the worker that runs its task (``Partition.frame_delivery``)."""

    #: The partition reads its frames where the task runs (files, a detector's buffers).
    READ = "read"
    #: In-memory frames that an executor shares with its workers once (``Partition.shared_frames``); the
    #: task goes without them (``Partition.without_frames``) and the worker gets them from the share.
    SHARED = "shared"
    #: The frames travel inside the task (small or sparse in-memory data).
    CARRIED = "carried"


@runtime_checkable
class TakesFrames(Protocol):
    """A partition whose frames an executor hands it (SHARED or CARRIED ones, a stream's): it reads
    them from ``data``, which the executor sets before the task runs and clears after."""

    data: Any


def partition_slices(shape: Shape, num_partitions: int) -> list[Slice]:
    """Split the flat nav axis of ``shape`` into ``num_partitions`` near-equal slices."""
    n = shape.nav.size
    num_partitions = max(1, min(num_partitions, n))
    bounds = np.linspace(0, n, num_partitions + 1).astype(np.int64)
    sig = shape.sig.to_tuple()
    return [
        Slice((int(a),) + (0,) * len(sig), Shape((int(b - a),) + sig, sig_dims=len(sig)))
        for a, b in zip(bounds[:-1], bounds[1:])
        if b > a
    ]


def choose_num_partitions(
    shape: Shape, dtype: np.dtype, num_workers: int = 1, target_bytes: int = DEFAULT_PARTITION_BYTES
) -> int:
    """Enough partitions to keep each near ``target_bytes``, and at least one per worker."""
    total = shape.size * np.dtype(dtype).itemsize
    return max(1, min(shape.nav.size, max(math.ceil(total / target_bytes), num_workers)))


class Partition(ABC):
    """A contiguous run of frames of a data set, read by one task.

    Subclasses provide frame data through :meth:`get_tiles`. The base class
    implements tiling over an array-like source (:meth:`_source`), reading
    "straight" (views, no copy) when no ROI and no dtype conversion is asked
    for, and into a reused buffer otherwise. What a format declares to the
    generic layers is listed in this module's docstring.
    """

    #: Array backends the tiles can come in, native one first (see the module doc).
    array_backends: tuple[str, ...] = NUMPY_BACKENDS
    #: Which scan of a stream the partition's frames belong to (a stream's partitions repeat per scan,
    #: see io/partition_source.py); 0 for a file's.
    scan: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("get_tiles")
        if own is not None and "array_backend" not in inspect.signature(own).parameters:
            setattr(cls, "get_tiles", _with_array_backend(own))  # a format's own get_tiles, wrapped once

    @classmethod
    def make_slices(cls, shape: Shape, num_partitions: int,
                    sync_offset: int = 0) -> Iterator[tuple[Slice, int, int]]:
        """LiberTEM's ``Partition.make_slices``: :func:`partition_slices` of ``shape`` as
        ``(slice, start, stop)``, ``start``/``stop`` the frame indices in the file (shifted by
        ``sync_offset``). More partitions than frames warn (RuntimeWarning) and give one per frame."""
        frames = shape.nav.size
        if num_partitions > frames:
            warnings.warn(f"the data set has fewer frames ({frames}) than partitions asked for "
                          f"({num_partitions}): one partition per frame", RuntimeWarning, stacklevel=2)
        for s in partition_slices(shape, num_partitions):
            start = s.origin[0]
            yield s, start + sync_offset, start + s.shape[0] + sync_offset

    @property
    def frame_delivery(self) -> FrameDelivery:
        """How the frames reach the worker that runs the partition's task: read there (files)."""
        return FrameDelivery.READ

    @property
    def native_backend(self) -> str:
        """The backend tiles come in unless another is asked for: the first of :attr:`array_backends`."""
        return self.array_backends[0]

    def __init__(self, meta: DataSetMeta, partition_slice: Slice, idx: int):
        self.meta = meta
        self.slice = partition_slice
        self.idx = idx

    @property
    def shape(self) -> Shape:
        return self.slice.shape

    @property
    def start(self) -> int:
        return self.slice.origin[0]

    @property
    def stop(self) -> int:
        return self.slice.origin[0] + self.slice.shape[0]

    def get_base_shape(self, roi: np.ndarray | None) -> tuple[int, ...]:
        """Tile shapes are multiples of this; override for natively tiled layouts."""
        return (1,) + (1,) * self.meta.shape.sig_dims

    def adjust_tileshape(self, tileshape: tuple[int, ...], roi: np.ndarray | None) -> tuple[int, ...]:
        """Last word on a tile shape; override to veto shapes the format cannot read."""
        return tileshape

    def get_locations(self) -> Sequence[str] | None:
        """Hosts where this partition is local, or None for anywhere."""
        return None

    def get_io_size(self) -> int | None:
        """Bytes one tile should hold when no UDF asks for a size (the format's best read size), or None
        for the negotiator's default (:data:`raytile.io.negotiator.DEFAULT_TILE_BYTES`)."""
        return None

    def shared_frames(self) -> Any:
        """The frames an executor shares with its workers once (``frame_delivery`` SHARED), else None."""
        return None

    def without_frames(self) -> "Partition":
        """This partition without the frames it carries, to send where they arrive another way (SHARED
        frames); the partition itself when it carries none."""
        return self

    def count_frames(self, roi: np.ndarray | None) -> int:
        if roi is None:
            return self.shape[0]
        return int(np.count_nonzero(roi[self.start:self.stop]))

    def roi_offset(self, roi: np.ndarray | None) -> int:
        """Index of this partition's first frame in the ROI-compressed nav space."""
        if roi is None:
            return self.start
        return int(np.count_nonzero(roi[: self.start]))

    def frames_with_data(self, roi: np.ndarray | None) -> tuple[int, int]:
        """This partition's frames ``[lo, hi)`` that the data holds a frame for (see
        :meth:`DataSetMeta.nav_with_frames`), counted from its first frame, in the ROI-compressed nav
        space; ``(0, count_frames(roi))`` when every position has one."""
        first, end = self.meta.nav_with_frames()
        lo, hi = min(max(first, self.start), self.stop), min(max(end, self.start), self.stop)
        if roi is None:
            return lo - self.start, hi - self.start
        part_roi = roi[self.start:self.stop]
        return (int(np.count_nonzero(part_roi[:lo - self.start])),
                int(np.count_nonzero(part_roi[:hi - self.start])))

    def describe(self) -> str:
        return f"partition {self.idx} (frames {self.start}:{self.stop})"

    @abstractmethod
    def _source(self) -> Any:
        """This partition's frames as an array-like ``(frames, *sig)`` (an mmap view, an ndarray)."""

    def get_tiles(
        self,
        tiling_scheme: TilingScheme,
        roi: np.ndarray | None = None,
        dest_dtype: Any = None,
        array_backend: str | None = None,
    ) -> Iterator[DataTile]:
        """Yield this partition's tiles in nav order, all signal slices per nav block.

        ``array_backend``: one of :attr:`array_backends` (None: the native one).
        Resolves what every array-backed partition needs (the tiles' dtype, the
        partition's part of the ROI, the nav index of its first tile) and tiles
        :meth:`_source` by :meth:`_tile_source`.
        """
        dest_dtype = np.dtype(dest_dtype if dest_dtype is not None else self.meta.raw_dtype)
        part_roi = None if roi is None else roi[self.start:self.stop]
        yield from self._tile_source(tiling_scheme, part_roi, dest_dtype, self.roi_offset(roi), array_backend)

    def _tile_source(self, tiling_scheme: TilingScheme, part_roi: np.ndarray | None, dest_dtype: np.dtype,
                     nav_origin: int, array_backend: str | None) -> Iterator[DataTile]:
        """Tile :meth:`_source` (``part_roi``: a flat mask over this partition's frames, or None).

        Reads "straight" (views of the source, no copy) when there is no ROI
        and no dtype conversion; otherwise gathers and converts into buffers
        reused from tile to tile, so a UDF must not keep a tile past its call.
        A source that is not dense (sparse rows) overrides this.
        """
        check_array_backend(self, array_backend)
        return iter_array_tiles(self._source(), tiling_scheme, part_roi, dest_dtype, nav_origin)


def check_array_backend(partition: Partition, array_backend: str | None) -> None:
    """Raise DataSetException if ``array_backend`` is not one the partition declares."""
    if array_backend is not None and array_backend not in partition.array_backends:
        raise DataSetException(f"{partition.describe()} yields {', '.join(partition.array_backends)} tiles, "
                               f"not array_backend={array_backend!r}")


def _with_array_backend(get_tiles: Callable[..., Iterator[DataTile]]) -> Callable[..., Iterator[DataTile]]:
    """A format's ``get_tiles(tiling_scheme, roi, dest_dtype)`` with the one signature: it yields its
    native backend and is asked for no other (see the module doc)."""

    @functools.wraps(get_tiles)
    def adapted(self: Partition, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        if array_backend not in (None, self.native_backend):
            raise DataSetException(f"{self.describe()} yields only {self.native_backend} tiles, "
                                   f"not array_backend={array_backend!r}")
        return get_tiles(self, tiling_scheme, roi=roi, dest_dtype=dest_dtype)

    return adapted
