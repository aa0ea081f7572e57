"""`Slice`: a rectangular region (origin + shape) of a data set with a flat nav axis."""

from __future__ import annotations

from typing import Iterable

from raytile.common.shape import Shape

__all__ = ["Slice"]


class Slice:
    """A region given by its ``origin`` and its :class:`Shape`.

    Inside raytile the navigation axis is flattened, so a slice of a 4D data
    set has origin ``(nav_index, sig_y, sig_x)`` and shape
    ``(n_frames, sig_h, sig_w)``.

    >>> s = Slice(origin=(10, 0, 0), shape=Shape((5, 8, 8), sig_dims=2))
    >>> s.get()
    (slice(10, 15, None), slice(0, 8, None), slice(0, 8, None))
    """

    __slots__ = ("origin", "shape")

    def __init__(self, origin: Iterable[int], shape: Shape):
        self.origin = tuple(int(o) for o in origin)
        self.shape = shape
        if len(self.origin) != len(shape):
            raise ValueError(f"origin {self.origin} and shape {shape} differ in length")

    @property
    def sig_dims(self) -> int:
        return self.shape.sig_dims

    def get(self, arr=None, sig_only: bool = False, nav_only: bool = False):
        """Return a tuple of python slices (or, given ``arr``, ``arr`` sliced by them)."""
        nav_dims = self.shape.nav_dims
        slices = tuple(slice(o, o + s) for o, s in zip(self.origin, self.shape))
        if sig_only:
            slices = slices[nav_dims:]
        elif nav_only:
            slices = slices[:nav_dims]
        if arr is not None:
            return arr[slices]
        return slices

    @property
    def nav(self) -> "Slice":
        nd = self.shape.nav_dims
        return Slice(self.origin[:nd], self.shape.nav)

    @property
    def sig(self) -> "Slice":
        nd = self.shape.nav_dims
        return Slice(self.origin[nd:], self.shape.sig)

    def shift(self, other: "Slice") -> "Slice":
        """Express this slice relative to the origin of ``other``."""
        return Slice(tuple(a - b for a, b in zip(self.origin, other.origin)), self.shape)

    def __eq__(self, other) -> bool:
        return isinstance(other, Slice) and self.origin == other.origin and self.shape == other.shape

    def __hash__(self) -> int:
        return hash((self.origin, self.shape))

    def __repr__(self) -> str:
        return f"Slice(origin={self.origin}, shape={self.shape})"

    def __reduce__(self):
        return (Slice, (self.origin, self.shape))
