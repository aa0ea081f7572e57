"""`CorrectionSet`: dark frame, gain map and excluded pixels, applied to float tiles.

``ctx.run_udf(..., corrections=CorrectionSet(...))`` (or a data set's own
``corrections=``) raises the input dtype to float32 and has every tile
corrected in place right after it is read and decoded::

    tile = (tile - dark) * gain
    tile[excluded] = mean of the non-excluded 8-neighbours of each excluded pixel

The constructor and the getters are LiberTEM's
(``libertem.corrections.CorrectionSet``): ``excluded_pixels`` may be a
``sparse.COO`` as LiberTEM documents it, and ``get_dark_frame()``,
``get_gain_map()``, ``get_excluded_pixels()`` return what LiberTEM's return.
An excluded pixel whose neighbours are all excluded or outside the frame
has nothing to be repaired from: by default (``allow_empty=False``) that is
an error as soon as the signal shape is known, with ``allow_empty=True`` the
pixel keeps its dark/gain-corrected value, as in LiberTEM.

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
import sparse
import sparseconverter

from raytile.common.errors import ConfigValidationError, DataSetException, RepairValueError
from raytile.common.shape import Shape
from raytile.common.tiling import TilingScheme

if TYPE_CHECKING:
    from raytile.io.dataset import Partition

__all__ = ["CorrectionSet", "reference_correct", "patch_pixels", "repair_sources", "cuts_neighbourhoods"]


def _describe(value: Any) -> str:
    """A short description of a parameter value for error messages (arrays by shape and dtype)."""
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _frame_param(name: str, value: Any) -> np.ndarray | None:
    """``dark``/``gain`` as given (a numeric array), kept for the getters; ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, sparse.SparseArray) or hasattr(value, "tocoo"):
        raise ConfigValidationError(f"CorrectionSet: {name} must be a dense array, got {_describe(value)}")
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ConfigValidationError(
            f"CorrectionSet: {name} must be a real numeric array, got {name}={_describe(value)}"
        )
    return arr


