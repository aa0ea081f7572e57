"""The ``blo`` format: NanoMegas ASTAR block files (``.blo``).

Header (byte order per the ``endianess`` parameter, ``"<"`` by default as
in LiberTEM 0.16): ``ID`` (6 bytes, "IMGBLO"), ``MAGIC`` u2 at 6 (258 or
259), ``Data_offset_1`` u4 at 8 (the virtual bright field image),
``Data_offset_2`` u4 at 12 (the diffraction patterns), ``DP_SZ`` u2 at 20
(frames are ``DP_SZ x DP_SZ``), ``NX``/``NY`` u2 at 24/26 (the scan). Files
of magic 259 hold lines of text from byte 240 to ``Data_offset_1``; a line
``Blo Bit Depth: 16 bits`` sets the pixel size (default 8 bits, unsigned).
Each of the ``NY * NX`` frames at ``Data_offset_2`` is preceded by a 6-byte
frame header, skipped.

Example::

    ds = ctx.load("blo", path="scan.blo")
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.fileset import REMOTE_PARAMS, File
from raytile.io.formats.framefiles import FrameFileDataSet, FrameLayout, read_exact
from raytile.io.store import ObjectStore

__all__ = ["BloDataSet", "read_blo_header", "BLO_MAGICS"]

#: Accepted values of the header's MAGIC field.
BLO_MAGICS = (258, 259)
_HEADER_BYTES = 240
_FRAME_HEADER_BYTES = 6


def _bit_depth(text: str) -> int:
    """Bits per pixel from a ``Blo Bit Depth: N bits`` line, 8 without one (LiberTEM's reading)."""
    for line in text.splitlines():
        line = line.strip()
        if not line.lower().startswith("blo bit depth:"):
            continue
        value = line.split(":", 1)[1].strip().lower()
        if value.endswith("bits") and value[:-4].strip().isdigit():
            return int(value[:-4].strip())
    return 8


def read_blo_header(path: str, endianess: str = "<", store: ObjectStore | None = None) -> dict[str, Any]:
    """``{"magic", "nav_shape", "sig_shape", "dtype", "vbf_offset", "data_offset"}`` of a .blo file (or an
    object of ``store``)."""
    head = read_exact(path, 0, _HEADER_BYTES, "240-byte BLO header", store)
    o = endianess
    (magic,) = struct.unpack_from(o + "H", head, 6)
    if magic not in BLO_MAGICS:
        raise DataSetException(f"{path}: not a BLO file: magic number {magic:#x} at byte 6 is not one of "
                               f"{', '.join(hex(m) for m in BLO_MAGICS)} (endianess {endianess!r})")
    off_vbf, off_dp = struct.unpack_from(o + "2I", head, 8)
    (dp_sz,) = struct.unpack_from(o + "H", head, 20)
    nx, ny = struct.unpack_from(o + "2H", head, 24)
    if dp_sz == 0 or nx == 0 or ny == 0:
        raise DataSetException(f"{path}: BLO header gives an empty scan or frame: DP_SZ={dp_sz} NX={nx} NY={ny}")
    bits = 8
    if magic == 259 and off_vbf > _HEADER_BYTES:
        text = read_exact(path, _HEADER_BYTES, off_vbf - _HEADER_BYTES, "BLO metadata text", store)
        bits = _bit_depth(text.decode("utf-8", errors="ignore").replace("\x00", ""))
    if bits not in (8, 16, 32, 64):
        raise DataSetException(f"{path}: BLO bit depth {bits} is not supported (8, 16, 32 or 64 bits)")
    return {"magic": magic, "nav_shape": (ny, nx), "sig_shape": (dp_sz, dp_sz),
            "dtype": np.dtype(f"{o}u{bits // 8}"), "vbf_offset": off_vbf, "data_offset": off_dp}


class BloDataSet(FrameFileDataSet):
    """NanoMegas ``.blo`` files; nav shape ``(NY, NX)`` and frames ``(DP_SZ, DP_SZ)`` from the header."""

    format_name = "blo"
    file_extensions = ("blo",)
    params_schema = {"endianess": {"type": "choice", "choices": ["<", ">"]}, **REMOTE_PARAMS}

    def __init__(self, path: str, endianess: str = "<", **kwargs: Any):
        super().__init__(path, **kwargs)
        self._endianess = endianess

    def _read_layout(self) -> FrameLayout:
        h = read_blo_header(self._path, self._endianess, self._store)
        count = h["nav_shape"][0] * h["nav_shape"][1]
        return FrameLayout(files=[File(self._path, 0, count, h["data_offset"])], sig_shape=h["sig_shape"],
                           dtype=h["dtype"], nav_shape=h["nav_shape"], frame_header=_FRAME_HEADER_BYTES,
                           info={"BLO magic": str(h["magic"]), "data offset": str(h["data_offset"])})

    def get_cache_key(self) -> Any:
        return (super().get_cache_key(), self._endianess)

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape", "endianess"}`` of a ``.blo`` file with a valid header, else None."""
        if not cls.has_file_extension(path):
            return None
        try:
            h = read_blo_header(path, "<", store)
        except DataSetException:
            return None
        return {"path": path, "nav_shape": h["nav_shape"], "sig_shape": h["sig_shape"], "endianess": "<"}
