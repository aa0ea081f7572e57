"""`Negotiator`: meets the UDFs' tiling wishes and the data set's constraints."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np

from raytile.common.shape import Shape
from raytile.common.tiling import TilingScheme
from raytile.common.udf import WHOLE_FRAMES

if TYPE_CHECKING:
    from raytile.io.dataset import Partition

__all__ = ["Negotiator", "TilingClient", "DEFAULT_TILE_BYTES", "DEFAULT_DEPTH", "WHOLE_FRAMES",
           "wants_whole_frames"]

#: Tile size in bytes aimed for when no UDF asks for another: large enough that per-tile
#: overhead vanishes (measured: 1 MiB -> 4 MiB took inline SumUDF from 0.71x to 0.91x of
#: a plain numpy pass), small enough to stay in the last-level cache.
DEFAULT_TILE_BYTES = 4 * 1024 * 1024
#: Frames per tile when UDFs have no depth preference.
DEFAULT_DEPTH = 32


def _round_down_to(value: int, base: int) -> int:
    return max(base, (value // base) * base)


def wants_whole_frames(method: str, preferences: Mapping[str, Any]) -> bool:
    """Whether a UDF with ``method`` and tiling ``preferences`` must get tiles of whole frames.

    ``process_frame`` UDFs always do (they are called frame by frame). A
    ``process_tile`` UDF does if its preferences say ``"whole_frames": True``
    (:data:`WHOLE_FRAMES`): it gets tiles of several whole frames, depth
    negotiated as for any tile UDF. That is for UDFs that need each frame
    whole (a frame's own minimum, as LogsumUDF) but do their work on many
    frames a call: a call per frame costs the runner's per-frame views and
    the UDF's per-call overhead, which on 256x256 frames was as much as the
    work. (``process_partition`` UDFs get whole partitions anyway.)

    >>> wants_whole_frames("tile", {"depth": 8}), wants_whole_frames("tile", {"whole_frames": True})
    (False, True)
    """
    if method == "frame":
        return True
    return method == "tile" and bool(preferences.get(WHOLE_FRAMES, False))


class TilingClient(Protocol):
    """What the negotiator asks of a UDF (:class:`raytile.udf.base.UDF` provides it): its method and its
    tiling preferences, with the special values it spells them with."""

    TILE_DEPTH_DEFAULT: int
    TILE_DEPTH_MAX: int
    TILE_SIZE_BEST_FIT: int
    TILE_SIZE_MAX: int

    def get_method(self) -> str: ...

    def get_tiling_preferences(self) -> dict[str, int]: ...


class Negotiator:
    """Picks one :class:`TilingScheme` for a run.

    Inputs are: each UDF's method (``partition`` wants whole partitions,
    ``frame`` whole frames, ``tile`` anything), its
    ``get_tiling_preferences()`` (``depth`` and ``total_size`` in bytes;
    ``whole_frames``, see :func:`wants_whole_frames`), the
    partition's ``get_base_shape`` (a tile shape is a multiple of it), its
    ``get_io_size`` (the tile size when no UDF asks for one) and its
    ``adjust_tileshape`` veto.
    """

    def get_scheme(
        self,
        udfs: Sequence[TilingClient],
        partition: "Partition",
        read_dtype: np.dtype,
        roi: np.ndarray | None = None,
        max_partition_frames: int | None = None,
    ) -> TilingScheme:
        ds_shape = partition.meta.shape
        sig_shape = ds_shape.sig.to_tuple()
        itemsize = np.dtype(read_dtype).itemsize
        base_shape = tuple(partition.get_base_shape(roi))
        if len(base_shape) != 1 + len(sig_shape):
            raise ValueError(f"base shape {base_shape} does not match signal shape {sig_shape}")
        methods = {udf.get_method() for udf in udfs}
        frames = max_partition_frames or partition.shape[0]

        if "partition" in methods:
            tileshape = (max(frames, 1),) + sig_shape
        else:
            depth, total_size = self._preferences(udfs, frames, partition.get_io_size() or DEFAULT_TILE_BYTES)
            whole_frames = any(wants_whole_frames(udf.get_method(), udf.get_tiling_preferences()) for udf in udfs)
            tileshape = self._fit(depth, total_size, itemsize, sig_shape, base_shape, whole_frames)
            tileshape = tuple(int(v) for v in partition.adjust_tileshape(tileshape, roi))
            if whole_frames:  # a forced tile shape (a memory data set's tileshape) still gives whole frames
                tileshape = tileshape[:1] + sig_shape
        return TilingScheme.make_for_shape(
            Shape(tileshape, sig_dims=len(sig_shape)), ds_shape
        )

    @staticmethod
    def _preferences(udfs: Sequence[TilingClient], frames: int,
                     default_size: int = DEFAULT_TILE_BYTES) -> tuple[int, float]:
        depths: list[int] = []
        sizes: list[float] = []
        for udf in udfs:
            prefs = udf.get_tiling_preferences()
            depth: int | None = prefs.get("depth", udf.TILE_DEPTH_DEFAULT)
            size: float | None = prefs.get("total_size", udf.TILE_SIZE_BEST_FIT)
            if depth == udf.TILE_DEPTH_MAX:
                depth = frames
            elif depth == udf.TILE_DEPTH_DEFAULT:
                depth = None
            if size == udf.TILE_SIZE_MAX:
                size = math.inf
            elif size == udf.TILE_SIZE_BEST_FIT:
                size = None
            if depth is not None:
                depths.append(int(depth))
            if size is not None:
                sizes.append(size)
        depth = min(depths) if depths else DEFAULT_DEPTH
        depth = max(1, min(depth, frames))
        size = min(sizes) if sizes else default_size
        if not depths and size == math.inf:
            depth = frames
        return depth, size

    @staticmethod
    def _fit(depth, total_size, itemsize, sig_shape, base_shape, whole_frames) -> tuple[int, ...]:
        frame_bytes = math.prod(sig_shape) * itemsize
        if total_size != math.inf and depth * frame_bytes > total_size:
            depth = max(1, int(total_size // frame_bytes))
        depth = _round_down_to(depth, base_shape[0])
        sig_tile = list(sig_shape)
        if not whole_frames and total_size != math.inf:
            # Split the signal along its leading dims, in multiples of the base shape,
            # until one tile fits the byte budget.
            for dim in range(len(sig_tile)):
                while depth * math.prod(sig_tile) * itemsize > total_size and sig_tile[dim] > base_shape[dim + 1]:
                    sig_tile[dim] = _round_down_to(sig_tile[dim] // 2, base_shape[dim + 1])
                if depth * math.prod(sig_tile) * itemsize <= total_size:
                    break
        return (depth,) + tuple(sig_tile)
