"""The ASI Timepix3 (Accos) data stream: 32-byte headers and CSR chunks of events, read and written.

The format is LiberTEM-rs' ``libertem-asi-tpx3`` (0.3), which LiberTEM-live's
``asi_tpx3`` detector reads. Every message starts with a 32-byte header,
little-endian, fixed-width integers, its first byte the message's kind:

========================= ===== ============================================================
message                   tag   fields after the tag (then zeros up to 32 bytes)
========================= ===== ============================================================
``AcquisitionStart``      0x00  version u8, format u8 (0: CSR, 1: CSR of ToT), nav_shape 2 x u16,
                                indptr dtype u8, sig_shape 2 x u16, indices dtype u8, sequence u32
``ScanStart``             0x01  sequence u32, metadata_length u64 (that many bytes of JSON follow)
``ArrayChunk``            0x02  value dtype u8, nframes u32, nnz u32, indices_offset u32,
                                values_offset u32; a CSR payload follows (below)
``ScanEnd``               0x03  sequence u32
``AcquisitionEnd``        0x04  sequence u32
========================= ===== ============================================================

Dtype codes: 2 ``uint8``, 3 ``uint16``, 4 ``uint32``, 5 ``uint64`` (0 and 1, packed 1- and
4-bit values, are reserved; nothing sends them). An ``ArrayChunk``'s payload holds ``nframes``
frames as one CSR matrix of ``nframes`` rows of ``h * w`` pixels: ``indptr`` (``nframes + 1``
entries of the acquisition's indptr dtype, from 0) at offset 0, ``indices`` (``nnz`` pixel
indices) at ``indices_offset``, ``values`` (``nnz`` counts of the chunk's value dtype) at
``values_offset``; the payload ends after the values. A stream is acquisitions, each
``AcquisitionStart``, scans (``ScanStart``, chunks, ``ScanEnd``), ``AcquisitionEnd``; an
``AcquisitionEnd`` in place of a chunk ends a scan early (cancelled).

>>> start = AcquisitionStart(nav_shape=(2, 3), sig_shape=(4, 4))
>>> parse_header(start.encode(), "sim") == start
True
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

import numpy as np

from raytile.common.errors import AcquisitionError

__all__ = ["HEADER_BYTES", "DTYPES", "AcquisitionStart", "ScanStart", "ArrayChunk", "ScanEnd", "AcquisitionEnd",
           "Message", "parse_header", "dtype_code", "frames_csr", "encode_csr_chunk", "encode_chunk"]

HEADER_BYTES = 32

#: Dtype code on the wire -> numpy dtype (0 and 1, packed 1- and 4-bit values, are not supported).
DTYPES: dict[int, np.dtype] = {2: np.dtype("<u1"), 3: np.dtype("<u2"), 4: np.dtype("<u4"), 5: np.dtype("<u8")}

_START = struct.Struct("<BBBHHBHHBI15x")
_SCAN_START = struct.Struct("<BIQ19x")
_CHUNK = struct.Struct("<BBIIII14x")
_END = struct.Struct("<BI27x")


def _dtype(code: int, what: str, where: str) -> np.dtype:
    try:
        return DTYPES[code]
    except KeyError:
        raise AcquisitionError(f"{where}: {what} dtype code {code} is not supported (known: "
                               f"{', '.join(f'{c} {d.name}' for c, d in DTYPES.items())})") from None


def dtype_code(dtype: np.dtype | type | str) -> int:
    """The wire code of an unsigned integer dtype (ValueError for others)."""
    dt = np.dtype(dtype)
    for code, known in DTYPES.items():
        if known.kind == dt.kind and known.itemsize == dt.itemsize:
            return code
    raise ValueError(f"the Timepix3 stream carries uint8, uint16, uint32 or uint64 values, not {dt}")


@dataclass(frozen=True)
class AcquisitionStart:
    """An acquisition's geometry: scan and frame shapes, the dtypes of the CSR index arrays."""

    nav_shape: tuple[int, int]
    sig_shape: tuple[int, int]
    indptr_dtype: np.dtype = np.dtype("<u4")
    indices_dtype: np.dtype = np.dtype("<u4")
    sequence: int = 0
    version: int = 7
    format_type: int = 0

    @property
    def nimages(self) -> int:
        return int(self.nav_shape[0]) * int(self.nav_shape[1])

    def get_nav_shape(self) -> tuple[int, int]:
        """LiberTEM-live's name (its header object's)."""
        return self.nav_shape

    def get_sig_shape(self) -> tuple[int, int]:
        """LiberTEM-live's name (its header object's)."""
        return self.sig_shape

    def encode(self) -> bytes:
        return _START.pack(0, self.version, self.format_type, self.nav_shape[0], self.nav_shape[1],
                           dtype_code(self.indptr_dtype), self.sig_shape[0], self.sig_shape[1],
                           dtype_code(self.indices_dtype), self.sequence)


@dataclass(frozen=True)
class ScanStart:
    """A scan starts; ``metadata_length`` bytes of JSON metadata follow the header."""

    sequence: int = 0
    metadata_length: int = 0

    def encode(self) -> bytes:
        return _SCAN_START.pack(1, self.sequence, self.metadata_length)


