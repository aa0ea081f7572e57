"""The ``mrc`` format: MRC/MRC2014 image stacks (``.mrc``, ``.mrcs``) and volumes (EMDB ``.map``).

A 1024-byte header of 4-byte words, an extended header of ``NSYMBT``
bytes, then ``NZ`` sections of ``NY`` rows of ``NX`` pixels (x fastest).
Header words read here: NX, NY, NZ (bytes 0, 4, 8), MODE (12), NSYMBT (92),
the "MAP " mark (208) and the machine stamp (212: ``0x44 0x44``/``0x44 0x41``
little-endian, ``0x11 0x11`` big-endian; files without a stamp are read in
the byte order that gives a valid header). Modes: 0 int8, 1 int16,
2 float32, 6 uint16, 12 float16; complex and packed 4-bit modes are refused.
Each section is one frame of ``(NY, NX)``; the nav shape defaults to
``(NZ,)`` as in LiberTEM 0.16. ``auto`` places ``.mrc``/``.mrcs`` files
with a valid header and ``.map`` files that also carry the MRC2014 "MAP "
mark (``.map`` is JEOL's extension too; a volume: nav ``(NZ,)``); it gives a square nav shape when
``NZ`` is a square number above 1 (LiberTEM's ``make_2D_square``), and a
single section ``(1,)``, as ``"mrc"`` does (LiberTEM's ``auto`` says
``(1, 1)`` there and its ``"mrc"`` ``(1,)``; raytile's two agree).

Example::

    ds = ctx.load("mrc", path="stack.mrc", nav_shape=(64, 64))
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.fileset import REMOTE_PARAMS, File
from raytile.io.formats.framefiles import FrameFileDataSet, FrameLayout, read_exact, square_nav
from raytile.io.store import ObjectStore

__all__ = ["MRCDataSet", "read_mrc_header", "MRC_MODES"]

#: MRC MODE -> stored value type (byte order from the machine stamp).
MRC_MODES = {0: "i1", 1: "i2", 2: "f4", 6: "u2", 12: "f2"}
_HEADER_BYTES = 1024


def _parse(head: bytes, order: str) -> tuple[int, int, int, int, int]:
    nx, ny, nz, mode = struct.unpack_from(order + "4i", head, 0)
    (nsymbt,) = struct.unpack_from(order + "i", head, 92)
    return nx, ny, nz, mode, nsymbt


def _plausible(values: tuple[int, int, int, int, int]) -> bool:
    nx, ny, nz, mode, nsymbt = values
    return nx > 0 and ny > 0 and nz > 0 and mode in MRC_MODES and nsymbt >= 0


def read_mrc_header(path: str, store: ObjectStore | None = None) -> dict[str, Any]:
    """``{"shape": (nz, ny, nx), "dtype", "data_offset", "mode"}`` of an MRC file (or an object of ``store``;
    DataSetException if not one)."""
    head = read_exact(path, 0, _HEADER_BYTES, "1024-byte MRC header", store)
    stamp = head[212:214]
    if stamp in (b"\x44\x44", b"\x44\x41"):
        order = "<"
    elif stamp == b"\x11\x11":
        order = ">"
    else:  # no machine stamp: the byte order whose header makes sense
        order = "<" if _plausible(_parse(head, "<")) or not _plausible(_parse(head, ">")) else ">"
    nx, ny, nz, mode, nsymbt = _parse(head, order)
    if nx <= 0 or ny <= 0 or nz <= 0:
        raise DataSetException(f"{path}: not an MRC file: header dimensions NX={nx} NY={ny} NZ={nz} must be positive")
    if mode not in MRC_MODES:
        what = {3: "complex int16", 4: "complex float32", 101: "packed 4-bit"}.get(mode, "unknown")
        raise DataSetException(f"{path}: MRC mode {mode} ({what}) is not supported; readable modes: "
                               f"{', '.join(f'{k} ({v})' for k, v in MRC_MODES.items())}")
    if nsymbt < 0:
        raise DataSetException(f"{path}: MRC extended header size NSYMBT={nsymbt} is negative (corrupt header)")
    return {"shape": (nz, ny, nx), "dtype": np.dtype(order + MRC_MODES[mode]),
            "data_offset": _HEADER_BYTES + nsymbt, "mode": mode, "map_mark": head[208:212] == b"MAP "}


class MRCDataSet(FrameFileDataSet):
    """MRC image stacks: every section a frame of ``(NY, NX)``; ``nav_shape`` defaults to ``(NZ,)``."""

    format_name = "mrc"
    file_extensions = ("mrc", "mrcs", "map")
    params_schema = {**FrameFileDataSet.params_schema, **REMOTE_PARAMS}

    def _read_layout(self) -> FrameLayout:
        h = read_mrc_header(self._path, self._store)
        nz, ny, nx = h["shape"]
        size = self._check_path(self._path)
        need = h["data_offset"] + nz * ny * nx * h["dtype"].itemsize
        if size < need:
            raise DataSetException(
                f"{self._path}: MRC file too short: {nz} sections of {ny} x {nx} {h['dtype']} after "
                f"{h['data_offset']} header bytes need {need} bytes, the file has {size} (truncated?)"
            )
        return FrameLayout(files=[File(self._path, 0, nz, h["data_offset"])], sig_shape=(ny, nx),
                           dtype=h["dtype"], nav_shape=(nz,),
                           info={"MRC mode": str(h["mode"]), "data offset": str(h["data_offset"])})

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape"}`` of a ``.mrc``/``.mrcs`` file with a valid header, or of a
        ``.map`` file with one and the "MAP " mark; else None.

        The nav shape is square when the section count is a square number above 1, as LiberTEM detects
        it; one section is ``(1,)``, as the ``"mrc"`` format's default.
        """
        name = str(path).lower()
        if not cls.has_file_extension(name):
            return None
        try:
            h = read_mrc_header(path, store)
        except DataSetException:
            return None
        if name.endswith(".map") and not h["map_mark"]:
            return None  # another format's .map (JEOL's)
        nz, ny, nx = h["shape"]
        volume = name.endswith(".map")  # an EMDB volume: its sections, never a scan
        return {"path": path, "nav_shape": square_nav(nz) if nz > 1 and not volume else (nz,), "sig_shape": (ny, nx)}
