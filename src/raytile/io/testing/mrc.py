"""Write MRC2014 image stacks.

Layout (MRC2014, https://www.ccpem.ac.uk/mrc_format/mrc2014.php): 256
4-byte words of header (NX, NY, NZ, MODE at words 1-4; MX, MY, MZ at 8-10;
CELLA at 11-13; MAPC/MAPR/MAPS at 17-19; ISPG at 23; NSYMBT at 24; "MAP " at
byte 208; the machine stamp at 212), NSYMBT bytes of extended header, then
the sections, x fastest.
"""

from __future__ import annotations

import os
import struct

import numpy as np

__all__ = ["write_mrc", "mrc_header"]

_MODES = {np.dtype("i1"): 0, np.dtype("i2"): 1, np.dtype("f4"): 2, np.dtype("u2"): 6, np.dtype("f2"): 12}


def mrc_header(shape: tuple[int, int, int], dtype: np.dtype, byteorder: str = "<", extended_bytes: int = 0,
               machine_stamp: bool = True, stats: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> bytes:
    """The 1024-byte MRC2014 header of ``shape`` ``(nz, ny, nx)`` sections of ``dtype``.

    ``extended_bytes`` is NSYMBT; ``stats`` are DMIN, DMAX, DMEAN.
    """
    nz, ny, nx = (int(v) for v in shape)
    mode = _MODES[np.dtype(dtype).newbyteorder("=")]
    o = byteorder
    head = bytearray(1024)
    struct.pack_into(o + "4i", head, 0, nx, ny, nz, mode)
    struct.pack_into(o + "3i", head, 28, nx, ny, 1)  # MX, MY, MZ: sampling of one image
    struct.pack_into(o + "3f", head, 40, float(nx), float(ny), 1.0)  # CELLA: 1 A pixels
    struct.pack_into(o + "3f", head, 52, 90.0, 90.0, 90.0)
    struct.pack_into(o + "3i", head, 64, 1, 2, 3)
    struct.pack_into(o + "3f", head, 76, *stats)
    struct.pack_into(o + "2i", head, 88, 0, extended_bytes)  # ISPG 0: image stack; NSYMBT
    struct.pack_into(o + "i", head, 108, 20140)  # NVERSION
    head[208:212] = b"MAP "
    if machine_stamp:
        head[212:214] = b"\x44\x44" if o == "<" else b"\x11\x11"
    struct.pack_into(o + "i", head, 220, 1)
    head[224:224 + 25] = b"raytile.io.testing.mrc   "
    return bytes(head)


def write_mrc(path: str | os.PathLike, frames: np.ndarray, byteorder: str = "<", extended_header: bytes = b"",
              machine_stamp: bool = True) -> str:
    """Write ``frames`` (``(n, ny, nx)`` or nav x (ny, nx); int8, int16, uint16, float16 or float32).

    ``byteorder`` ``"<"`` or ``">"``; ``extended_header`` is stored after the
    1024-byte header (NSYMBT its length); ``machine_stamp=False`` leaves the
    stamp zero, as old files do.
    """
    frames = np.asarray(frames)
    flat: np.ndarray = frames.reshape((-1,) + frames.shape[-2:])
    stats = (float(flat.min()), float(flat.max()), float(flat.mean()))
    head = mrc_header((flat.shape[0], flat.shape[1], flat.shape[2]), flat.dtype, byteorder, len(extended_header),
                      machine_stamp, stats)
    with open(path, "wb") as f:
        f.write(head)
        f.write(extended_header)
        f.write(np.ascontiguousarray(flat, dtype=np.dtype(byteorder + flat.dtype.str[1:])).tobytes())
    return os.fspath(path)
