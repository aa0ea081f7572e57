"""Write FEI TIA ``.ser`` series files of 2D images.

Layout (the TIA file format notes, as ncempy documents them; little-endian):
``ByteOrder`` u16 0x4949, ``SeriesID`` u16 0x0197, ``SeriesVersion`` u16
(0x0210: 32-bit offsets, 0x0220: 64-bit), ``DataTypeID`` i32 (0x4122: 2D),
``TagTypeID`` i32 (0x4152: time), ``TotalNumberElements``,
``ValidNumberElements`` i32, ``OffsetArrayOffset`` (i32 / i64),
``NumberDimensions`` i32; per dimension ``DimensionSize`` i32, calibration
offset, delta f8, calibration element i32, description and units (i32
length + bytes). Then the data offset array and the tag offset array
(``TotalNumberElements`` entries each), and the elements: two calibrations
(f8 offset, f8 delta, i32 element), ``DataType`` i16, ``ArraySizeX``,
``ArraySizeY`` i32, the pixels with the bottom row first; each element is
followed by its time tag (i16 tag type, i32 time) unless
``tags_at_end=True`` puts all tags after the data.
"""

from __future__ import annotations

import os
import struct

import numpy as np

__all__ = ["write_ser"]

_TYPES = {"u1": 1, "u2": 2, "u4": 3, "i1": 4, "i2": 5, "i4": 6, "f4": 7, "f8": 8}


def write_ser(path: str | os.PathLike, frames: np.ndarray, version: int = 0x0220, tags_at_end: bool = False,
              spare_elements: int = 0, pad_after: tuple[int, ...] = ()) -> str:
    """Write ``frames`` (nav x (h, w)) as a ``.ser`` file; nav dimensions x first, as TIA stores them.

    ``spare_elements`` adds unused slots to the offset arrays (TotalNumberElements > valid ones);
    ``pad_after`` lists elements followed by 24 extra bytes (offsets no longer at one stride).
    """
    frames = np.asarray(frames)
    nav, (h, w) = frames.shape[:-2], frames.shape[-2:]
    flat = frames.reshape((-1, h, w))
    n = len(flat)
    wide = version == 0x0220
    off = "<q" if wide else "<i"
    dims = b""
    for i, size in enumerate(reversed(nav)):  # x first
        desc, unit = f"Dim {i}".encode(), b"m"
        dims += struct.pack("<iddii", size, 0.0, 1e-9, 0, len(desc)) + desc + struct.pack("<i", len(unit)) + unit
    head = struct.pack("<3H4i", 0x4949, 0x0197, version, 0x4122, 0x4152, n + spare_elements, n)
    head_len = len(head) + struct.calcsize(off) + 4 + len(dims)
    offset_array = head_len
    first_element = offset_array + 2 * (n + spare_elements) * struct.calcsize(off)
    code = _TYPES[flat.dtype.str[1:]]
    elements, tags = [], []
    for i, fr in enumerate(flat):
        element = struct.pack("<ddiddihii", 0.0, 1.0, 0, 0.0, 1.0, 0, code, w, h) + \
            np.ascontiguousarray(fr[::-1], dtype=flat.dtype.str.replace(">", "<")).tobytes()
        elements.append(element)
        tags.append(struct.pack("<hi", 0x4152, 1700000000 + i))
    data_offsets, tag_offsets, body = [], [], b""
    pos = first_element
    if tags_at_end:
        for e in elements:
            data_offsets.append(pos)
            pos += len(e)
        for t in tags:
            tag_offsets.append(pos)
            pos += len(t)
        body = b"".join(elements) + b"".join(tags)
    else:
        for i, (e, t) in enumerate(zip(elements, tags)):
            pad = b"\x00" * 24 if i in pad_after else b""
            data_offsets.append(pos)
            tag_offsets.append(pos + len(e))
            pos += len(e) + len(t) + len(pad)
            body += e + t + pad
    arrays = b"".join(struct.pack(off, v) for v in data_offsets + [0] * spare_elements)
    arrays += b"".join(struct.pack(off, v) for v in tag_offsets + [0] * spare_elements)
    with open(path, "wb") as f:
        f.write(head + struct.pack(off, offset_array) + struct.pack("<i", len(nav)) + dims + arrays + body)
    return os.fspath(path)
