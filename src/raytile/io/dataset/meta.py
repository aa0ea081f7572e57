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
        # whether the format counted the frames it holds (then positions without one are known, see
        # frames_with_data); else as many as nav positions are assumed
        object.__setattr__(self, "_counted", self.image_count is not None)
        if self.image_count is None:
            object.__setattr__(self, "image_count", self.shape.nav.size)

    def frames_with_data(self, flat_nav: np.ndarray) -> np.ndarray | None:
        """Which of the (flat, increasing) nav positions ``flat_nav`` hold a frame of the data: those
        whose ``position + sync_offset`` is within the ``image_count`` frames the format counted. None
        when all do, or when the format did not count its frames (every position is read then).

        LiberTEM hands UDFs only the frames the data holds; the other positions keep their buffers'
        initial values.
        """
        if not getattr(self, "_counted", False) or len(flat_nav) == 0:
            return None
        count = int(self.image_count or 0)
        first, last = int(flat_nav[0]) + self.sync_offset, int(flat_nav[-1]) + self.sync_offset
        if first >= 0 and last < count:
            return None
        frames = flat_nav + self.sync_offset
        return (frames >= 0) & (frames < count)

    @property
    def num_frames(self) -> int:
        return self.shape.nav.size