class _Excluded:
    """``excluded_pixels`` as given, read into a sig-shaped bool mask once the signal shape is known.

    Forms: anything ``sparseconverter`` turns into a ``sparse.COO`` (LiberTEM's
    reading: the stored coordinates are excluded); a NumPy bool mask; a
    non-bool NumPy array, which is a mask (non-zero entries excluded, as
    LiberTEM reads a "roi-like" array) if it has the signal's shape and
    ``(ndim, n)`` coordinates otherwise (``(n, ndim)`` is transposed); a
    list or tuple of pixels ``[(y, x), ...]``, or of one integer array per
    dimension (what ``np.nonzero`` returns).
    """

    def __init__(self, value: Any):
        self.coo: sparse.COO | None = None  # LiberTEM's form (shape known)
        self.array: np.ndarray | None = None  # a NumPy array: a mask or coordinates, read against the sig shape
        self.coords: np.ndarray | None = None  # (n, ndim) or (ndim, n) integer coordinates
        self.per_pixel = False  # coords is (n, ndim)
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biu":
                raise ConfigValidationError(
                    "CorrectionSet: excluded_pixels must be a bool mask, integer coordinates or a sparse.COO, "
                    f"got excluded_pixels={_describe(value)}"
                )
            if value.dtype == bool:
                self.coo = sparseconverter.for_backend(value, sparseconverter.SPARSE_COO)
            else:
                self.array = value
        elif isinstance(value, (list, tuple)):
            self.per_pixel = not (len(value) > 0 and all(isinstance(v, np.ndarray) for v in value))
            try:
                coords = np.asarray(value) if len(value) else np.zeros((0, 0), dtype=np.int64)
            except ValueError as e:  # ragged
                raise ConfigValidationError(
                    f"CorrectionSet: excluded_pixels coordinates are ragged: excluded_pixels={_describe(value)}"
                ) from e
            if coords.dtype.kind not in "iu" and coords.size or coords.ndim != 2:
                raise ConfigValidationError(
                    "CorrectionSet: excluded_pixels as a sequence must list integer pixel coordinates "
                    f"[(y, x), ...] or one integer index array per dimension, got excluded_pixels={_describe(value)}"
                )
            if coords.size and coords.min() < 0:
                raise ConfigValidationError(
                    f"CorrectionSet: excluded_pixels has a negative coordinate: excluded_pixels={_describe(value)}"
                )
            self.coords = coords.astype(np.int64)
        else:
            try:
                self.coo = sparseconverter.for_backend(value, sparseconverter.SPARSE_COO)
            except Exception as e:  # noqa: BLE001 - sparseconverter's UnknownBackendError and conversion errors
                raise ConfigValidationError(
                    "CorrectionSet: excluded_pixels must be a sparse.COO (or another sparse array), a NumPy "
                    f"mask or pixel coordinates, got excluded_pixels={_describe(value)} ({e})"
                ) from e

    @property
    def sig_shape(self) -> tuple[int, ...] | None:
        """The signal shape the value itself fixes (a sparse array's shape), else ``None``."""
        return None if self.coo is None else tuple(int(n) for n in self.coo.shape)

    def mask(self, sig: tuple[int, ...]) -> np.ndarray:
        """The sig-shaped bool mask of the excluded pixels; ``DataSetException`` if it does not fit ``sig``."""
        if self.coo is not None:
            if self.sig_shape != sig:
                raise DataSetException(
                    f"corrections: excluded_pixels has shape {self.sig_shape}, the signal shape is {sig}"
                )
            return self._mask_from_coords(self.coo.coords, sig)
        if self.array is not None and self.array.shape == sig:
            return self.array != 0  # LiberTEM's "roi-like" array
        coords = self.coords if self.coords is not None else self.array
        assert coords is not None
        if coords.size == 0:
            return np.zeros(sig, dtype=bool)
        if coords.ndim != 2:
            raise DataSetException(
                f"corrections: excluded_pixels ({_describe(coords)}) is neither a mask of the signal's shape {sig} "
                "nor (ndim, n) coordinates"
            )
        if self.per_pixel or (self.array is not None and coords.shape[0] != len(sig) == coords.shape[1]):
            coords = coords.T
        if coords.shape[0] != len(sig):
            raise DataSetException(
                f"corrections: excluded_pixels coordinates have {coords.shape[0]} dims, the signal has {len(sig)}"
                f" (signal shape {sig}; a NumPy array is a mask only when it has the signal's shape)"
            )
        return self._mask_from_coords(coords, sig)

    @staticmethod
    def _mask_from_coords(coords: np.ndarray, sig: tuple[int, ...]) -> np.ndarray:
        coords = np.asarray(coords, dtype=np.int64)
        for d, n in enumerate(sig):
            if coords[d].size and (coords[d].min() < 0 or coords[d].max() >= n):
                raise DataSetException(
                    f"corrections: excluded pixel coordinate out of range in dim {d} (size {n}): "
                    f"{int(coords[d].min())}..{int(coords[d].max())}"
                )
        mask = np.zeros(sig, dtype=bool)
        mask[tuple(coords)] = True
        return mask


