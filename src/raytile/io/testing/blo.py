"""Write NanoMegas ``.blo`` block files.

Layout (the block-file header as HyperSpy and LiberTEM document it, all
little-endian unless ``byteorder=">"``): ``ID`` "IMGBLO" (6 bytes),
``MAGIC`` u2, ``Data_offset_1`` u4 (virtual bright field), ``Data_offset_2``
u4 (diffraction patterns), ``UNKNOWN1`` u4, ``DP_SZ`` u2, ``DP_rotation`` u2,
``NX`` u2, ``NY`` u2, ``Scan_rotation`` u2, ``SX``/``SY`` f8, ``Beam_energy``
u4, ``SDP`` u2, ``Camera_length`` u4, ``Acquisition_time`` f8, 8 centering
and 14 distortion f8 values (240 bytes in all); for magic 259 lines of text
("Blo Bit Depth: 16 bits") up to ``Data_offset_1``; the VBF image (NY x NX
bytes); then each pattern behind a 6-byte header (``0x55 0xAA`` and the u4
frame number).
"""

from __future__ import annotations

import os
import struct

import numpy as np

__all__ = ["write_blo"]


def write_blo(path: str | os.PathLike, frames: np.ndarray, magic: int = 259, byteorder: str = "<",
              bit_depth_line: bool = True) -> str:
    """Write ``frames`` ``(ny, nx, dp, dp)`` of uint8 or uint16 as a ``.blo`` file.

    ``magic=258`` writes the old header without the text block (8-bit only);
    ``bit_depth_line=False`` leaves the bit depth line out of the text.
    """
    frames = np.asarray(frames)
    ny, nx, dp, dp2 = frames.shape
    if dp != dp2:
        raise ValueError("BLO frames are square")
    o = byteorder
    text = b""
    if magic == 259:
        lines = ["Nanomegas block file", "Written by raytile.io.testing.blo"]
        if bit_depth_line:
            lines.append(f"Blo Bit Depth: {frames.dtype.itemsize * 8} bits")
        text = ("\r\n".join(lines) + "\r\n").encode() + b"\x00" * 16
    off_vbf = 240 + len(text)
    off_dp = off_vbf + nx * ny
    head = bytearray(240)
    head[0:6] = b"IMGBLO"
    struct.pack_into(o + "H3IHHHHH", head, 6, magic, off_vbf, off_dp, 0, dp, 0, nx, ny, 0)
    struct.pack_into(o + "2dIHId", head, 30, 1.5, 1.5, 200000, 100, 1000, 44000.5)
    vbf = frames[:, :, dp // 2 - 1:dp // 2 + 1, dp // 2 - 1:dp // 2 + 1].sum(axis=(2, 3))
    vbf = (vbf * 255 // max(1, int(vbf.max()))).astype(np.uint8)
    flat = np.ascontiguousarray(frames.reshape(-1, dp, dp), dtype=np.dtype(o + frames.dtype.str[1:]))
    with open(path, "wb") as f:
        f.write(bytes(head))
        f.write(text)
        f.write(vbf.tobytes())
        for i, fr in enumerate(flat):
            f.write(b"\x55\xaa" + struct.pack(o + "I", i))
            f.write(fr.tobytes())
    return os.fspath(path)
