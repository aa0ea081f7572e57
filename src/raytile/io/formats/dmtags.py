"""Read the tag tree of a Gatan DM3/DM4 file (only tags of plain numbers), e.g. a K2 IS ``.gtg``.

Tags come back flat, named as ncempy (and so LiberTEM) names them: the
labels of the groups from the root down, each preceded by a dot
(``".SI Dimensions.Size Y"``). Strings, arrays and structs are skipped;
image data is never read. Layout (DM4; DM3 uses 4-byte counts and has no
entry lengths): version ``>u4``, root length ``>u8``, byte order of the
data ``>u4`` (1: little-endian), then the root group: sorted ``u1``, open
``u1``, entry count; an entry is its kind (20 group, 21 data), label length
``>u2``, label, (DM4) its byte length ``>u8``, then a group or ``%%%%``,
the type description (a count, then that many integers) and the data.
"""

from __future__ import annotations

import struct
from typing import Any

from raytile.common.errors import DataSetException

__all__ = ["read_dm_tags"]

#: DM type codes of single numbers -> struct format (without byte order).
_SIMPLE = {2: "h", 3: "i", 4: "H", 5: "I", 6: "f", 7: "d", 8: "?", 9: "b", 10: "b", 11: "q", 12: "Q"}


class _Reader:
    def __init__(self, raw: bytes, path: str):
        self.raw = raw
        self.path = path
        self.pos = 0
        version = self.unpack(">I")
        if version not in (3, 4):
            raise DataSetException(f"{path}: not a DM3/DM4 tag file (version {version})")
        self.dm4 = version == 4
        self.count_fmt = ">Q" if self.dm4 else ">I"
        self.unpack(self.count_fmt)  # root length
        self.data_order = "<" if self.unpack(">I") == 1 else ">"

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.raw):
            raise DataSetException(f"{self.path}: DM tag tree ends early at byte {self.pos} (truncated?)")
        (value,) = struct.unpack_from(fmt, self.raw, self.pos)
        self.pos += size
        return value

    def group(self, prefix: str, out: dict[str, Any], depth: int = 0) -> None:
        if depth > 64:
            raise DataSetException(f"{self.path}: DM tag groups nested deeper than 64 (corrupt file?)")
        self.pos += 2  # sorted, open
        for _ in range(self.unpack(self.count_fmt)):
            kind = self.unpack("B")
            if kind == 0:  # end marker
                return
            label_len = self.unpack(">H")
            label = self.raw[self.pos:self.pos + label_len].decode("latin-1")
            self.pos += label_len
            end = self.pos + 8 + self.unpack(">Q") if self.dm4 else None
            name = f"{prefix}.{label}"
            if kind == 20:
                self.group(name, out, depth + 1)
            elif kind == 21:
                self.data(name, out)
            else:
                raise DataSetException(f"{self.path}: unknown DM tag kind {kind} at byte {self.pos} (corrupt file?)")
            if end is not None:
                self.pos = end

    def data(self, name: str, out: dict[str, Any]) -> None:
        if self.raw[self.pos:self.pos + 4] != b"%%%%":
            raise DataSetException(f"{self.path}: DM tag {name!r} lacks its %%%% marker (corrupt file?)")
        self.pos += 4
        info = [self.unpack(self.count_fmt) for _ in range(self.unpack(self.count_fmt))]
        if not info:
            raise DataSetException(f"{self.path}: DM tag {name!r} has an empty type description")
        fmt = _SIMPLE.get(info[0])
        if fmt is not None and len(info) == 1:
            out[name] = self.unpack(self.data_order + fmt)
        else:
            self.pos += self._size(info)

    def _size(self, info: list[int]) -> int:
        """Bytes of a string, array or struct (only needed in DM3, which has no entry lengths)."""
        kind = info[0]
        if kind == 18:  # string: UTF-16 characters
            return 2 * info[1]
        if kind == 15:  # struct: name length, field count, (name length, type) per field
            return sum(struct.calcsize(_SIMPLE.get(t, "B")) for t in info[3::2][: info[2]])
        if kind == 20:  # array: element type (a struct's description inline), then the count
            if info[1] == 15:
                nfields = info[3]
                elem = sum(struct.calcsize(_SIMPLE.get(t, "B")) for t in info[5:5 + 2 * nfields:2])
                return elem * info[-1]
            return struct.calcsize(_SIMPLE.get(info[1], "B")) * info[2]
        raise DataSetException(f"{self.path}: unknown DM data type {kind}")


def read_dm_tags(path: str) -> dict[str, Any]:
    """Numbers of the DM3/DM4 tag tree at ``path``, flat: ``{".Group.Tag": value}``.

    DataSetException naming the path for a file that is not a DM tag file or is cut short.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataSetException(f"{path}: cannot read: {e}") from None
    reader = _Reader(raw, path)
    out: dict[str, Any] = {}
    reader.group("", out)
    return out
