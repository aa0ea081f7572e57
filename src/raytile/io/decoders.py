"""Decoders: turn the bytes of one read range into pixels of a tile buffer.

``Decoder.get_decode(native_dtype, read_dtype)`` returns a numba function
``decode(inp, out, skip)``: ``inp`` the range's bytes (uint8), ``out`` the
destination pixels (a 1D view of the flat tile buffer), ``skip`` pixels of
the decoded bytes to drop first (bit-packed data). It is called once per read
range by :func:`make_decode_tile`'s driver. ``do_clear()`` says whether
the buffer must be zeroed before decoding (decoders that accumulate).

Shipped: :class:`NativeDecoder` (numpy dtypes, byte-swapping big-endian
data), :class:`PackedDecoder` (12-bit: two pixels in three bytes; 1-bit and
6-bit counting-detector frames; ``bit_order`` "lsb" or "msb").
"""

from __future__ import annotations

import numba
import numpy as np

from raytile.errors import DataSetException
from raytile.io.read_ranges import RR_FILE, RR_NPX, RR_OUT, RR_SKIP, RR_START, RR_STOP


class Decoder:
    """Base class: a decode function per (native dtype, read dtype)."""

    #: Bits per pixel in the file.
    bpp: int = 8

    def get_decode(self, native_dtype, read_dtype):
        raise NotImplementedError

    def do_clear(self) -> bool:
        return False

    def is_identity(self, native_dtype, read_dtype) -> bool:
        """True when the file's bytes already are the tile (mmap "straight" reading is possible)."""
        return False

    def describe(self) -> str:
        return type(self).__name__


_DECODE_CACHE: dict = {}


def _native_decode(itemsize: int, scalar, swap: bool):
    key = ("native", itemsize, scalar, swap)
    fn = _DECODE_CACHE.get(key)
    if fn is not None:
        return fn
    if not swap:
        @numba.njit(cache=True, nogil=True)
        def decode(inp, out, skip):
            vals = inp.view(scalar)
            for i in range(out.shape[0]):
                out[i] = vals[i]
    else:
        @numba.njit(cache=True, nogil=True)
        def decode(inp, out, skip):
            n = out.shape[0]
            tmp = np.empty(n * itemsize, dtype=np.uint8)
            for i in range(n):
                for k in range(itemsize):
                    tmp[i * itemsize + k] = inp[i * itemsize + itemsize - 1 - k]
            vals = tmp.view(scalar)
            for i in range(n):
                out[i] = vals[i]
    _DECODE_CACHE[key] = decode
    return decode


