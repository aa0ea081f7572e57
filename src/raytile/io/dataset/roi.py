"""Regions of interest: :func:`validate_roi` (the forms LiberTEM accepts, as one flat bool array) and
``ds.roi[...]`` (:class:`RoiHelper`)."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Iterator, Sequence, Union

import numpy as np
import sparseconverter
from numpy.typing import ArrayLike

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.sparse import to_dense, to_sparse
from raytile.io.params import show

if TYPE_CHECKING:
    from raytile.io.dataset.dataset import DataSet

__all__ = ["RoiHelper", "RoiLike", "validate_roi", "roi_nav_indices"]

#: An ROI in the forms LiberTEM accepts (see :func:`validate_roi`): a bool (or numeric) array of the nav
#: shape or flat, a sparse array (``sparse.COO``, ``scipy.sparse``: array-like by ``__array__``), or a list of ``((y, x), value)`` entries; None for every frame.
RoiLike = Union[ArrayLike, Sequence[tuple[tuple[int, ...], bool]], None]


class RoiHelper:
    """``ds.roi[index]``: a bool array of the data set's nav shape, True at ``index``."""

    def __init__(self, ds: "DataSet"):
        self._ds = ds

    def __getitem__(self, index: Any) -> np.ndarray:
        roi = np.zeros(self._ds.shape.nav.to_tuple(), dtype=bool)
        roi[index] = True
        return roi


def validate_roi(roi: RoiLike, shape: Shape) -> np.ndarray | None:
    """Check an ROI against the nav shape; return it as a flat bool array (or None).

    Accepted as LiberTEM accepts them: a dense array, a sparse array (``sparse.COO``,
    ``scipy.sparse``...), a list of ``((y, x), value)`` entries with one truth value, and
    a non-bool array, cast to bool with LiberTEM's ``UserWarning``.
    """
    if roi is None:
        return None
    nav = shape.nav.to_tuple()
    try:
        if isinstance(roi, (list, tuple)) and roi and _is_coordinate_list(roi):
            roi = to_dense(to_sparse(roi, shape=nav))
        elif not isinstance(roi, np.ndarray) and sparseconverter.get_backend(roi) is not None:
            roi = to_dense(roi)
        roi = np.asarray(roi)
    except ValueError:  # a ragged nested list, coordinates with mixed truth values
        raise DataSetException(f"roi must be a boolean array of the nav shape {nav}, got {show(roi)}") from None
    if roi.dtype != bool:
        if roi.dtype.kind not in "biuf":
            raise DataSetException(f"roi must be a boolean array, got dtype {roi.dtype}")
        warnings.warn(f"ROI dtype is {roi.dtype}, expected bool. Attempting cast to bool.", stacklevel=3)
        roi = roi.astype(bool)
    if roi.shape != nav and roi.shape != (math.prod(nav),):
        raise DataSetException(
            f"roi shape {roi.shape} does not match the data set's nav shape {nav}"
        )
    return roi.reshape(-1)


def _is_coordinate_list(roi: Sequence[Any]) -> bool:
    """``[((y, x), True), ...]`` or one coordinate ``(y, x)``: an ROI given sparsely (see ``to_sparse``)."""
    return all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in roi) or all(
        isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[0], (list, tuple)) for e in roi)


def roi_nav_indices(roi: np.ndarray, part_slice: Slice) -> Iterator[tuple[int, ...]]:
    """The nav indices (in the data set's nav coordinates, C order) of the frames a boolean nav-shaped
    ``roi`` selects inside ``part_slice`` (e.g. a partition's slice); LiberTEM's
    ``libertem.io.dataset.base._roi_to_nd_indices``."""
    nav_dims = part_slice.shape.nav.dims
    origin = np.asarray(part_slice.origin[:nav_dims])
    inside = np.asarray(roi)[part_slice.get(nav_only=True)]
    for idx in np.argwhere(inside):
        yield tuple(int(v) for v in idx + origin)
