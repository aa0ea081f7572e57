"""`DataSetMeta`: what every partition needs to know about its data set (shape, dtype, offsets)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from raytile.common.shape import Shape

__all__ = ["DataSetMeta"]


@dataclass(frozen=True)
class DataSetMeta:
    """What every partition needs to know about its data set."""

    shape: Shape
    raw_dtype: np.dtype
    sync_offset: int = 0
    extra: dict = field(default_factory=dict)
    #: Frames the data holds (LiberTEM's ``image_count``; a file may hold more or fewer than the nav
    #: shape has positions). None: as many as nav positions.
    image_count: int | None = None

    def __post_init__(self) -> None:
        if self.image_count is None:
            object.__setattr__(self, "image_count", self.shape.nav.size)

    @property
    def num_frames(self) -> int:
        return self.shape.nav.size

    def nav_with_frames(self) -> tuple[int, int]:
        """The flat nav positions ``[first, end)`` that a frame of the data exists for.

        Position ``i`` holds frame ``i + sync_offset`` of the ``image_count`` the data holds; the
        positions before and after (a ``sync_offset``, or a nav shape larger than the data) have no
        frame, and runs leave them out, as LiberTEM does: their nav results keep the buffers' initial
        values and a UDF never sees them (StdDevUDF's ``num_frames`` counts the frames there are).

        >>> from raytile.common.shape import Shape
        >>> DataSetMeta(Shape((4, 5, 3, 3), sig_dims=2), np.dtype("f4"), sync_offset=2,
        ...             image_count=15).nav_with_frames()
        (0, 13)
        """
        assert self.image_count is not None  # set in __post_init__
        first = min(max(0, -self.sync_offset), self.num_frames)
        return first, max(first, min(self.num_frames, self.image_count - self.sync_offset))
