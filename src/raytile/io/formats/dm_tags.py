"""The tag tree of Gatan DigitalMicrograph files (DM3 and DM4), read without loading image data.

Layout (as described by the DM3/DM4 format notes of C. Boothroyd and B.
Schaffer, and read by every open DM reader): a header of ``version``
(big-endian int32, 3 or 4), the root length (u32 in DM3, u64 in DM4) and
the data byte order (int32: 1 little-endian, 0 big-endian), then the root
tag group. A tag group is ``sorted`` (u8), ``open`` (u8) and the tag count
(u32 / u64), followed by its tags. A tag is its kind (u8: 20 group, 21
data), its name length (u16) and name, in DM4 the tag's byte size (u64),
then a group, or for data the mark ``%%%%``, the count of type-info words
(u32 / u64) and the words (u32 / u64). The first word is the type:
simple types (2 int16, 3 int32, 4 uint16, 5 uint32, 6 float32, 7 float64,
8 bool, 9 char, 10 octet, 11 int64, 12 uint64) hold one value; 18 a
string; 15 a struct (``15, name length, field count, (name length, type)
per field``); 20 an array (``20, element type, length``, or for struct
elements ``20, 15, ..., length``). Structure words are big-endian; values
use the header's byte order.

Arrays are recorded by where they lie (:class:`ArrayRef`); only small ones
(strings, lists) are read, never image data. Everything is checked against the file's size, so a
corrupt or foreign file ends in a :class:`DataSetException` naming the
path, not in a hang or a huge allocation.

Example::

    tree = read_dm_tags("image.dm4")
    images = tree.root.get("ImageList").children()
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from raytile.common.errors import DataSetException

__all__ = ["DMTree", "TagGroup", "ArrayRef", "read_dm_tags", "tag_text", "flat_numbers", "SIMPLE_TYPES"]

#: Simple DM tag types: code -> (struct format char, numpy kind+size).
SIMPLE_TYPES: dict[int, tuple[str, str]] = {
    2: ("h", "i2"), 3: ("i", "i4"), 4: ("H", "u2"), 5: ("I", "u4"), 6: ("f", "f4"), 7: ("d", "f8"),
    8: ("?", "b1"), 9: ("b", "i1"), 10: ("B", "u1"), 11: ("q", "i8"), 12: ("Q", "u8"),
}
_STRUCT, _STRING, _ARRAY = 15, 18, 20
_GROUP, _DATA = 20, 21
#: Arrays with more elements than this are left in the file (an :class:`ArrayRef`).
_INLINE_ARRAY_MAX = 4096
_MAX_DEPTH = 64
_SKIPPED = object()  # a DM4 tag of a type this reader does not know, passed over by its byte size


@dataclass(frozen=True)
class ArrayRef:
    """An array tag: ``length`` values of ``dtype`` at byte ``offset``; small arrays also hold ``values``."""

    offset: int
    length: int
    dtype: np.dtype
    values: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.length * self.dtype.itemsize


class TagGroup:
    """A group of tags in file order; names may repeat or be empty (list entries are unnamed)."""

    def __init__(self, entries: list[tuple[str, Any]]):
        self.entries = entries

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the first tag called ``name``."""
        for key, value in self.entries:
            if key == name:
                return value
        return default

    def children(self) -> list[Any]:
        """The values of all tags, in order (a list group's items)."""
        return [value for _, value in self.entries]

    def __repr__(self) -> str:
        return f"TagGroup({[k for k, _ in self.entries]})"


@dataclass
class DMTree:
    """A parsed DM file: its version (3 or 4), data byte order and root tag group."""

    path: str
    version: int
    byteorder: str
    root: TagGroup


def tag_text(value: Any) -> str | None:
    """A tag's value as text: DM stores strings as arrays of uint16 (UTF-16 code units)."""
    if isinstance(value, str):
        return value
    if isinstance(value, ArrayRef):
        value = value.values
    if isinstance(value, np.ndarray) and value.dtype.kind in "ui" and value.ndim == 1:
        try:
            return value.astype("<u2").tobytes().decode("utf-16-le", errors="replace")
        except (ValueError, OverflowError):
            return None
    return None


