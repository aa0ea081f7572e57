"""Tiling an array-like source: the reading that :meth:`Partition.get_tiles` does for every array-backed
format (views when it can, reused buffers when an ROI or a dtype asks for a copy)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme

__all__ = ["iter_array_tiles"]


def iter_array_tiles(
    source, scheme: TilingScheme, roi: np.ndarray | None, dest_dtype: np.dtype, nav_origin: int,
) -> Iterator[DataTile]:
    """Tile an array-like ``(frames, *sig)`` ``source`` by ``scheme``.

    ``roi`` is a flat bool mask over the source's frames (or None);
    ``nav_origin`` is the (ROI-compressed) nav index of the first frame yielded.
    """
    depth = scheme.depth
    sig_dims = len(scheme.sig_shape)
    straight = roi is None and np.dtype(source.dtype) == dest_dtype
    frame_idx = None if roi is None else np.flatnonzero(roi)
    n = source.shape[0] if frame_idx is None else len(frame_idx)
    buffers: dict[tuple, np.ndarray] = {}
    for block_start in range(0, n, depth):
        block_stop = min(block_start + depth, n)
        count = block_stop - block_start
        nav_sl: slice | np.ndarray
        if frame_idx is None:
            nav_sl = slice(block_start, block_stop)
        else:
            idx = frame_idx[block_start:block_stop]
            contiguous = idx[-1] - idx[0] + 1 == len(idx)
            nav_sl = slice(idx[0], idx[-1] + 1) if contiguous else idx
        for scheme_idx, sig_slice in enumerate(scheme.sig_slices):
            tile_slice = Slice(
                (nav_origin + block_start,) + sig_slice.origin,
                Shape((count,) + sig_slice.shape.to_tuple(), sig_dims=sig_dims),
            )
            src = source[(nav_sl,) + sig_slice.get()]
            if straight:
                data = src
            elif not isinstance(src, np.ndarray) and hasattr(src, "astype"):
                # a sparse (or device) source keeps its format: no dense buffer to copy it into
                data = src if np.dtype(src.dtype) == dest_dtype else src.astype(dest_dtype)
            else:
                shape = (count,) + sig_slice.shape.to_tuple()
                buf = buffers.get(shape)
                if buf is None:
                    buf = buffers[shape] = np.empty(shape, dtype=dest_dtype)
                np.copyto(buf, src, casting="unsafe")
                data = buf
            yield DataTile(data, tile_slice, scheme_idx)