class CorrectionSet:
    """Corrections for one data set (LiberTEM's ``CorrectionSet`` interface).

    ``dark``: sig-shaped array subtracted from every frame; ``gain``:
    sig-shaped array the dark-subtracted frames are multiplied by;
    ``excluded_pixels``: defective pixels to patch from their neighbours, as
    a ``sparse.COO`` of the signal's shape (LiberTEM's documented form:
    ``sparse.COO(coords=coords, data=1, shape=ds.shape.sig)``), a sig-shaped
    mask (bool, or non-zero entries), or coordinates (``[(y, x), ...]`` or
    ``(ndim, n)`` as from ``np.nonzero``); ``allow_empty``: leave a pixel
    without usable neighbours uncorrected instead of raising
    :class:`~raytile.common.errors.ConfigValidationError` (LiberTEM's
    default, ``False``).

    Shapes are checked against the data set by :meth:`check` (``run_udf``
    calls it): :class:`~raytile.common.errors.DataSetException` if they do
    not fit. Bad parameter types raise ``ConfigValidationError``.

    >>> import sparse
    >>> cs = CorrectionSet(excluded_pixels=sparse.COO(coords=[[1], [2]], data=1, shape=(4, 4)))
    >>> cs.get_excluded_pixels().shape, cs.get_dark_frame() is None, cs.have_corrections()
    ((4, 4), True, True)
    """

    def __init__(self, dark: np.ndarray | None = None, gain: np.ndarray | None = None,
                 excluded_pixels: Any = None, allow_empty: bool = False):
        if not isinstance(allow_empty, (bool, np.bool_)):
            raise ConfigValidationError(f"CorrectionSet: allow_empty must be a bool, got allow_empty={allow_empty!r}")
        self._dark = _frame_param("dark", dark)
        self._gain = _frame_param("gain", gain)
        #: the dark frame and gain map as float32, as :meth:`apply` uses them
        self.dark = None if self._dark is None else np.asarray(self._dark, dtype=np.float32)
        self.gain = None if self._gain is None else np.asarray(self._gain, dtype=np.float32)
        self.allow_empty = bool(allow_empty)
        self._excluded = None if excluded_pixels is None else _Excluded(excluded_pixels)
        self._excluded_mask: np.ndarray | None = None
        self._mask_sig: tuple[int, ...] | None = None
        sig = self._known_sig()
        if sig is not None and self._excluded is not None:
            self.excluded_mask(sig)  # LiberTEM checks the repair environments here already

    # -- LiberTEM's getters ---------------------------------------------------
    def get_dark_frame(self) -> np.ndarray | None:
        """The dark frame as given (not converted), or ``None``."""
        return self._dark

    def get_gain_map(self) -> np.ndarray | None:
        """The gain map as given (not converted), or ``None``."""
        return self._gain

    def get_excluded_pixels(self) -> sparse.COO | None:
        """The excluded pixels as a ``sparse.COO`` of the signal's shape, or ``None`` if none were given.

        A ``sparse.COO`` given to the constructor comes back as it is, a mask
        as LiberTEM converts it (its non-zero entries, its dtype), coordinates
        as a bool ``COO``. A non-bool array or coordinates need the signal
        shape: from ``dark``/``gain`` or :meth:`check`; before that this
        raises ``DataSetException``.
        """
        if self._excluded is None:
            return None
        if self._excluded.coo is not None:
            return self._excluded.coo
        sig = self._known_sig()
        if sig is not None and self._excluded.array is not None and self._excluded.array.shape == sig:
            return sparseconverter.for_backend(self._excluded.array, sparseconverter.SPARSE_COO)  # its dtype
        if sig is None:
            raise DataSetException(
                "CorrectionSet.get_excluded_pixels: excluded_pixels were given as coordinates or an integer array "
                "and the signal shape is not known yet: give a dark frame or gain map, a bool mask or a sparse.COO, "
                "or call check(dataset.shape) first"
            )
        return sparse.COO.from_numpy(self.excluded_mask(sig))

    def have_corrections(self) -> bool:
        """Whether any correction was given (as in LiberTEM, also an empty set of excluded pixels)."""
        return self._dark is not None or self._gain is not None or self._excluded is not None

    # -- the contract used by the planner and part runner ----------------------
    def _known_sig(self) -> tuple[int, ...] | None:
        if self._mask_sig is not None:
            return self._mask_sig
        if self._excluded is not None and self._excluded.sig_shape is not None:
            return self._excluded.sig_shape
        for arr in (self._dark, self._gain):
            if arr is not None:
                return tuple(int(n) for n in arr.shape)
        return None

    def check(self, shape: Any) -> None:
        """Raise ``DataSetException`` if the corrections do not fit the data set's ``shape`` (a Shape or sig tuple).

        Also reads excluded pixel coordinates against the signal shape and
        checks their repair environments (``ConfigValidationError`` for an
        empty one unless ``allow_empty``).
        """
        sig = tuple(shape.sig.to_tuple()) if hasattr(shape, "sig") else tuple(shape)
        for name, arr in (("dark", self._dark), ("gain", self._gain)):
            if arr is not None and arr.shape != sig:
                raise DataSetException(
                    f"corrections: {name} frame has shape {arr.shape}, the data set's signal shape is {sig}"
                )
        self.excluded_mask(sig)

    def excluded_mask(self, sig_shape: Any) -> np.ndarray | None:
        """The sig-shaped bool mask of excluded pixels for ``sig_shape`` (``None`` if none are excluded)."""
        sig = tuple(int(n) for n in sig_shape)
        if self._excluded is None:
            return None
        if self._mask_sig != sig:
            mask = self._excluded.mask(sig)
            if not self.allow_empty:
                _check_repairable(mask)
            self._excluded_mask = mask if mask.any() else None
            self._mask_sig = sig
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

    def apply(self, tile: np.ndarray, tile_slice: Any) -> None:
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
        if self._excluded is None:
            return
        sig = self._known_sig()
        if sig is None:
            raise DataSetException("corrections: call check(dataset.shape) before apply() "
                                   "to place excluded pixel coordinates")
        mask = self.excluded_mask(sig)
        if mask is not None:
            sub = mask[sig_sl]
            if sub.any():
                patch_pixels(tile, sub)

    def __repr__(self) -> str:
        parts = [n for n, v in (("dark", self._dark), ("gain", self._gain), ("excluded_pixels", self._excluded))
                 if v is not None]
        return f"CorrectionSet({', '.join(parts) or 'empty'}{', allow_empty=True' if self.allow_empty else ''})"


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


