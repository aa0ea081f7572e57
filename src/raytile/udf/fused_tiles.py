"""Two built-in UDFs that read the same tiles, run in one pass over each tile.

A sum frame beside a virtual detector (SumUDF and ApplyMasksUDF with one
mask: the live view's usual pair) reads every tile twice, once per UDF,
and on integer detector frames each pass costs about as much as reading
the tile from memory (256x256 uint16: ~10 us a frame each, most of such a
run's time). :func:`fused_pair` finds such a pair among a partition's UDFs
and :func:`process_pair` gives both their tile in one pass
(:func:`~raytile.udf.integer_tiles.sum_and_dot_row_into`, the same
operations as the two kernels), where the tile, the buffers and the mask
are what those kernels take; otherwise it says no and the run calls the
two UDFs one by one, as it does for every other UDF.

The run loop (``raytile.runtime.part_runner``) asks: a partition's
``fused_pair(udfs, methods, backends)`` once, then ``process_pair`` at
each tile, with both UDFs' views and meta set for it.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from raytile.udf._tiles import flat2d
from raytile.udf.applymasks import ApplyMasksUDF
from raytile.udf.base import BACKEND_NUMPY, UDF
from raytile.udf.integer_tiles import is_integer_tile, sum_and_dot_row_into
from raytile.udf.sum import SumUDF

__all__ = ["fused_pair", "process_pair"]


def fused_pair(udfs: Sequence[UDF], methods: Sequence[str], backends: Sequence[str]) -> tuple[int, int] | None:
    """The indices ``(sum, masks)`` of a SumUDF and an ApplyMasksUDF (those classes themselves, not
    subclasses, which may process tiles their own way) that both process whole tiles on numpy, the
    masks without ``shifts``; None if the UDFs hold no such pair."""
    def first(cls: type) -> int | None:
        return next((i for i, u in enumerate(udfs) if type(u) is cls and methods[i] == "tile"
                     and backends[i] == BACKEND_NUMPY), None)

    sums, masks = first(SumUDF), first(ApplyMasksUDF)
    if sums is None or masks is None or udfs[masks].params.shifts is not None:
        return None
    return sums, masks


def process_pair(sum_udf: UDF, masks_udf: UDF, tile: Any) -> bool:
    """The UDFs of :func:`fused_pair` (a SumUDF, an ApplyMasksUDF): both ``process_tile(tile)`` in one
    pass, if ``tile`` is a dense numpy tile of 8- or 16-bit integers, the sum's view a C-contiguous
    float32 array, and the masks one dense mask whose products are float32 (what their kernels do);
    True if done, False (nothing done) otherwise."""
    flat = flat2d(tile)
    sums = sum_udf.results.intensity
    if not (isinstance(sums, np.ndarray) and is_integer_tile(flat, sums.dtype) and sums.flags.c_contiguous):
        return False
    products = masks_udf.results.intensity
    if not (isinstance(products, np.ndarray) and products.dtype == np.float32
            and products.shape == (flat.shape[0], 1)):
        return False
    rows = masks_udf.task_data.engine.integer_rows(flat)
    if not (isinstance(rows, np.ndarray) and rows.shape == (1, flat.shape[1]) and rows.dtype == np.float32):
        return False
    dots = np.zeros(flat.shape[0], dtype=np.float32)  # as the engine: the products, then added to the view
    sum_and_dot_row_into(flat, sums.reshape(-1), np.ascontiguousarray(rows[0]), dots)
    products[:, 0] += dots
    return True
