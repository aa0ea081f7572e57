"""`Slice`: a rectangular region (origin + shape) of a data set.

Mirrors ``libertem.common.slice.Slice`` (same methods and results), so
ported UDFs that compute with ``self.meta.slice`` run unchanged.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Sequence, overload

import numpy as np

from raytile.common.math import count_nonzero
from raytile.common.shape import Shape, ShapeLike

__all__ = ["Slice", "SliceUsageError"]


class SliceUsageError(ValueError):
    """A Slice was built or used with mismatching dimensions."""


class Slice:
    """A region given by its ``origin`` and its :class:`Shape`.

    Inside raytile the navigation axis is flattened, so a slice of a 4D data
    set has origin ``(nav_index, sig_y, sig_x)`` and shape
    ``(n_frames, sig_h, sig_w)``.

    >>> s = Slice(origin=(10, 0, 0), shape=Shape((5, 8, 8), sig_dims=2))
    >>> s.get()
    (slice(10, 15, None), slice(0, 8, None), slice(0, 8, None))
    >>> s.intersection_with(Slice((12, 4, 0), Shape((10, 8, 8), sig_dims=2)))
    Slice(origin=(12, 4, 0), shape=Shape((3, 4, 8), sig_dims=2))
    """

    __slots__ = ("origin", "shape")

    def __init__(self, origin: Sequence[int], shape: Shape):
        self.origin = tuple(int(o) for o in origin)
        if not isinstance(shape, Shape):
            raise SliceUsageError(f"Slice needs a raytile.common.Shape as shape, got {shape!r}")
        self.shape = shape
        if len(self.origin) != len(shape):
            raise SliceUsageError(f"origin {self.origin} and shape {shape} differ in length")

    @classmethod
    def from_shape(cls, shape: Sequence[int], sig_dims: int) -> "Slice":
        """The slice at the zero origin covering ``shape``.

        >>> Slice.from_shape((4, 16, 16), sig_dims=2).origin
        (0, 0, 0)
        """
        return cls((0,) * len(shape), Shape(shape, sig_dims=sig_dims))

    @property
    def sig_dims(self) -> int:
        return self.shape.sig_dims

    # -- slicing arrays -------------------------------------------------------
    @overload
    def get(self, arr: None = None, sig_only: bool = False, nav_only: bool = False) -> tuple[slice, ...]: ...

    @overload
    def get(self, arr: Any, sig_only: bool = False, nav_only: bool = False) -> Any: ...

    def get(self, arr: Any = None, sig_only: bool = False, nav_only: bool = False) -> Any:
        """Python slices for this region, or ``arr`` sliced by them.

        ``sig_only``: the signal part; applied to ``arr`` it slices the last
        dims, whatever comes before (frames, a stack of masks).
        ``nav_only``: the navigation part, applied to the leading dims.

        >>> s = Slice((0, 0, 12, 12), Shape((16, 16, 4, 4), sig_dims=2))
        >>> s.get(np.ones((3, 16, 16)), sig_only=True).shape
        (3, 4, 4)
        """
        nav_dims = self.shape.nav_dims
        slices = tuple(slice(o, o + s) for o, s in zip(self.origin, self.shape))
        if sig_only:
            slices = slices[nav_dims:]
        elif nav_only:
            slices = slices[:nav_dims]
        if arr is None:
            return slices
        if sig_only:
            return arr[(Ellipsis,) + slices]
        return arr[slices]

    # -- geometry -------------------------------------------------------------
    def intersection_with(self, other: "Slice") -> "Slice":
        """The overlap with ``other``; dims without overlap have size 0 (see :meth:`is_null`)."""
        if len(self.origin) != len(other.origin):
            raise SliceUsageError(f"cannot intersect {self} with {other}: different dimensionality")
        if self.shape.sig_dims != other.shape.sig_dims:
            raise SliceUsageError(f"cannot intersect {self} with {other}: different signal dimensionality")
        origin = tuple(max(a, b) for a, b in zip(self.origin, other.origin))
        shape = tuple(
            max(0, min(o1 + s1, o2 + s2) - o)
            for o1, s1, o2, s2, o in zip(self.origin, self.shape, other.origin, other.shape, origin)
        )
        return Slice(origin, Shape(shape, sig_dims=self.shape.sig_dims))

    def is_null(self) -> bool:
        """True when some dim has size 0: the slice covers no data."""
        return any(s == 0 for s in self.shape)

    def clip_to(self, shape: Shape) -> "Slice":
        """The part of this slice inside ``Slice.from_shape(shape)``."""
        return self.intersection_with(Slice((0,) * len(shape), shape))

    def shift(self, other: "Slice") -> "Slice":
        """Express this slice relative to the origin of ``other`` (same shape).

        >>> Slice((5, 3), Shape((2, 2), 1)).shift(Slice((4, 0), Shape((9, 9), 1))).origin
        (1, 3)
        """
        if len(self.origin) != len(other.origin):
            raise SliceUsageError(f"cannot shift {self} relative to {other}: different dimensionality")
        return Slice(tuple(a - b for a, b in zip(self.origin, other.origin)), self.shape)

    def shift_by(self, offset: Sequence[int]) -> "Slice":
        """This slice moved by ``offset`` (same shape)."""
        if len(self.origin) != len(offset):
            raise SliceUsageError(f"cannot shift {self} by {tuple(offset)}: different dimensionality")
        return Slice(tuple(a + int(b) for a, b in zip(self.origin, offset)), self.shape)

    def discard_nav(self) -> "Slice":
        """A copy with origin and shape zeroed in the navigation dims (a per-signal-region key).

        >>> Slice((7, 0, 8), Shape((3, 16, 8), 2)).discard_nav()
        Slice(origin=(0, 0, 8), shape=Shape((0, 16, 8), sig_dims=2))
        """
        origin, shape, sig_dims = self._discard_nav_key()
        return Slice(origin, Shape(shape, sig_dims=sig_dims))

    def _discard_nav_key(self) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """``discard_nav`` as a hashable tuple, without building objects."""
        nd = self.shape.nav_dims
        zeros = (0,) * nd
        return zeros + self.origin[nd:], zeros + self.shape.to_tuple()[nd:], self.shape.sig_dims

    def subslices(self, shape: ShapeLike) -> Iterator["Slice"]:
        """Cover this slice with slices of ``shape`` (smaller at the far borders), in C order.

        >>> [s.shape.to_tuple() for s in Slice.from_shape((3, 4), 1).subslices((2, 3))]
        [(2, 3), (2, 1), (1, 3), (1, 1)]
        """
        sub = Shape(shape, sig_dims=self.shape.sig_dims)
        if sub.dims != self.shape.dims:
            raise SliceUsageError(f"cannot cut {self} into subslices of shape {tuple(sub)}: dimensions differ")
        if any(s <= 0 for s in sub):
            raise SliceUsageError(f"subslice shape {tuple(sub)} must be positive")
        counts = tuple(math.ceil(s / t) for s, t in zip(self.shape, sub))
        ends = tuple(o + s for o, s in zip(self.origin, self.shape))
        sig_dims = self.shape.sig_dims
        for index in np.ndindex(*counts):
            origin = tuple(o + int(i) * t for o, i, t in zip(self.origin, index, sub))
            size = tuple(min(t, e - o) for t, e, o in zip(sub, ends, origin))
            yield Slice(origin, Shape(size, sig_dims=sig_dims))

    @property
    def nav(self) -> "Slice":
        """The navigation part (``sig_dims=0``)."""
        nd = self.shape.nav_dims
        return Slice(self.origin[:nd], self.shape.nav)

    @property
    def sig(self) -> "Slice":
        """The signal part."""
        nd = self.shape.nav_dims
        return Slice(self.origin[nd:], self.shape.sig)

    def flatten_nav(self, containing_shape: ShapeLike) -> "Slice":
        """This slice with its navigation dims merged into one, inside ``containing_shape``.

        The navigation part must be contiguous in C order: ones, then one dim
        of any size, then dims spanning all of ``containing_shape`` from 0.

        >>> Slice((2, 0, 0, 0), Shape((3, 8, 16, 16), 2)).flatten_nav((10, 8, 16, 16))
        Slice(origin=(16, 0, 0), shape=Shape((24, 16, 16), sig_dims=2))
        """
        nd = self.shape.nav_dims
        outer = tuple(containing_shape)[:nd]
        origin = self.origin[:nd]
        nav = self.shape.nav.to_tuple()
        partial = False
        for cs, s, o in zip(outer, nav, origin):
            if not partial:
                if s != 1:
                    partial = True
                    if s > cs:
                        raise SliceUsageError(f"cannot flatten {self} inside {tuple(containing_shape)}: too large")
            elif s != cs or o != 0:
                raise SliceUsageError(
                    f"cannot flatten {self} inside {tuple(containing_shape)}: navigation part not contiguous"
                )
        flat_origin = int(np.ravel_multi_index(origin, outer)) if nd else 0
        return Slice(
            (flat_origin,) + self.origin[nd:],
            Shape((math.prod(nav),) + self.shape.sig.to_tuple(), sig_dims=self.shape.sig_dims),
        )

    def adjust_for_roi(self, roi: Any) -> "Slice":
        """This flat-nav slice in the compressed space of the frames ``roi`` selects.

        The origin becomes the number of selected frames before this slice,
        the nav size the number selected inside it; ``None`` changes nothing.

        >>> roi = np.array([1, 0, 1, 1, 0, 1], bool)
        >>> Slice((2, 0), Shape((3, 4), 1)).adjust_for_roi(roi)
        Slice(origin=(1, 0), shape=Shape((2, 4), sig_dims=1))
        """
        if roi is None:
            return self
        if self.shape.nav_dims != 1:
            raise SliceUsageError(f"adjust_for_roi needs a slice with a flat navigation axis, got {self}")
        flat = roi.reshape(-1)
        start, count = self.origin[0], self.shape[0]
        origin = count_nonzero(flat[:start])
        size = count_nonzero(flat[start:start + count])
        return Slice((origin,) + self.origin[1:], Shape((size,) + self.shape.sig.to_tuple(),
                                                       sig_dims=self.shape.sig_dims))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Slice) and self.origin == other.origin and self.shape == other.shape

    def __hash__(self) -> int:
        return hash((self.origin, self.shape))

    def __repr__(self) -> str:
        return f"Slice(origin={self.origin}, shape={self.shape})"

    def __reduce__(self):
        return (Slice, (self.origin, self.shape))