def repair_sources(mask: np.ndarray) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """For every excluded pixel of ``mask``: its coordinates and the ``(k, ndim)`` non-excluded neighbours
    inside the frame (the 3^n - 1 neighbourhood) it is repaired from; ``k`` may be 0.

    >>> m = np.zeros((3, 3), dtype=bool); m[0, 0] = m[0, 1] = True
    >>> [(c, len(nb)) for c, nb in repair_sources(m)]
    [((0, 0), 2), ((0, 1), 4)]
    """
    sig = np.array(mask.shape)
    offsets = np.array([o for o in np.ndindex(*(3,) * mask.ndim) if any(v != 1 for v in o)], dtype=np.int64) - 1
    out = []
    for c in np.argwhere(mask):
        nb = c + offsets
        nb = nb[np.all((nb >= 0) & (nb < sig), axis=1)]
        nb = nb[~mask[tuple(nb.T)]]
        out.append((tuple(int(v) for v in c), nb))
    return out


def _check_repairable(mask: np.ndarray) -> None:
    """``RepairValueError`` naming the excluded pixels that have no neighbour to be repaired from."""
    empty = [c for c, nb in repair_sources(mask) if len(nb) == 0]
    if empty:
        listed = ", ".join(map(str, empty[:10])) + (f" and {len(empty) - 10} more" if len(empty) > 10 else "")
        raise RepairValueError(
            f"CorrectionSet: excluded_pixels {listed} have no non-excluded neighbour to be repaired from "
            "(allow_empty=False); pass allow_empty=True to leave them uncorrected"
        )


def patch_pixels(tile: np.ndarray, mask: np.ndarray) -> None:
    """Replace ``tile[:, mask]`` by the mean of each pixel's non-excluded neighbours (8-neighbourhood in 2D).

    Works for any number of signal dims; a pixel with no usable neighbour is
    left as it is (LiberTEM's ``allow_empty=True``).
    """
    frames = tile.reshape((tile.shape[0],) + mask.shape)
    for c, nb in repair_sources(mask):
        if len(nb):
            frames[(slice(None),) + c] = frames[(slice(None),) + tuple(nb.T)].mean(axis=1)


def reference_correct(frames: np.ndarray, corrections: CorrectionSet) -> np.ndarray:
    """Numpy reference: the corrected float32 copy of ``frames`` (``(n, *sig)``), whole frames."""
    out = np.array(frames, dtype=np.float32)
    if corrections.dark is not None:
        out -= corrections.dark
    if corrections.gain is not None:
        out *= corrections.gain
    mask = corrections.excluded_mask(out.shape[1:])
    if mask is not None:
        patch_pixels(out, mask)
    return out


# LiberTEM's ``libertem.io.corrections.detector`` (``correct``, ``RepairValueError``) is found at its
# ported path raytile.io.corrections.detector in the package io/_corrections, lent as this module's path.
__path__ = [__import__("os").path.join(__import__("os").path.dirname(__file__), "_corrections")]
