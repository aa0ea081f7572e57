"""`CorrectionSet`: dark frame, gain map and excluded pixels, applied to float tiles.

``ctx.run_udf(..., corrections=CorrectionSet(...))`` (or a data set's own
``corrections=``) raises the input dtype to float32 and has every tile
corrected in place right after it is read and decoded::

    tile = (tile - dark) * gain
    tile[excluded] = mean of the non-excluded 8-neighbours of each excluded pixel

Excluded pixels are patched from neighbours inside the tile's signal slice.
So that this equals patching whole frames, the run's tiling goes through
:meth:`CorrectionSet.adjust_scheme`: a scheme whose signal cuts separate an
excluded pixel from one of its neighbours is replaced by whole-frame tiles
(of about the same size in bytes); other sig-sliced schemes stay.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.tiling import TilingScheme

if TYPE_CHECKING:
    from raytile.io.dataset import Partition

__all__ = ["CorrectionSet", "reference_correct"]


class CorrectionSet:
    """Corrections for one data set.

    ``dark``: sig-shaped array subtracted from every frame; ``gain``:
    sig-shaped array the dark-subtracted frames are multiplied by;
    ``excluded_pixels``: a sig-shaped bool mask or a sequence of sig
    coordinates (``[(y, x), ...]`` or an ``(ndim, n)`` array as from
    ``np.nonzero``) of defective pixels to patch from their neighbours.
    """

    def __init__(self, dark: Any = None, gain: Any = None, excluded_pixels: Any = None,
                 allow_empty: bool = True):
        self.dark = None if dark is None else np.asarray(dark, dtype=np.float32)
        self.gain = None if gain is None else np.asarray(gain, dtype=np.float32)
        self._excluded_in = excluded_pixels
        self._excluded_mask: np.ndarray | None = None
        self.allow_empty = allow_empty

    # -- the contract used by the planner and part runner ------------------
    def have_corrections(self) -> bool:
        return self.dark is not None or self.gain is not None or self._has_excluded()

    def _has_excluded(self) -> bool:
        ex = self._excluded_in
        if ex is None:
            return False
        arr = np.asarray(ex)
        return bool(arr.dtype == bool and arr.any() or arr.dtype != bool and arr.size > 0)

    def check(self, shape) -> None:
        """Raise DataSetException if the corrections do not fit the data set's ``shape``."""
        sig = tuple(shape.sig.to_tuple()) if hasattr(shape, "sig") else tuple(shape)
        for name, arr in (("dark", self.dark), ("gain", self.gain)):
            if arr is not None and arr.shape != sig:
                raise DataSetException(
                    f"corrections: {name} frame has shape {arr.shape}, the data set's signal shape is {sig}"
                )
        self._excluded_mask = self._make_mask(sig)

    def _make_mask(self, sig: tuple[int, ...]) -> np.ndarray | None:
        ex = self._excluded_in
        if ex is None:
            return None
        arr = np.asarray(ex)
        if arr.dtype == bool:
            if arr.shape != sig:
                raise DataSetException(
                    f"corrections: excluded_pixels mask has shape {arr.shape}, the signal shape is {sig}"
                )
            return arr.copy() if arr.any() else None
        if arr.size == 0:
            return None
        coords = arr.astype(np.int64)
        if coords.ndim != 2:
            raise DataSetException(f"corrections: excluded_pixels must be coordinates, got shape {arr.shape}")
        if coords.shape[0] != len(sig) and coords.shape[1] == len(sig):
            coords = coords.T
        if coords.shape[0] != len(sig):
            raise DataSetException(
                f"corrections: excluded_pixels coordinates have {coords.shape[0]} dims, the signal has {len(sig)}"
            )
        for d, n in enumerate(sig):
            if coords[d].min() < 0 or coords[d].max() >= n:
                raise DataSetException(
                    f"corrections: excluded pixel coordinate out of range in dim {d} (size {n})"
                )
        mask = np.zeros(sig, dtype=bool)
        mask[tuple(coords)] = True
        return mask

    def excluded_mask(self, sig_shape) -> np.ndarray | None:
        if self._excluded_mask is None or self._excluded_mask.shape != tuple(sig_shape):
            self._excluded_mask = self._make_mask(tuple(sig_shape))
        return self._excluded_mask

    def adjust_scheme(self, scheme: TilingScheme, partition: "Partition",
                      roi: np.ndarray | None = None) -> TilingScheme:
        """``scheme``, or whole-frame tiles if its signal cuts separate an excluded pixel from a neighbour.

        The whole-frame tiles keep about the bytes of ``scheme``'s tiles (a
        multiple of the partition's base depth, then the partition's
        ``adjust_tileshape`` has its say).
        """
        sig = scheme.dataset_shape.sig.to_tuple()
        mask = self.excluded_mask(sig)
        if mask is None or scheme.covers_whole_frames or not cuts_neighbourhoods(mask, scheme.sig_shape):
            return scheme
        base_depth = int(partition.get_base_shape(roi)[0])
        depth = scheme.depth * math.prod(scheme.sig_shape) // math.prod(sig)
        depth = max(base_depth, depth // base_depth * base_depth)
        tileshape = tuple(int(v) for v in partition.adjust_tileshape((depth,) + sig, roi))
        return TilingScheme.make_for_shape(Shape(tileshape, sig_dims=len(sig)), scheme.dataset_shape)

    def apply(self, tile: np.ndarray, tile_slice) -> None:
        """Correct ``tile`` (``(frames, *sig_slice)``, float) in place; ``tile_slice`` says where it lies."""
        if not isinstance(tile, np.ndarray):
            raise DataSetException(f"corrections need dense numpy tiles, got {type(tile).__name__}")
        if not tile.flags.writeable:
            raise DataSetException(
                "corrections: the tile is read-only (read straight from a file map); corrections need a "
                "float input dtype different from the data set's, or a copy of the tile"
            )
        sig_sl = tile_slice.get(sig_only=True)
        if self.dark is not None:
            tile -= self.dark[sig_sl]
        if self.gain is not None:
            tile *= self.gain[sig_sl]
        mask = self._excluded_mask
        if mask is None and self._has_excluded():
            arr = np.asarray(self._excluded_in)
            if arr.dtype != bool:
                raise DataSetException("corrections: call check(dataset.shape) before apply() "
                                       "to place excluded pixel coordinates")
            mask = self._excluded_mask = arr
        if mask is not None:
            sub = mask[sig_sl]
            if sub.any():
                patch_pixels(tile, sub)

    def __repr__(self) -> str:
        parts = [n for n, v in (("dark", self.dark), ("gain", self.gain)) if v is not None]
        if self._has_excluded():
            parts.append("excluded_pixels")
        return f"CorrectionSet({', '.join(parts) or 'empty'})"


def cuts_neighbourhoods(mask: np.ndarray, tile_sig: tuple[int, ...]) -> bool:
    """Whether a grid of ``tile_sig`` signal tiles puts a neighbour of an excluded pixel in another tile."""
    coords = np.argwhere(mask)
    for d, (n, t) in enumerate(zip(mask.shape, tile_sig)):
        c = coords[:, d]
        below = (c > 0) & ((c - 1) // t != c // t)
        above = (c + 1 < n) & ((c + 1) // t != c // t)
        if np.any(below | above):
            return True
    return False


def patch_pixels(tile: np.ndarray, mask: np.ndarray) -> None:
    """Replace ``tile[:, mask]`` by the mean of each pixel's non-excluded neighbours (8-neighbourhood in 2D).

    Works for any number of signal dims (the 3^n - 1 neighbourhood); a pixel
    with no usable neighbour becomes 0.
    """
    sig = mask.shape
    coords = np.argwhere(mask)
    offsets = np.array([o for o in np.ndindex(*(3,) * len(sig)) if any(v != 1 for v in o)], dtype=np.int64) - 1
    frames = tile.reshape((tile.shape[0],) + sig)
    for c in coords:
        nb = c + offsets
        ok = np.all((nb >= 0) & (nb < np.array(sig)), axis=1)
        nb = nb[ok]
        nb = nb[~mask[tuple(nb.T)]]
        idx = (slice(None),) + tuple(int(v) for v in c)
        if len(nb):
            frames[idx] = frames[(slice(None),) + tuple(nb.T)].mean(axis=1)
        else:
            frames[idx] = 0


def reference_correct(frames: np.ndarray, corrections: CorrectionSet) -> np.ndarray:
    """Numpy reference: the corrected float32 copy of ``frames`` (``(n, *sig)``), whole frames."""
    out = np.array(frames, dtype=np.float32)
    if corrections.dark is not None:
        out -= corrections.dark
    if corrections.gain is not None:
        out *= corrections.gain
    mask = corrections._make_mask(out.shape[1:])
    if mask is not None:
        patch_pixels(out, mask)
    return out
