"""Write NorPix StreamPix ``.seq`` files and the DE correction files that go with them.

Layout (the NorPix header as PIMS and LiberTEM document it, little-endian):
``magic`` u32 0xFEED, ``name`` 24 bytes UTF-16, ``version`` i32,
``header_size`` i32, ``description`` 512 bytes, then u32 ``width``,
``height``, ``bit_depth``, ``bit_depth_real``, ``image_size_bytes``,
``image_format`` (100 monochrome), ``allocated_frames``, ``origin``,
``true_image_size``, f8 ``suggested_frame_rate``, i32
``description_format``, u32 ``reference_frame``, ``fixed_size``,
``flags``, i32 ``bayer_pattern``, ``time_offset_us``,
``extended_header_size``, u32 ``compression_format``, i32
``reference_time_s``, u16 ms, u16 us. Frames start at 8192 (version >= 5)
or 1024, each followed by a timestamp footer (u32 seconds, u16 ms, u16 us)
padded to ``true_image_size``. Corrections: ``name.seq.dark.mrc`` and
``name.seq.gain.mrc`` (MRC images), ``name.seq.Config.Metadata.xml``
(``BadPixelMap`` with ``Defect`` elements) and ``name.seq.metadata``
(i32 fields from byte 282: metadata size, version, unbinned width,
height, offset x, y, hardware binning, bit mode, frame rate, rotation,
flip, then a bool).
"""

from __future__ import annotations

import os
import struct
from typing import Sequence

import numpy as np

from raytile.io.testing.mrc import write_mrc

__all__ = ["write_seq", "write_seq_bad_pixels"]


def write_seq(path: str | os.PathLike, frames: np.ndarray, version: int = 5, footer_bytes: int = 8,
              dark: np.ndarray | None = None, gain: np.ndarray | None = None) -> str:
    """Write ``frames`` (``(n, h, w)`` or nav x (h, w); uint8/uint16/uint32) as a ``.seq`` file.

    ``footer_bytes`` (>= 8) per frame hold its timestamp; ``dark``/``gain``
    are written as ``<path>.dark.mrc``/``<path>.gain.mrc`` (float32).
    """
    frames = np.asarray(frames)
    flat: np.ndarray = frames.reshape((-1,) + frames.shape[-2:])
    n, h, w = int(flat.shape[0]), int(flat.shape[1]), int(flat.shape[2])
    bits = flat.dtype.itemsize * 8
    true_size = h * w * flat.dtype.itemsize + footer_bytes
    head = bytearray(8192 if version >= 5 else 1024)
    struct.pack_into("<I24sii512s9Id", head, 0, 0xFEED, "Norpix seq\n".encode("utf-16-le"), version, 1024,
                     "raytile.io.testing.seq".encode("utf-16-le"), w, h, bits, bits, h * w * flat.dtype.itemsize,
                     100, n, 0, true_size, 400.0)
    struct.pack_into("<iIIIiiiIiHH", head, 592, 0, 0, 0, 0, 0, 0, 0, 0, 1700000000, 5, 7)
    with open(path, "wb") as f:
        f.write(bytes(head))
        for i, fr in enumerate(flat):
            f.write(np.ascontiguousarray(fr, dtype=flat.dtype.str.replace(">", "<")).tobytes())
            stamp = struct.pack("<IHH", 1700000000 + i, i % 1000, 0)
            f.write(stamp + b"\xee" * (footer_bytes - len(stamp)))
    for name, arr in (("dark", dark), ("gain", gain)):
        if arr is not None:
            write_mrc(f"{os.fspath(path)}.{name}.mrc", np.asarray(arr, dtype=np.float32)[None])
    return os.fspath(path)


def write_seq_bad_pixels(seq_path: str | os.PathLike, sensor_shape: Sequence[int], window: Sequence[int],
                         offset: Sequence[int] = (0, 0), rows: Sequence[str] = (), columns: Sequence[str] = (),
                         pixels: Sequence[tuple[int, int]] = (), binning: int = 1) -> tuple[str, str]:
    """Write ``<seq_path>.Config.Metadata.xml`` and ``<seq_path>.metadata``; their paths.

    ``sensor_shape`` (rows, columns) is the bad pixel map's size; ``window``
    (height, width) and ``offset`` (y, x) the unbinned readout window;
    ``rows``/``columns`` entries are "r" or "a-b"; ``pixels`` are (row,
    column). A second, binned map of half the size (with a decoy defect)
    is written too, as cameras do.
    """
    base = os.fspath(seq_path)
    defects = [f'      <Defect Row="{r}"/>' if "-" not in r else f'      <Defect Rows="{r}"/>' for r in rows]
    defects += [f'      <Defect Column="{c}"/>' if "-" not in c else f'      <Defect Columns="{c}"/>' for c in columns]
    defects += [f'      <Defect Row="{r}" Column="{c}"/>' for r, c in pixels]
    sr, sc = sensor_shape
    xml = ("<?xml version=\"1.0\"?>\n<Configuration>\n  <BadPixels>\n"
           f"    <BadPixelMap Columns=\"{sc // 2}\" Rows=\"{sr // 2}\" Binning=\"2\">\n"
           "      <Defect Row=\"0\" Column=\"0\"/>\n    </BadPixelMap>\n"
           f"    <BadPixelMap Columns=\"{sc}\" Rows=\"{sr}\">\n" + "\n".join(defects) + "\n    </BadPixelMap>\n"
           "  </BadPixels>\n</Configuration>\n")
    xml_path, meta_path = base + ".Config.Metadata.xml", base + ".metadata"
    with open(xml_path, "w") as f:
        f.write(xml)
    meta = bytearray(512)
    struct.pack_into("<11i?", meta, 282, 512, 3, window[1], window[0], offset[1], offset[0], binning, 12, 400, 0,
                     0, False)
    with open(meta_path, "wb") as f:
        f.write(bytes(meta))
    return xml_path, meta_path
