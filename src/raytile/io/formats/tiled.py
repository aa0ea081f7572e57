"""The ``tiled`` format: a tiny self-describing file whose frames are stored in tiles.

Layout (all integers little-endian uint32 unless noted)::

    magic       8 bytes  b"RTTILED1"
    header_len  total header bytes (data starts there)
    n_frames, sig_h, sig_w, tile_depth, tile_h, tile_w
    dtype       16 bytes, the numpy dtype string, NUL-padded (e.g. b"<u2")
    data        for each block of tile_depth frames (the last one zero-padded),
                for each tile of the (sig_h/tile_h) x (sig_w/tile_w) grid in row-major
                order: tile_depth x tile_h x tile_w pixels, C order

The base shape of its partitions is ``(tile_depth, tile_h, tile_w)``: the
negotiated tiles are whole stored tiles (``adjust_tileshape``), so one tile
is one contiguous stretch of the file per frame, and whole frames (the
``frame`` method) are still possible. :func:`write_tiled` writes one.
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSetMeta
from raytile.io.decoders import NativeDecoder
from raytile.io.fileset import File, FileDataSet, FilePartition, FileSet
from raytile.io.read_ranges import LAYOUT_TILED
from raytile.common.shape import Shape

__all__ = ["TiledDataSet", "TiledPartition", "TiledFileSet", "write_tiled", "read_tiled_header"]

MAGIC = b"RTTILED1"
_HEAD = struct.Struct("<8sI6I16s")


def write_tiled(path, data: np.ndarray, tile_depth: int, tile_h: int, tile_w: int) -> None:
    """Write frames ``(n, h, w)`` (or ``(..., h, w)``) in the tiled layout."""
    data = np.asarray(data)
    # annotated: with python_version 3.10 numpy's stubs infer a 0-d shape for this reshape
    frames: np.ndarray = data.reshape((-1,) + data.shape[-2:])
    n, h, w = frames.shape
    if h % tile_h or w % tile_w:
        raise DataSetException(f"frame {h}x{w} is not a whole number of {tile_h}x{tile_w} tiles")
    blocks = -(-n // tile_depth)
    padded = np.zeros((blocks * tile_depth, h, w), dtype=frames.dtype)
    padded[:n] = frames
    arr = padded.reshape(blocks, tile_depth, h // tile_h, tile_h, w // tile_w, tile_w)
    arr = arr.transpose(0, 2, 4, 1, 3, 5)  # block, ty, tx, depth, y, x
    head = _HEAD.pack(MAGIC, _HEAD.size, n, h, w, tile_depth, tile_h, tile_w, frames.dtype.str.encode())
    with open(path, "wb") as f:
        f.write(head)
        f.write(np.ascontiguousarray(arr).tobytes())


def read_tiled_header(path: str) -> dict:
    with open(path, "rb") as f:
        raw = f.read(_HEAD.size)
    if len(raw) < _HEAD.size:
        raise DataSetException(f"{path}: too short for a tiled header ({len(raw)} of {_HEAD.size} bytes)")
    magic, hlen, n, h, w, td, th, tw, dt = _HEAD.unpack(raw)
    if magic != MAGIC:
        raise DataSetException(f"{path}: not a raytile tiled file (magic {magic!r}, expected {MAGIC!r})")
    try:
        dtype = np.dtype(dt.rstrip(b"\0").decode("ascii"))
    except (TypeError, UnicodeDecodeError):
        raise DataSetException(f"{path}: bad dtype {dt!r} in the tiled header") from None
    if min(n, h, w, td, th, tw) <= 0 or h % th or w % tw or hlen < _HEAD.size:
        raise DataSetException(
            f"{path}: inconsistent tiled header: {n} frames {h}x{w}, tiles {td}x{th}x{tw}, header {hlen} bytes"
        )
    return dict(header=hlen, n=n, h=h, w=w, td=td, th=th, tw=tw, dtype=dtype)


class TiledFileSet(FileSet):
    layout = LAYOUT_TILED

    def __init__(self, files, sig_shape, bpp, td, th, tw):
        super().__init__(files, sig_shape, bpp, extra=(td, th, tw, sig_shape[1]))
        self.split_x = tw
        self.tile = (td, th, tw)

    def file_bytes(self, f: File) -> int:
        td = self.tile[0]
        return f.file_header + -(-f.num_frames // td) * td * self.frame_px * (self.bpp // 8)


class TiledPartition(FilePartition):
    def get_base_shape(self, roi):
        td, th, tw = self.fileset.tile
        return (1 if roi is not None else td, th, tw)

    def adjust_tileshape(self, tileshape, roi):
        td, th, tw = self.fileset.tile
        depth, h, w = tileshape
        sig = self.meta.shape.sig.to_tuple()
        if (h, w) == sig:  # whole frames (frame/partition methods) stay whole
            return tileshape
        step = 1 if roi is not None else td
        return (max(step, depth // step * step), th, tw)


class TiledDataSet(FileDataSet):
    """``ctx.load("tiled", path=..., nav_shape=None)``: shape, dtype and tile layout come from the header."""

    format_name = "tiled"
    partition_class = TiledPartition
    params_schema = {
        "path": {"type": "path", "required": True},
        "nav_shape": {"type": "shape"},
    }

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None, **kwargs):
        super().__init__(**kwargs)
        self._path = path
        self._nav_shape = nav_shape

    @classmethod
    def _detect_params(cls, path: str) -> dict | None:
        """``{"path": path}`` for a file starting with the tiled magic (its header is checked)."""
        try:
            with open(path, "rb") as f:
                magic = f.read(len(MAGIC))
        except OSError:
            return None
        if magic != MAGIC:
            return None
        read_tiled_header(path)
        return {"path": path}

    def _do_initialize(self) -> DataSetMeta:
        if not os.path.isfile(self._path):
            raise DataSetException(f"file not found: {self._path}")
        h = read_tiled_header(self._path)
        nav = self._nav_shape or (h["n"],)
        if math.prod(nav) != h["n"]:
            raise DataSetException(f"{self._path}: holds {h['n']} frames, nav_shape {nav} needs {math.prod(nav)}")
        dtype = h["dtype"]
        self._fileset = TiledFileSet([File(self._path, 0, h["n"], h["header"])], (h["h"], h["w"]),
                                     dtype.itemsize * 8, h["td"], h["th"], h["tw"])
        self._decoder = NativeDecoder(dtype)
        self._native_dtype = dtype
        return DataSetMeta(shape=Shape(nav + (h["h"], h["w"]), sig_dims=2), raw_dtype=dtype.newbyteorder("="))
