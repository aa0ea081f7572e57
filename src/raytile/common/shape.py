"""`Shape`: a tuple of dimensions that knows which trailing ones are signal dims."""

from __future__ import annotations

import math
from typing import Iterable, Iterator

__all__ = ["Shape"]


class Shape:
    """An N-D shape split into navigation (leading) and signal (trailing) dims.

    >>> s = Shape((16, 16, 128, 128), sig_dims=2)
    >>> s.nav, s.sig
    (Shape((16, 16), sig_dims=0), Shape((128, 128), sig_dims=2))
    >>> tuple(s.flatten_nav())
    (256, 128, 128)
    """

    __slots__ = ("_dims", "_sig_dims")

    def __init__(self, dims: Iterable[int], sig_dims: int):
        self._dims = tuple(int(d) for d in dims)
        if not 0 <= sig_dims <= len(self._dims):
            raise ValueError(f"sig_dims={sig_dims} does not fit shape {self._dims}")
        self._sig_dims = int(sig_dims)

    @property
    def sig_dims(self) -> int:
        return self._sig_dims

    @property
    def nav_dims(self) -> int:
        return len(self._dims) - self._sig_dims

    @property
    def nav(self) -> "Shape":
        return Shape(self._dims[: self.nav_dims], sig_dims=0)

    @property
    def sig(self) -> "Shape":
        return Shape(self._dims[self.nav_dims:], sig_dims=self._sig_dims)

    @property
    def size(self) -> int:
        return math.prod(self._dims)

    def flatten_nav(self) -> "Shape":
        return Shape((self.nav.size,) + self.sig.to_tuple(), sig_dims=self._sig_dims)

    def flatten_sig(self) -> "Shape":
        return Shape(self.nav.to_tuple() + (self.sig.size,), sig_dims=1)

    def to_tuple(self) -> tuple[int, ...]:
        return self._dims

    def __iter__(self) -> Iterator[int]:
        return iter(self._dims)

    def __len__(self) -> int:
        return len(self._dims)

    def __getitem__(self, idx):
        return self._dims[idx]

    def __eq__(self, other) -> bool:
        if isinstance(other, Shape):
            return self._dims == other._dims and self._sig_dims == other._sig_dims
        if isinstance(other, tuple):
            return self._dims == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._dims, self._sig_dims))

    def __repr__(self) -> str:
        return f"Shape({self._dims}, sig_dims={self._sig_dims})"

    def __reduce__(self):
        return (Shape, (self._dims, self._sig_dims))
