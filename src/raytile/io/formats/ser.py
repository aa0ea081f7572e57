"""The ``ser`` format: FEI TIA series files (``.ser``) of 2D images or 1D spectra.

Header (little-endian): ``ByteOrder`` u16 (0x4949), ``SeriesID`` u16
(0x0197), ``SeriesVersion`` u16 (0x0210; 0x0220 has 64-bit offsets),
``DataTypeID`` i32 (0x4120 1D, 0x4122 2D), ``TagTypeID`` i32,
``TotalNumberElements``, ``ValidNumberElements`` i32,
``OffsetArrayOffset`` (i32 / i64), ``NumberDimensions`` i32, then per nav
dimension ``DimensionSize`` i32, calibration offset and delta f8,
calibration element i32, a description and a unit (i32 length + chars).
At ``OffsetArrayOffset``: the data offset of every element, then the tag
offsets. A 2D element is two calibrations (f8, f8, i32 each), ``DataType``
i16, ``ArraySizeX``, ``ArraySizeY`` i32 and the pixels (1 u1, 2 u2, 3 u4,
4 i1, 5 i2, 6 i4, 7 f4, 8 f8), rows stored bottom-up; a 1D element has one
calibration and ``ArrayLength``.

Elements lie at a common stride in files written by TIA (data and tag
interleaved, or data only); frames are read as a fixed-stride file set in
runs of equal stride (any gaps allowed). 2D frames are flipped to top-row
first, as ncempy and LiberTEM 0.16 return them: tiles are read as whole
frames and flipped (views, no copy) before they are cut to the run's
tiling. The nav shape defaults to the reversed ``DimensionSize`` list; a
series stopped before its end (``ValidNumberElements`` below the product
of the dimension sizes, as TIA writes a stopped or preview series) opens
its valid frames: ``(valid,)``, or ``(valid // inner, *inner)`` when the
valid frames fill whole rows of a multi-dimensional series. ``auto``
places series of 2D images and of 1D spectra, as LiberTEM's does.

Example::

    ds = ctx.load("ser", path="scan_1.ser")
"""

from __future__ import annotations

import struct
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io.dataset import Partition
from raytile.io.fileset import File, FilePartition
from raytile.io.formats.framefiles import FrameFileDataSet, FrameLayout, read_exact

__all__ = ["SERDataSet", "SERPartition", "read_ser_header", "SER_DATA_TYPES"]

#: Element DataType -> numpy dtype (always little-endian).
SER_DATA_TYPES = {1: "<u1", 2: "<u2", 3: "<u4", 4: "<i1", 5: "<i2", 6: "<i4", 7: "<f4", 8: "<f8"}
_ELEMENT_HEADER = {0x4120: 26, 0x4122: 50}


