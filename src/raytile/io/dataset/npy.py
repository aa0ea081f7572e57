"""``libertem.io.dataset.npy`` at its ported path: the NPY data set and ``read_npy_info``."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.formats.npy import NPYDataSet, read_npy_header
from raytile.io.message_params import NPYDatasetParams

__all__ = ["NPYDataSet", "NPYDatasetParams", "NPYInfo", "read_npy_info"]


class NPYInfo(NamedTuple):
    """What a .npy header says: element dtype, array shape, element count and byte offset of the data."""

    dtype: np.dtype
    shape: tuple[int, ...]
    count: int  # type: ignore[assignment]  # LiberTEM's field name; shadows tuple.count
    offset: int


def read_npy_info(path: str) -> NPYInfo:
    """The header of the .npy file at ``path``; DataSetException if its data is not C-contiguous."""
    shape, dtype, fortran, offset = read_npy_header(path)
    if fortran and sum(1 for n in shape if n > 1) > 1:
        raise DataSetException(f"{path}: the array is stored in Fortran order; NPY data sets need "
                               "C-contiguous arrays (convert it with np.ascontiguousarray and save again)")
    return NPYInfo(dtype=np.dtype(dtype), shape=tuple(shape), count=math.prod(shape), offset=offset)
