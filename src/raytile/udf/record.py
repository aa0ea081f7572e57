"""`RecordUDF`: write the data set (or the frames in its ROI) to a NumPy ``.npy`` file."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from raytile.common.errors import UDFException
from raytile.udf.base import UDF

__all__ = ["RecordUDF", "record_shape"]


def record_shape(dataset_shape: Any, roi: np.ndarray | None) -> tuple[int, ...]:
    """Shape of the array :class:`RecordUDF` writes: the data set's shape, or ``(frames in roi, *sig)``.

    >>> from raytile.common.shape import Shape
    >>> record_shape(Shape((4, 5, 8, 8), sig_dims=2), None)
    (4, 5, 8, 8)
    >>> record_shape(Shape((4, 5, 8, 8), sig_dims=2), np.eye(4, 5, dtype=bool))
    (4, 8, 8)
    """
    sig = tuple(dataset_shape.sig.to_tuple())
    if roi is None:
        return tuple(dataset_shape.to_tuple())
    return (int(np.count_nonzero(roi)),) + sig


def _npy_header(path: str) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """``(shape, fortran_order, dtype)`` of an existing .npy file, or None if absent or not .npy."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                return np.lib.format.read_array_header_1_0(f)
            if version == (2, 0):
                return np.lib.format.read_array_header_2_0(f)
            return None
    except (OSError, ValueError):
        return None


class RecordUDF(UDF):
    """Record the input data as a NumPy ``.npy`` file (LiberTEM's ``RecordUDF``).

    Parameters
    ----------
    filename
        Where to write (str or path-like; made absolute, so workers with
        another working directory write to the same file). An existing file
        is replaced unless it already has the right shape and dtype, in which
        case it is reused and every frame in it is rewritten.
    _is_master
        LiberTEM's internal flag, accepted for compatibility and not needed:
        raytile runs ``preprocess`` once on the main node (where the file is
        made) and again in each partition (where it is only opened).

    Without an ROI the file holds the whole data set in its shape
    (``nav + sig``); with an ROI it holds the ROI's frames in nav order,
    shaped ``(frames, *sig)`` (LiberTEM refuses an ROI). The data is written
    in the input dtype, normally the data set's own (other UDFs run in the
    same pass may widen it). No result buffers. Needs a file system that the
    main node and every worker share.

    Example::

        >>> ctx.run_udf(dataset=ds, udf=RecordUDF("copy.npy"))
        >>> np.array_equal(np.load("copy.npy"), data)
        True
    """

    def __init__(self, filename: str | os.PathLike, _is_master: bool = True):
        self._is_master = _is_master
        super().__init__(filename=os.path.abspath(os.fspath(filename)))

    def get_preferred_input_dtype(self) -> np.dtype:
        return self.USE_NATIVE_DTYPE

    def get_result_buffers(self):
        return {}

    def _shape(self) -> tuple[int, ...]:
        return record_shape(self.meta.dataset_shape, self.meta.roi)

    def preprocess(self) -> None:
        if not self.meta.on_main_node:
            return  # the file exists: the main node made it before any task; get_task_data opened it
        path = self.params.filename
        shape, dtype = self._shape(), np.dtype(self.meta.input_dtype)
        if _npy_header(path) == (shape, False, dtype):
            return  # already there with the right layout (e.g. preprocess ran again on a recompute)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        created = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        created.flush()
        del created

    def _view(self, memmap: np.memmap) -> np.ndarray:
        """The file as the UDF writes it: ``(frames, *sig)``."""
        shape = memmap.shape
        sig_dims = len(self.meta.dataset_shape.sig)
        frames = int(np.prod(shape[: len(shape) - sig_dims], dtype=np.int64))
        return memmap.reshape((frames,) + shape[len(shape) - sig_dims:])

    def get_task_data(self) -> dict[str, Any]:
        path = self.params.filename
        shape, dtype = self._shape(), np.dtype(self.meta.input_dtype)
        header = _npy_header(path)
        if header != (shape, False, dtype):
            found = "no such file" if header is None else f"shape {header[0]}, dtype {header[2]}"
            raise UDFException(
                f"{type(self).__name__}: {path} should have been made on the main node with shape {shape} and "
                f"dtype {dtype}, found {found}; is the file system shared with the workers?"
            )
        return {"memmap": self._view(np.lib.format.open_memmap(path, mode="r+"))}

    def process_tile(self, tile) -> None:
        where = self.meta.slice
        assert where is not None  # always set while tiles are processed
        where.get(self.task_data.memmap)[...] = tile

    def postprocess(self) -> None:
        self.task_data.memmap.flush()