class NativeDecoder(Decoder):
    """Pixels stored as a numpy dtype, in either byte order."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        if self.dtype.hasobject or self.dtype.kind not in "biuf":
            raise DataSetException(f"cannot decode dtype {self.dtype}: only bool, int, uint and float")
        self.bpp = self.dtype.itemsize * 8

    def get_decode(self, native_dtype=None, read_dtype=None):
        native = self.dtype.newbyteorder("=")
        swap = not self.dtype.isnative and self.dtype.itemsize > 1
        scalar = np.uint8 if native.kind == "b" else native.type
        return _native_decode(native.itemsize, scalar, swap)

    def is_identity(self, native_dtype, read_dtype) -> bool:
        return self.dtype.isnative and np.dtype(read_dtype) == self.dtype

    def describe(self) -> str:
        return f"native {self.dtype.str}"


@numba.njit(cache=True, nogil=True)
def _decode_12_lsb(inp, out, skip):
    n = out.shape[0]
    for i in range(n):
        p = i + skip
        b = (p >> 1) * 3
        if p & 1:
            out[i] = (inp[b + 1] >> 4) | (np.uint16(inp[b + 2]) << 4)
        else:
            out[i] = inp[b] | (np.uint16(inp[b + 1] & 0x0F) << 8)


@numba.njit(cache=True, nogil=True)
def _decode_12_msb(inp, out, skip):
    n = out.shape[0]
    for i in range(n):
        p = i + skip
        b = (p >> 1) * 3
        if p & 1:
            out[i] = (np.uint16(inp[b + 1] & 0x0F) << 8) | inp[b + 2]
        else:
            out[i] = (np.uint16(inp[b]) << 4) | (inp[b + 1] >> 4)


def _bits_decode(bits: int, msb: bool):
    key = ("bits", bits, msb)
    fn = _DECODE_CACHE.get(key)
    if fn is not None:
        return fn
    mask = (1 << bits) - 1

    if msb:
        @numba.njit(cache=True, nogil=True)
        def decode(inp, out, skip):
            for i in range(out.shape[0]):
                bit = (i + skip) * bits
                v = 0
                for k in range(bits):
                    pos = bit + k
                    v = (v << 1) | ((inp[pos >> 3] >> (7 - (pos & 7))) & 1)
                out[i] = v
    else:
        @numba.njit(cache=True, nogil=True)
        def decode(inp, out, skip):
            for i in range(out.shape[0]):
                bit = (i + skip) * bits
                v = 0
                for k in range(bits):
                    pos = bit + k
                    v |= ((inp[pos >> 3] >> (pos & 7)) & 1) << k
                out[i] = v & mask
    _DECODE_CACHE[key] = decode
    return decode


class PackedDecoder(Decoder):
    """Unsigned integers of ``bits`` bits packed back to back into a bit stream.

    ``bit_order="lsb"``: pixel ``i`` occupies stream bits ``[i*bits, (i+1)*bits)``
    counted from the least significant bit of each byte, its own LSB first
    (12-bit: ``p0 = b0 | (b1 & 0xF) << 8``, ``p1 = b1 >> 4 | b2 << 4``).
    ``bit_order="msb"``: bits counted from the most significant bit of each
    byte, the pixel's MSB first (12-bit: ``p0 = b0 << 4 | b1 >> 4``,
    ``p1 = (b1 & 0xF) << 8 | b2``). 1-bit frames with "msb" are ``np.packbits`` order.
    """

    def __init__(self, bits: int, bit_order: str = "lsb"):
        bits = int(bits)
        if not 1 <= bits <= 32 or bits in (8, 16, 32):
            raise DataSetException(f"packed decoder needs 1..31 bits (not 8/16), got {bits}")
        if bit_order not in ("lsb", "msb"):
            raise DataSetException(f"bit_order must be 'lsb' or 'msb', got {bit_order!r}")
        self.bpp = bits
        self.bit_order = bit_order

    @property
    def native_dtype(self) -> np.dtype:
        return np.dtype(np.uint8 if self.bpp <= 8 else (np.uint16 if self.bpp <= 16 else np.uint32))

    def get_decode(self, native_dtype=None, read_dtype=None):
        if self.bpp == 12:
            return _decode_12_msb if self.bit_order == "msb" else _decode_12_lsb
        return _bits_decode(self.bpp, self.bit_order == "msb")

    def describe(self) -> str:
        return f"packed {self.bpp}-bit, {self.bit_order} first"


_TILE_DECODERS: dict = {}


def make_decode_tile(decode):
    """A jitted driver calling ``decode`` for every read range of one tile that reads ``file_idx``.

    ``decode_tile(inp, base, rr_tile, n_rr, file_idx, out_flat)``: ``inp`` holds
    the file's bytes from offset ``base`` on. With ``file_idx == -1`` it zero-fills
    the ranges of frames outside every file.
    """
    fn = _TILE_DECODERS.get(decode)
    if fn is not None:
        return fn

    @numba.njit(cache=True, nogil=True)
    def decode_tile(inp, base, rr_tile, n_rr, file_idx, out_flat):
        for i in range(n_rr):
            if rr_tile[i, RR_FILE] != file_idx:
                continue
            o = rr_tile[i, RR_OUT]
            n = rr_tile[i, RR_NPX]
            if file_idx < 0:
                out_flat[o:o + n] = 0
                continue
            s = rr_tile[i, RR_START] - base
            e = rr_tile[i, RR_STOP] - base
            decode(inp[s:e], out_flat[o:o + n], rr_tile[i, RR_SKIP])

    _TILE_DECODERS[decode] = decode_tile
    return decode_tile
