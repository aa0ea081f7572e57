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
