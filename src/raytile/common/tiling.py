"""`TilingScheme` and `DataTile`: how a partition is cut into tiles, and one tile."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from raytile.common.shape import Shape
from raytile.common.slice import Slice

__all__ = ["TilingScheme", "DataTile"]


class TilingScheme:
    """The negotiated cut of every partition into tiles.

    A tile holds up to ``depth`` consecutive frames (consecutive among the
    frames the ROI selects) and one of the signal regions in ``sig_slices``.
    ``tileshape`` (also ``shape``, LiberTEM's name) is ``(depth, *sig_tile_shape)``; tiles at the end
    of a partition or at the edge of the signal may be smaller. ``scheme[i]`` is the ``i``-th signal
    region, and ``slices`` LiberTEM's ``[(i, region), ...]``. ``intent`` (LiberTEM's: ``"partition"``,
    ``"frame"``, ``"tile"`` or None) says what the scheme was made for: a ``"partition"`` scheme is
    made as deep as each partition by :meth:`adjust_for_partition`.
    """

    def __init__(self, slices: Sequence[Slice], tileshape: Shape, dataset_shape: Shape,
                 intent: str | None = None, debug: Any = None):
        self.sig_slices = list(slices)
        self.tileshape = tileshape
        self.dataset_shape = dataset_shape
        self.intent = intent
        self.debug = debug

    @classmethod
    def make_for_shape(cls, tileshape: Shape, dataset_shape: Shape, intent: str | None = None,
                       debug: Any = None) -> "TilingScheme":
        """Cover the signal of ``dataset_shape`` with a grid of ``tileshape.sig`` regions."""
        sig = dataset_shape.sig.to_tuple()
        tsig = tileshape.sig.to_tuple()
        if len(sig) != len(tsig):
            raise ValueError(f"tileshape {tileshape} does not match data set shape {dataset_shape}")
        ranges = [range(0, s, t) for s, t in zip(sig, tsig)]
        slices = []
        for origin in itertools.product(*ranges):
            shape = tuple(min(t, s - o) for o, t, s in zip(origin, tsig, sig))
            slices.append(Slice(origin, Shape(shape, sig_dims=len(sig))))
        return cls(slices, tileshape, dataset_shape, intent=intent, debug=debug)

    def adjust_for_partition(self, partition: Any) -> "TilingScheme":
        """This scheme, or for a ``"partition"`` intent whose depth is not ``partition``'s frame count, a
        scheme as deep as the partition (LiberTEM's ``adjust_for_partition``)."""
        frames = partition.slice.shape.nav.size
        if self.intent != "partition" or frames == self.depth:
            return self
        tileshape = Shape((frames,) + self.tileshape.sig.to_tuple(), sig_dims=self.tileshape.sig.dims)
        return TilingScheme(self.sig_slices, tileshape, self.dataset_shape, intent=self.intent, debug=self.debug)

    @property
    def shape(self) -> Shape:
        """The tile shape (LiberTEM's name for :attr:`tileshape`)."""
        return self.tileshape

    @property
    def slices(self) -> list[tuple[int, Slice]]:
        """``[(index, signal region), ...]``, as LiberTEM's ``TilingScheme.slices``."""
        return list(enumerate(self.sig_slices))

    @property
    def slices_array(self) -> np.ndarray:
        """``(n, 2, sig_dims)`` int64: ``[i, 0]`` the origin and ``[i, 1]`` the shape of region ``i``."""
        out = np.zeros((len(self.sig_slices), 2, self.tileshape.sig.dims), dtype=np.int64)
        for i, sl in enumerate(self.sig_slices):
            out[i] = (tuple(sl.origin), tuple(sl.shape))
        return out

    @property
    def depth(self) -> int:
        return self.tileshape[0]

    @property
    def sig_shape(self) -> tuple[int, ...]:
        return self.tileshape.sig.to_tuple()

    @property
    def covers_whole_frames(self) -> bool:
        return len(self.sig_slices) == 1

    def __getitem__(self, idx: int) -> Slice:
        return self.sig_slices[idx]

    def __len__(self) -> int:
        return len(self.sig_slices)

    def __iter__(self) -> Iterator[Slice]:
        return iter(self.sig_slices)

    def __repr__(self) -> str:
        return f"TilingScheme(tileshape={self.tileshape.to_tuple()}, n_sig_slices={len(self.sig_slices)})"


@dataclass
class DataTile:
    """One tile: the array, where it lies and which slice of the scheme it uses.

    ``tile_slice`` has a flat nav origin; with an ROI the nav coordinate counts
    only selected frames (the compressed nav space results live in).
    """

    data: Any
    tile_slice: Slice
    scheme_idx: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def num_frames(self) -> int:
        return self.tile_slice.shape[0]