class _Reader:
    def __init__(self, f: BinaryIO, path: str, size: int, version: int, byteorder: str):
        self.f, self.path, self.size = f, path, size
        self.word = ">Q" if version == 4 else ">I"
        self.wsize = 8 if version == 4 else 4
        self.version = version
        self.order = byteorder

    def fail(self, what: str) -> DataSetException:
        return DataSetException(f"{self.path}: corrupt DM{self.version} tag tree at byte {self.f.tell()}: {what}")

    def read(self, n: int) -> bytes:
        if n < 0 or self.f.tell() + n > self.size:
            raise self.fail(f"{n} bytes needed, the file ends at {self.size} (truncated?)")
        return self.f.read(n)

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def count(self, what: str, unit: int = 1) -> int:
        """A count word, bounded by what the rest of the file can hold (``unit`` bytes each at least)."""
        n = self.unpack(self.word)
        if n * unit > self.size - self.f.tell():
            raise self.fail(f"{what} {n} does not fit in the rest of the file")
        return int(n)

    def group(self, depth: int) -> TagGroup:
        if depth > _MAX_DEPTH:
            raise self.fail(f"tag groups nested deeper than {_MAX_DEPTH}")
        self.read(2)  # sorted, open
        n = self.count("tag count", 3)
        entries = []
        for _ in range(n):
            kind = self.unpack("B")
            if kind == 0:  # an end mark: some writers close a group early
                break
            name_len = self.unpack(">H")
            name = self.read(name_len).decode("latin-1")
            end = None
            if self.version == 4:
                size = self.unpack(">Q")  # the tag's byte size: unknown data types are skipped by it
                end = self.f.tell() + size
                if end > self.size:
                    raise self.fail(f"tag {name!r} of {size} bytes runs past the end of the file (truncated?)")
            if kind == _GROUP:
                entries.append((name, self.group(depth + 1)))
            elif kind == _DATA:
                entries.append((name, self.data(skippable=end is not None)))
            else:
                raise self.fail(f"tag {name!r} of unknown kind {kind} (expected 20 or 21)")
            if end is not None and entries[-1][1] is _SKIPPED:
                self.f.seek(end)
                entries.pop()
        return TagGroup(entries)

    def data(self, skippable: bool = False) -> Any:
        """A data tag's value; with ``skippable`` (DM4: the caller knows the tag's end) a value of an
        unknown type comes back as ``_SKIPPED`` instead of failing."""
        if self.read(4) != b"%%%%":
            raise self.fail("a data tag lacks its '%%%%' mark")
        n_info = self.count("type-info length", self.wsize)
        info = [int(self.unpack(self.word)) for _ in range(n_info)]
        if not info:
            raise self.fail("a data tag has no type")
        if skippable and not self.known(info):
            return _SKIPPED
        return self.value(info)

    def known(self, info: list[int]) -> bool:
        code = info[0]
        if code in SIMPLE_TYPES or code == _STRING:
            return True
        if code == _STRUCT:
            return len(info) >= 3 and all(t in SIMPLE_TYPES for t in info[4:4 + 2 * info[2]:2])
        if code == _ARRAY and len(info) >= 3:
            if info[1] == _STRUCT:
                return len(info) >= 5 and all(t in SIMPLE_TYPES for t in info[5:5 + 2 * info[3]:2])
            return info[1] in SIMPLE_TYPES
        return False

    def simple(self, code: int) -> Any:
        if code not in SIMPLE_TYPES:
            raise self.fail(f"unknown simple type {code}")
        return self.unpack(self.order + SIMPLE_TYPES[code][0])

    def struct_fields(self, info: list[int], at: int) -> list[int]:
        if len(info) < at + 3:
            raise self.fail(f"struct type info {info} is too short")
        n_fields = info[at + 2]
        types = info[at + 3:at + 3 + 2 * n_fields][1::2]
        if len(types) != n_fields or any(t not in SIMPLE_TYPES for t in types):
            raise self.fail(f"struct type info {info} is malformed")
        return types

    def value(self, info: list[int]) -> Any:
        code = info[0]
        if code in SIMPLE_TYPES:
            return self.simple(code)
        if code == _STRING:
            if len(info) < 2:
                raise self.fail("a string tag lacks its length")
            return self.read(2 * info[1]).decode("utf-16-le", errors="replace")
        if code == _STRUCT:
            return tuple(self.simple(t) for t in self.struct_fields(info, 0))
        if code == _ARRAY:
            if len(info) < 3:
                raise self.fail(f"array type info {info} is too short")
            length = info[-1]
            if info[1] == _STRUCT:
                types = self.struct_fields(info, 1)
                item = sum(int(SIMPLE_TYPES[t][1][1]) for t in types)
                self.skip_checked(length * item)
                return ArrayRef(self.f.tell() - length * item, length,
                                np.dtype([(f"f{i}", self.order + SIMPLE_TYPES[t][1]) for i, t in enumerate(types)]))
            if info[1] not in SIMPLE_TYPES:
                raise self.fail(f"array of unsupported element type {info[1]}")
            dtype = np.dtype(self.order + SIMPLE_TYPES[info[1]][1])
            offset = self.f.tell()
            self.skip_checked(length * dtype.itemsize)
            values = None
            if length <= _INLINE_ARRAY_MAX:
                self.f.seek(offset)
                values = np.frombuffer(self.f.read(length * dtype.itemsize), dtype=dtype).copy()
            return ArrayRef(offset, length, dtype, values)
        raise self.fail(f"unknown tag type {code}")

    def skip_checked(self, n: int) -> None:
        if n < 0 or self.f.tell() + n > self.size:
            raise self.fail(f"an array of {n} bytes runs past the end of the file ({self.size} bytes; truncated?)")
        self.f.seek(n, os.SEEK_CUR)


