"""`Shape`: a tuple of dimensions that knows which trailing ones are signal dims.

Mirrors ``libertem.common.shape.Shape``: the same constructor, properties
and arithmetic, so ported UDFs use it unchanged.
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator, Union, overload

__all__ = ["Shape", "ShapeLike"]


class Shape:
    """An N-D shape split into navigation (leading) and signal (trailing) dims.

    >>> s = Shape((16, 16, 128, 128), sig_dims=2)
    >>> s.nav, s.sig
    (Shape((16, 16), sig_dims=0), Shape((128, 128), sig_dims=2))
    >>> tuple(s.flatten_nav()), tuple(s.flatten_sig()), s.size, s.dims
    ((256, 128, 128), (16, 16, 16384), 4194304, 4)

    Adding a tuple on the right appends signal dims, on the left inserts
    navigation dims (after the existing ones), as in LiberTEM:

    >>> s.sig + (3,), (4,) + s.nav
    (Shape((128, 128, 3), sig_dims=3), Shape((16, 16, 4), sig_dims=0))

    A Shape equals another with the same dims and ``sig_dims``, and equals
    the plain tuple of its dims: ``s == (16, 16, 128, 128)``.
    """

    __slots__ = ("_dims", "_sig_dims")

    def __init__(self, shape: "ShapeLike", sig_dims: int):
        self._dims = tuple(int(d) for d in shape)
        if not 0 <= sig_dims <= len(self._dims):
            raise ValueError(f"sig_dims={sig_dims} does not fit shape {self._dims}")
        self._sig_dims = int(sig_dims)

    @property
    def sig_dims(self) -> int:
        """Number of signal (trailing) dims."""
        return self._sig_dims

    @property
    def nav_dims(self) -> int:
        """Number of navigation (leading) dims."""
        return len(self._dims) - self._sig_dims

    @property
    def dims(self) -> int:
        """Number of dims, ``nav_dims + sig_dims``."""
        return len(self._dims)

    @property
    def nav(self) -> "Shape":
        """The navigation dims only (``sig_dims=0``)."""
        return Shape(self._dims[: self.nav_dims], sig_dims=0)

    @property
    def sig(self) -> "Shape":
        """The signal dims only (all of them signal)."""
        return Shape(self._dims[self.nav_dims:], sig_dims=self._sig_dims)

    @property
    def size(self) -> int:
        """Number of elements, a Python ``int``.

        The empty shape (no dims, e.g. the nav of a sig-only shape) covers nothing: size 0, as in
        LiberTEM (``numpy.empty(()).size`` would say 1).

        >>> Shape((), sig_dims=0).size, Shape((16, 16), sig_dims=2).nav.size
        (0, 0)
        """
        return math.prod(self._dims) if self._dims else 0

    def flatten_nav(self) -> "Shape":
        """All navigation dims merged into one; unchanged if there are none.

        >>> Shape((5, 5, 16, 16), sig_dims=2).flatten_nav()
        Shape((25, 16, 16), sig_dims=2)
        """
        if self.nav_dims == 0:
            return self
        return Shape((self.nav.size,) + self.sig.to_tuple(), sig_dims=self._sig_dims)

    def flatten_sig(self) -> "Shape":
        """All signal dims merged into one; unchanged if there are none.

        >>> Shape((5, 5, 16, 16), sig_dims=2).flatten_sig()
        Shape((5, 5, 256), sig_dims=1)
        """
        if self._sig_dims == 0:
            return self
        return Shape(self.nav.to_tuple() + (self.sig.size,), sig_dims=1)

    def to_tuple(self) -> tuple[int, ...]:
        """The dims as a plain tuple."""
        return self._dims

    def __iter__(self) -> Iterator[int]:
        return iter(self._dims)

    def __len__(self) -> int:
        return len(self._dims)

    @overload
    def __getitem__(self, idx: int) -> int: ...

    @overload
    def __getitem__(self, idx: slice) -> tuple[int, ...]: ...

    def __getitem__(self, idx: int | slice) -> int | tuple[int, ...]:
        return self._dims[idx]

    def __add__(self, other: object) -> "Shape":
        """``shape + tuple``: the tuple's dims appended as signal dims."""
        if isinstance(other, tuple):
            return Shape(self._dims + tuple(other), sig_dims=self._sig_dims + len(other))
        return NotImplemented

    def __radd__(self, other: object) -> "Shape":
        """``tuple + shape``: the tuple's dims inserted after the navigation dims, as navigation dims."""
        if isinstance(other, tuple):
            nd = self.nav_dims
            return Shape(self._dims[:nd] + tuple(other) + self._dims[nd:], sig_dims=self._sig_dims)
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Shape):
            return self._dims == other._dims and self._sig_dims == other._sig_dims
        if isinstance(other, tuple):
            return self._dims == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._dims, self._sig_dims))

    def __repr__(self) -> str:
        return repr(tuple(self._dims))  # LiberTEM's repr: the dims as a tuple

    def __reduce__(self):
        return (Shape, (self._dims, self._sig_dims))


#: A Shape or any sequence of ints.
ShapeLike = Union[Shape, Iterable[int]]