@dataclass(frozen=True)
class ArrayChunk:
    """``nframes`` frames as a CSR payload of :meth:`payload_bytes` bytes following the header."""

    value_dtype: np.dtype
    nframes: int
    nnz: int
    indices_offset: int
    values_offset: int

    def payload_bytes(self, start: AcquisitionStart, where: str) -> int:
        """The payload's size; AcquisitionError if its offsets contradict the sizes of its arrays."""
        indptr = (self.nframes + 1) * start.indptr_dtype.itemsize
        indices_end = self.indices_offset + self.nnz * start.indices_dtype.itemsize
        if self.indices_offset < indptr or self.values_offset < indices_end:
            raise AcquisitionError(f"{where}: chunk of {self.nframes} frames and {self.nnz} events has "
                                   f"indices_offset {self.indices_offset} and values_offset {self.values_offset}, "
                                   f"overlapping its indptr ({indptr} bytes) or indices (up to {indices_end})")
        return self.values_offset + self.nnz * self.value_dtype.itemsize

    def encode(self) -> bytes:
        return _CHUNK.pack(2, dtype_code(self.value_dtype), self.nframes, self.nnz, self.indices_offset,
                           self.values_offset)


@dataclass(frozen=True)
class ScanEnd:
    sequence: int = 0

    def encode(self) -> bytes:
        return _END.pack(3, self.sequence)


@dataclass(frozen=True)
class AcquisitionEnd:
    sequence: int = 0

    def encode(self) -> bytes:
        return _END.pack(4, self.sequence)


Message = Union[AcquisitionStart, ScanStart, ArrayChunk, ScanEnd, AcquisitionEnd]


def parse_header(raw: bytes, where: str) -> Message:
    """The message a 32-byte header starts; AcquisitionError (naming ``where``) for an unknown kind."""
    if len(raw) != HEADER_BYTES:
        raise AcquisitionError(f"{where}: a header is {HEADER_BYTES} bytes, got {len(raw)}")
    tag = raw[0]
    if tag == 0:
        _, version, fmt, ny, nx, indptr, sy, sx, indices, seq = _START.unpack(raw)
        if fmt not in (0, 1):
            raise AcquisitionError(f"{where}: AcquisitionStart with unknown format type {fmt} (0: CSR, 1: ToT)")
        start = AcquisitionStart(nav_shape=(ny, nx), sig_shape=(sy, sx), sequence=seq, version=version,
                                 format_type=fmt, indptr_dtype=_dtype(indptr, "indptr", where),
                                 indices_dtype=_dtype(indices, "indices", where))
        if 0 in start.sig_shape:
            raise AcquisitionError(f"{where}: AcquisitionStart with sig_shape {start.sig_shape}")
        return start
    if tag == 1:
        _, seq, meta = _SCAN_START.unpack(raw)
        return ScanStart(sequence=seq, metadata_length=meta)
    if tag == 2:
        _, value, nframes, nnz, ioff, voff = _CHUNK.unpack(raw)
        return ArrayChunk(value_dtype=_dtype(value, "value", where), nframes=nframes, nnz=nnz, indices_offset=ioff,
                          values_offset=voff)
    if tag in (3, 4):
        _, seq = _END.unpack(raw)
        return ScanEnd(seq) if tag == 3 else AcquisitionEnd(seq)
    raise AcquisitionError(f"{where}: unknown header kind 0x{tag:02x} (first bytes {raw[:8].hex()}): not an ASI "
                           f"Timepix3 stream, or out of step with it")


def frames_csr(frames: np.ndarray, start: AcquisitionStart) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, values)`` of ``frames`` (``(k, h, w)``, unsigned ints): the CSR of their
    non-zero pixels in row order, index arrays in the acquisition's dtypes, values in the frames'."""
    k = int(frames.shape[0])
    flat = np.ascontiguousarray(frames).reshape(k, -1)
    rows, cols = np.nonzero(flat)
    indptr = np.zeros(k + 1, start.indptr_dtype)
    np.cumsum(np.bincount(rows, minlength=k), out=indptr[1:])
    return indptr, cols.astype(start.indices_dtype), flat[rows, cols].astype(flat.dtype.newbyteorder("<"))


def encode_csr_chunk(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> bytes:
    """Header and payload of an ``ArrayChunk`` of ``len(indptr) - 1`` frames (``indptr`` from 0)."""
    header = ArrayChunk(value_dtype=np.dtype(values.dtype), nframes=len(indptr) - 1, nnz=int(len(values)),
                        indices_offset=indptr.nbytes, values_offset=indptr.nbytes + indices.nbytes)
    return header.encode() + indptr.tobytes() + indices.tobytes() + values.tobytes()


def encode_chunk(frames: np.ndarray, start: AcquisitionStart) -> bytes:
    """Header and payload of an ``ArrayChunk`` holding ``frames`` (``(k, h, w)``, unsigned ints:
    their dtype is the chunk's value dtype)."""
    return encode_csr_chunk(*frames_csr(frames, start))