def read_ser_header(path: str) -> dict[str, Any]:
    """Series header, nav dimensions and the data offsets of the valid elements of a ``.ser`` file."""
    head = read_exact(path, 0, 30, "SER header")
    order, series_id, version = struct.unpack_from("<3H", head, 0)
    if order != 0x4949 or series_id != 0x0197:
        raise DataSetException(f"{path}: not a TIA SER file: byte order {order:#06x} / series id {series_id:#06x} "
                               f"(expected 0x4949 / 0x0197)")
    if version not in (0x0210, 0x0220):
        raise DataSetException(f"{path}: SER series version {version:#06x} is not supported (0x0210, 0x0220)")
    data_type_id, tag_type_id, total, valid = struct.unpack_from("<4i", head, 6)
    if data_type_id not in _ELEMENT_HEADER:
        raise DataSetException(f"{path}: SER DataTypeID {data_type_id:#06x} is not 0x4120 (1D) or 0x4122 (2D)")
    wide = version == 0x0220
    off_fmt = "<q" if wide else "<i"
    (offset_array,) = struct.unpack_from(off_fmt, head, 22)
    pos = 22 + struct.calcsize(off_fmt)
    (n_dims,) = struct.unpack(("<i"), read_exact(path, pos, 4, "SER dimension count"))
    pos += 4
    if not 0 <= n_dims <= 16 or not 0 <= valid <= total:
        raise DataSetException(f"{path}: corrupt SER header: {n_dims} dimensions, {valid} of {total} elements valid")
    dims = []
    for _ in range(n_dims):
        size, _off, _delta, _elem, desc_len = struct.unpack("<iddii", read_exact(path, pos, 28, "SER dimension"))
        pos += 28 + max(desc_len, 0)
        (unit_len,) = struct.unpack("<i", read_exact(path, pos, 4, "SER dimension unit"))
        pos += 4 + max(unit_len, 0)
        if size <= 0 or desc_len < 0 or unit_len < 0:
            raise DataSetException(f"{path}: corrupt SER dimension (size {size}, text lengths {desc_len}/{unit_len})")
        dims.append(size)
    if valid == 0:
        raise DataSetException(f"{path}: the SER file holds no valid elements (no data)")
    raw = read_exact(path, offset_array, valid * struct.calcsize(off_fmt), "SER data offset array")
    offsets = np.frombuffer(raw, dtype=off_fmt[0] + ("i8" if wide else "i4")).astype(np.int64)
    full = tuple(reversed(dims)) or (valid,)
    return {"version": version, "data_type_id": data_type_id, "tag_type_id": tag_type_id, "total": total,
            "valid": valid, "nav_shape": _valid_nav(full, valid), "dims_nav_shape": full, "offsets": offsets}


