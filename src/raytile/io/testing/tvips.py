"""Write TVIPS camera series (``name_000.tvips``, ``name_001.tvips``, ...).

Layout (TVIPS series format, as LiberTEM documents it; little-endian): the
first file starts with a 256-byte series header of i32 ``ISize`` (256),
``IVersion``, ``IXDim``, ``IYDim``, ``IBPP``, ``IXOff``, ``IYOff``,
``IXBin``, ``IYBin``, ``IPixelSize``, ``IHT``, ``IMagTotal``,
``IImgHeaderBytes``. Every frame is an image header (version 1: 12 bytes;
version 2: ``IImgHeaderBytes``, with u32 ``ICounter``, ``ITime``, ``IMS``
first and float32 ``Scan_x``/``Scan_y`` at bytes 68/72) and the pixels.
"""

from __future__ import annotations

import os
import struct

import numpy as np

__all__ = ["write_tvips"]


def write_tvips(directory: str | os.PathLike, frames: np.ndarray, name: str = "scan", frames_per_file: int = 4,
                version: int = 2, img_header_bytes: int = 128, scan_width: int | None = None,
                lead_in: int = 0) -> list[str]:
    """Write ``frames`` (``(n, h, w)``, uint8 or uint16) as a series; the file paths.

    With ``scan_width``, frames ``lead_in`` onwards carry scan positions
    ``(k // scan_width, k % scan_width)``; the ``lead_in`` frames before the
    scan carry position (7, 3), as frames recorded before a scan starts.
    """
    frames = np.asarray(frames)
    flat: np.ndarray = frames.reshape((-1,) + frames.shape[-2:])
    n, h, w = int(flat.shape[0]), int(flat.shape[1]), int(flat.shape[2])
    hb = 12 if version == 1 else img_header_bytes
    series = struct.pack("<13i", 256, version, w, h, flat.dtype.itemsize * 8, 0, 0, 1, 1, 55, 300, 100000, hb)
    series += b"\x00" * (256 - len(series))
    chunks: list[bytes] = []
    for i, fr in enumerate(flat):
        head = bytearray(hb)
        struct.pack_into("<3I", head, 0, i, 1700000000 + i // 1000, i % 1000)
        if version == 2 and hb >= 76:
            if scan_width is not None and i >= lead_in:
                k = i - lead_in
                y, x = k // scan_width, k % scan_width
            else:
                y, x = 7, 3
            struct.pack_into("<2f", head, 68, float(x), float(y))
        chunks.append(bytes(head) + np.ascontiguousarray(fr, dtype=flat.dtype.str.replace(">", "<")).tobytes())
    paths = []
    for k, start in enumerate(range(0, max(n, 1), frames_per_file)):
        p = os.path.join(os.fspath(directory), f"{name}_{k:03d}.tvips")
        with open(p, "wb") as f:
            if k == 0:
                f.write(series)
            f.write(b"".join(chunks[start:start + frames_per_file]))
        paths.append(p)
    return paths
