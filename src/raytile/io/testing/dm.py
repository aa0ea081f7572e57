"""Write Gatan DigitalMicrograph files (DM3, DM4): a tag tree holding images.

Layout (the DM3/DM4 format notes of C. Boothroyd and B. Schaffer): header
``version`` (>i4), root length (>u4 in DM3, >u8 in DM4), byte-order flag
(>i4, 1 = little-endian values); the root tag group; 8 zero bytes. A group
is ``sorted`` u8, ``open`` u8, tag count (>u4 / >u8) and its tags; a tag is
its kind (20 group, 21 data), name length (>u2), name, in DM4 its byte size
(>u8), then the group or ``%%%%``, the count of type words and the words
(>u4 / >u8), then the value in the header's byte order. Images live in
``ImageList``: one unnamed group per image with ``ImageData`` (``Data``: an
array, ``DataType``, ``Dimensions``: x first, ``PixelDepth``) and
``ImageTags`` (``Meta Data``: ``Format``, ``Data Order Swapped``). The tree
written here also holds structs, arrays of structs, bools, floats and
strings around the images, as files from the microscope do, and a
thumbnail as image 0 (RGBA, DataType 23) unless ``thumbnail=False``.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

__all__ = ["write_dm"]

# numpy dtype -> (ImageData.DataType, array element type)
_IMAGE_TYPES = {
    "i2": (1, 2), "f4": (2, 6), "u1": (6, 10), "i4": (7, 3), "i1": (9, 9), "u2": (10, 4), "u4": (11, 5),
    "f8": (12, 7),
}
_SIMPLE = {2: "h", 3: "i", 4: "H", 5: "I", 6: "f", 7: "d", 8: "?", 9: "b", 10: "B"}


class _Writer:
    def __init__(self, version: int, order: str):
        self.v4 = version == 4
        self.word = ">Q" if self.v4 else ">I"
        self.order = order

    def tag(self, kind: int, name: str, body: bytes) -> bytes:
        nb = name.encode("latin-1")
        size = struct.pack(">Q", len(body)) if self.v4 else b""
        return bytes([kind]) + struct.pack(">H", len(nb)) + nb + size + body

    def group(self, entries: list[tuple[str, bytes, int]]) -> bytes:
        tags = b"".join(self.tag(kind, name, body) for name, body, kind in entries)
        return b"\x00\x01" + struct.pack(self.word, len(entries)) + tags

    def data(self, info: list[int], payload: bytes) -> bytes:
        return b"%%%%" + struct.pack(self.word, len(info)) + b"".join(struct.pack(self.word, i) for i in info) + payload

    def simple(self, code: int, value: Any) -> bytes:
        return self.data([code], struct.pack(self.order + _SIMPLE[code], value))

    def text(self, s: str) -> bytes:
        codes = np.frombuffer(s.encode("utf-16-le"), dtype="<u2")
        return self.data([20, 4, len(codes)], codes.astype(self.order + "u2").tobytes())

    def struct_(self, codes: list[int], values: list[Any]) -> bytes:
        info = [15, 0, len(codes)] + [x for c in codes for x in (0, c)]
        return self.data(info, b"".join(struct.pack(self.order + _SIMPLE[c], v) for c, v in zip(codes, values)))

    def struct_array(self, codes: list[int], rows: list[list[Any]]) -> bytes:
        info = [20, 15, 0, len(codes)] + [x for c in codes for x in (0, c)] + [len(rows)]
        payload = b"".join(struct.pack(self.order + _SIMPLE[c], v) for row in rows for c, v in zip(codes, row))
        return self.data(info, payload)

    def image(self, data: np.ndarray, dims: list[int], data_type: int, elem: int, fmt: str,
              swapped: bool | None, name: str) -> bytes:
        g, d = 20, 21
        meta: list[tuple[str, bytes, int]] = [("Format", self.text(fmt), d)]
        if swapped is not None:
            meta.append(("Data Order Swapped", self.simple(8, swapped), d))
        raw = np.ascontiguousarray(data).astype(np.dtype(self.order + data.dtype.str[1:])).tobytes()
        image_data = self.group([
            ("Calibrations", self.group([
                ("Brightness", self.group([("Origin", self.simple(6, 0.0), d), ("Scale", self.simple(6, 1.0), d),
                                           ("Units", self.text("counts"), d)]), g),
                ("Dimension", self.group([("", self.group([("Origin", self.simple(6, 0.0), d),
                                                           ("Scale", self.simple(6, 0.5), d),
                                                           ("Units", self.text("nm"), d)]), g) for _ in dims]), g),
            ]), g),
            ("Data", self.data([20, elem, data.size], raw), d),
            ("DataType", self.simple(3, data_type), d),
            ("Dimensions", self.group([("", self.simple(5, n), d) for n in dims]), g),
            ("PixelDepth", self.simple(3, data.dtype.itemsize), d),
        ])
        tags = self.group([
            ("Meta Data", self.group(meta), g),
            ("Acquisition", self.group([("Exposure (s)", self.simple(7, 0.002), d),
                                        ("Binning", self.struct_([3, 3], [1, 1]), d)]), g),
        ])
        return self.group([("ImageData", image_data, g), ("ImageTags", tags, g), ("Name", self.text(name), d),
                           ("UniqueID", self.struct_([5, 5, 5, 5], [1, 2, 3, 4]), d)])


def write_dm(path: str | os.PathLike, data: np.ndarray, version: int = 4, byteorder: str = "<",
             thumbnail: bool = True, data_order_swapped: bool | None = None, fmt: str | None = None,
             extra_tags: tuple[tuple[str, list[int], bytes], ...] = ()) -> str:
    """Write ``data`` (2-D image, 3-D stack ``(n, h, w)`` or 4-D ``(ny, nx, h, w)``) as a DM3/DM4 file.

    The stored ``Dimensions`` are ``data``'s shape reversed (x first) and
    the values are written in C order. ``data_order_swapped`` writes the
    ``Meta Data`` tag of that name (4-D data is C-ordered only with it
    True); ``fmt`` the ``Format`` tag (default "Diffraction image" for 4-D,
    "Image" otherwise); ``extra_tags`` adds data tags ``(name, type words, value bytes)`` to the root
    (e.g. of a type a reader does not know).
    """
    data = np.asarray(data)
    w = _Writer(version, byteorder)
    g, d = 20, 21
    data_type, elem = _IMAGE_TYPES[data.dtype.str[1:]]
    if fmt is None:
        fmt = "Diffraction image" if data.ndim == 4 else "Image"
    images = []
    if thumbnail:
        thumb = np.full((8, 8), 0xFF808080, dtype=np.uint32)
        images.append(("", w.image(thumb, [8, 8], 23, 5, "Image", None, "thumbnail"), g))
    images.append(("", w.image(data, list(data.shape[::-1]), data_type, elem, fmt, data_order_swapped, "data"), g))
    root = w.group([
        ("ApplicationBounds", w.struct_([3, 3, 3, 3], [0, 0, 1024, 1280]), d),
        ("DocumentObjectList", w.group([("", w.group([
            ("AnnotationType", w.simple(3, 20), d),
            ("Rectangle", w.struct_([6, 6, 6, 6], [0.0, 0.0, 64.0, 64.0]), d),
        ]), g)]), g),
        ("HasWindowPosition", w.simple(8, True), d),
        ("ImageList", w.group(images), g),
        ("InImageMode", w.simple(8, True), d),
        ("ThumbNails", w.struct_array([3, 3], [[0, 1], [8, 8]]), d),
    ] + [(name, w.data(info, payload), d) for name, info, payload in extra_tags])
    order_flag = 1 if byteorder == "<" else 0
    head = struct.pack(">i", version) + struct.pack(">Q" if version == 4 else ">I", len(root)) + \
        struct.pack(">i", order_flag)
    with open(path, "wb") as f:
        f.write(head + root + b"\x00" * 8)
    return os.fspath(path)