def _valid_nav(full: tuple[int, ...], valid: int) -> tuple[int, ...]:
    """The nav shape of the ``valid`` frames of a series of ``full`` dimensions (all when it is complete).

    >>> _valid_nav((200,), 5), _valid_nav((4, 8), 16), _valid_nav((4, 8), 13), _valid_nav((4, 8), 32)
    ((5,), (2, 8), (13,), (4, 8))
    """
    if valid >= int(np.prod(full)):
        return full
    inner = int(np.prod(full[1:]))
    if len(full) > 1 and valid % inner == 0:
        return (valid // inner,) + full[1:]
    return (valid,)


def _element(path: str, h: dict[str, Any], offset: int) -> tuple[np.dtype, tuple[int, ...]]:
    """DataType and shape (rows, columns for 2D) of the element at ``offset``."""
    if h["data_type_id"] == 0x4122:
        dtype_code, sx, sy = struct.unpack("<hii", read_exact(path, offset + 40, 10, "SER element header"))
        shape: tuple[int, ...] = (sy, sx)
    else:
        dtype_code, n = struct.unpack("<hi", read_exact(path, offset + 20, 6, "SER element header"))
        shape = (n,)
    if dtype_code not in SER_DATA_TYPES:
        raise DataSetException(f"{path}: SER element DataType {dtype_code} at byte {offset} is not supported "
                               f"(complex or unknown)")
    if any(s <= 0 for s in shape):
        raise DataSetException(f"{path}: SER element at byte {offset} has an empty shape {shape}")
    return np.dtype(SER_DATA_TYPES[dtype_code]), shape


def _runs(offsets: np.ndarray, stride: int) -> list[tuple[int, int]]:
    """``[start, stop)`` index runs of ``offsets`` whose successive differences are ``stride``."""
    breaks = np.flatnonzero(np.diff(offsets) != stride) + 1
    bounds = [0, *breaks.tolist(), len(offsets)]
    return list(zip(bounds[:-1], bounds[1:]))


class SERPartition(FilePartition):
    """Frames of a SER file; 2D frames are flipped to top-row first, then cut to the run's tiling."""

    native_sig: tuple[int, ...] = ()

    def get_tiles(self, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                  dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        """As :meth:`FilePartition.get_tiles` (numpy tiles), 2D frames flipped to top-row first."""
        if len(self.native_sig) != 2:
            yield from super().get_tiles(tiling_scheme, roi, dest_dtype, array_backend)
            return
        sig = self.meta.shape.sig.to_tuple()
        sig_dims = len(sig)
        whole = TilingScheme.make_for_shape(Shape((tiling_scheme.depth,) + sig, sig_dims=sig_dims), self.meta.shape)
        for tile in super().get_tiles(whole, roi, dest_dtype, array_backend):
            n = tile.data.shape[0]
            frames = tile.data.reshape((n,) + self.native_sig)[:, ::-1].reshape((n,) + sig)
            nav0 = tile.tile_slice.origin[0]
            for idx, sl in enumerate(tiling_scheme.sig_slices):
                yield DataTile(frames[(slice(None),) + sl.get()],
                               Slice((nav0,) + tuple(sl.origin), Shape((n,) + sl.shape.to_tuple(), sig_dims=sig_dims)),
                               idx)


class SERDataSet(FrameFileDataSet):
    """TIA ``.ser`` series: 2D images (flipped top-row first, as LiberTEM) or 1D spectra."""

    format_name = "ser"
    file_extensions = ("ser",)
    partition_class = SERPartition
    params_schema = {"emipath": {"type": "path"}}

    def __init__(self, path: str, emipath: str | None = None, **kwargs: Any):
        super().__init__(path, **kwargs)  # emipath: accepted and unused, as in LiberTEM
        self._native_sig: tuple[int, ...] = ()

    def _read_layout(self) -> FrameLayout:
        path = self._path
        h = read_ser_header(path)
        offsets = h["offsets"]
        dtype, shape = _element(path, h, int(offsets[0]))
        if len(offsets) > 1 and _element(path, h, int(offsets[-1])) != (dtype, shape):
            raise DataSetException(f"{path}: SER elements differ: the first is {shape} {dtype}, the last "
                                   f"{_element(path, h, int(offsets[-1]))[1]}")
        header = _ELEMENT_HEADER[h["data_type_id"]]
        frame_bytes = int(np.prod(shape)) * dtype.itemsize
        if len(offsets) > 1:
            steps, counts = np.unique(np.diff(offsets), return_counts=True)
            stride = int(steps[np.argmax(counts)])
        else:
            stride = header + frame_bytes
        if stride < header + frame_bytes:
            raise DataSetException(f"{path}: SER elements {stride} bytes apart overlap (elements of "
                                   f"{header + frame_bytes} bytes); corrupt offset array")
        # frame k of a run lies at file_header + k * stride + frame_header: put the gap before each frame, so
        # that a run ends with its last frame's data (the file may end there)
        gap = stride - frame_bytes
        files = []
        for a, b in _runs(offsets, stride):
            start = int(offsets[a]) + header - gap
            if start < 0:
                raise DataSetException(f"{path}: SER element at byte {int(offsets[a])} is too close to the start")
            files.append(File(path, a, b, start))
        self._native_sig = shape
        return FrameLayout(files=files, sig_shape=shape, dtype=dtype, nav_shape=h["nav_shape"], frame_header=gap,
                           info={"SER version": hex(h["version"]), "elements": f"{h['valid']} of {h['total']}",
                                 "dimensions": str(h["dims_nav_shape"]),
                                 "runs of equal stride": str(len(files))})

    def _make_partition(self, sl: Slice, idx: int) -> Partition:
        part = super()._make_partition(sl, idx)
        if isinstance(part, SERPartition):
            part.native_sig = self._native_sig
        return part

    @classmethod
    def _detect_params(cls, path: str) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape"}`` of a ``.ser`` file of 2D images or 1D spectra, else None."""
        if not cls.has_file_extension(path):
            return None
        try:
            h = read_ser_header(path)
            _, shape = _element(path, h, int(h["offsets"][0]))
        except DataSetException:
            return None
        return {"path": path, "nav_shape": h["nav_shape"], "sig_shape": shape}
