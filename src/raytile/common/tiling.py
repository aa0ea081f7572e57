"""`TilingScheme` and `DataTile`: how a partition is cut into tiles, and one tile."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator, Sequence


from raytile.common.shape import Shape
from raytile.common.slice import Slice

__all__ = ["TilingScheme", "DataTile"]


class TilingScheme:
    """The negotiated cut of every partition into tiles.

    A tile holds up to ``depth`` consecutive frames (consecutive among the
    frames the ROI selects) and one of the signal regions in ``slices``.
    ``tileshape`` is ``(depth, *sig_tile_shape)``; tiles at the end of a
    partition or at the edge of the signal may be smaller.
    """

    def __init__(self, slices: Sequence[Slice], tileshape: Shape, dataset_shape: Shape):
        self.slices = list(slices)
        self.tileshape = tileshape
        self.dataset_shape = dataset_shape

    @classmethod
    def make_for_shape(cls, tileshape: Shape, dataset_shape: Shape) -> "TilingScheme":
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
        return cls(slices, tileshape, dataset_shape)

    @property
    def depth(self) -> int:
        return self.tileshape[0]

    @property
    def sig_shape(self) -> tuple[int, ...]:
        return self.tileshape.sig.to_tuple()

    @property
    def covers_whole_frames(self) -> bool:
        return len(self.slices) == 1

    def __getitem__(self, idx: int) -> Slice:
        return self.slices[idx]

    def __len__(self) -> int:
        return len(self.slices)

    def __iter__(self) -> Iterator[Slice]:
        return iter(self.slices)

    def __repr__(self) -> str:
        return f"TilingScheme(tileshape={self.tileshape.to_tuple()}, n_sig_slices={len(self.slices)})"


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