def flat_numbers(group: TagGroup, prefix: str = "") -> dict[str, Any]:
    """The simple-typed values (numbers, bools) under ``group``, flat, named as ncempy and LiberTEM name
    them: the labels from the root down, each preceded by a dot (``".SI Dimensions.Size Y"``), an
    unlabelled entry by its 1-based position in its group (``".ImageList.2.ImageData.DataType"``)."""
    out: dict[str, Any] = {}
    for i, (name, value) in enumerate(group.entries):
        key = f"{prefix}.{name or i + 1}"
        if isinstance(value, TagGroup):
            out.update(flat_numbers(value, key))
        elif isinstance(value, (int, float, bool)):
            out[key] = value
    return out


def read_dm_tags(path: str) -> DMTree:
    """Parse the tag tree of a DM3/DM4 file (DataSetException naming the path if it is not one)."""
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except OSError as e:
        raise DataSetException(f"{path}: cannot open the DM file: {e}") from None
    with f:
        head = f.read(4)
        if len(head) < 4:
            raise DataSetException(f"{path}: not a DM3/DM4 file: {size} bytes, shorter than its header")
        (version,) = struct.unpack(">i", head)
        if version not in (3, 4):
            raise DataSetException(f"{path}: not a DM3/DM4 file: version word {version} (expected 3 or 4)")
        rest = f.read(12 if version == 4 else 8)
        if len(rest) < (12 if version == 4 else 8):
            raise DataSetException(f"{path}: not a DM{version} file: truncated header")
        (order_flag,) = struct.unpack(">i", rest[-4:])
        if order_flag not in (0, 1):
            raise DataSetException(f"{path}: not a DM{version} file: byte order flag {order_flag} (expected 0 or 1)")
        reader = _Reader(f, path, size, version, "<" if order_flag == 1 else ">")
        root = reader.group(0)
    return DMTree(path, version, reader.order, root)
