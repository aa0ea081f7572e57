"""Decoders: turn the bytes of read ranges into pixels of a tile buffer.

Whole frames of a numpy dtype are read by numpy alone where the file layout
allows (see :mod:`raytile.io.backends.base`); these decoders serve the read
range path (packed, tiled and chunked layouts). A :class:`Decoder` names
the module-level numba function that decodes the read ranges one file
holds for a tile (:meth:`Decoder.tile_decoder`): :func:`decode_native_tile`
for numpy dtypes in either byte order, :func:`decode_packed_tile` for
``bits``-bit unsigned pixels packed into a bit stream (12-bit has a
dedicated loop over 3-byte groups); formats with their own layout add
theirs (``decode_k2is_tile``, ``decode_frms6_tile``). What is common to
all of them, picking each file's ranges of a tile and zero-filling frames
outside every file, is :func:`decode_tile`'s, once, in numpy: a kernel only
decodes the ranges it is handed. Module-level functions, rather than jitted closures per decoder,
let numba load the compiled code from its disk cache in every worker
process; one function per family, rather than one for all, means a worker
with an empty cache compiles only the kernels its data needs (measured,
uint16 to float32 tiles: 2.8 s to compile when one function held every
kernel; now 1.5 s for a tiled file, 0.8 s for packed 12-bit). ``do_clear()``
says whether the buffer must be zeroed before decoding (decoders that accumulate).
"""

from __future__ import annotations

from typing import Callable

import numba
import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.read_ranges import RR_FILE, RR_NPX, RR_OUT, RR_SKIP, RR_START, RR_STOP

__all__ = ["Decoder", "NativeDecoder", "PackedDecoder", "decode_tile", "decode_native_tile", "decode_packed_tile"]


class Decoder:
    """Base class: which jitted function decodes the file's bytes."""

    #: Bits per pixel in the file.
    bpp: int = 8

    def tile_decoder(self) -> tuple[Callable, tuple]:
        """``(decode, args)``: ``decode(inp, ranges, out, *args)`` decodes ``ranges``, read ranges of
        one file (rows of ``(file_idx, start, stop, out_start, n_px, skip)``), from ``inp``, that
        file's bytes, into the flat tile ``out`` (see :func:`decode_tile`, which calls it)."""
        raise NotImplementedError

    def do_clear(self) -> bool:
        return False

    def file_dtype(self) -> np.dtype | None:
        """The numpy dtype whose items are the stored pixels byte for byte, or None (decoding needed).

        With one, whole frames are read by numpy alone (views and
        ``np.copyto``), without jitted code (see :mod:`raytile.io.backends.base`).
        """
        return None

    def describe(self) -> str:
        return type(self).__name__


class NativeDecoder(Decoder):
    """Pixels stored as a numpy dtype, in either byte order."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        if self.dtype.hasobject or self.dtype.kind not in "biuf":
            raise DataSetException(f"cannot decode dtype {self.dtype}: only bool, int, uint and float")
        self.bpp = self.dtype.itemsize * 8

    def tile_decoder(self) -> tuple[Callable, tuple]:
        native = self.dtype.newbyteorder("=")
        value = np.dtype(np.uint8) if native.kind == "b" else native
        swapped = not self.dtype.isnative and self.dtype.itemsize > 1
        return decode_native_tile, (swapped, np.empty(0, dtype=value))

    def file_dtype(self) -> np.dtype | None:
        return self.dtype

    def describe(self) -> str:
        return f"native {self.dtype.str}"


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

    def tile_decoder(self) -> tuple[Callable, tuple]:
        return decode_packed_tile, (self.bpp, self.bit_order == "msb")

    def describe(self) -> str:
        return f"packed {self.bpp}-bit, {self.bit_order} first"


@numba.njit(cache=True, nogil=True)
def _copy_native(inp, out, proto):
    vals = inp.view(proto.dtype)
    for i in range(out.shape[0]):
        out[i] = vals[i]


@numba.njit(cache=True, nogil=True)
def _copy_swapped(inp, out, proto):
    isz = proto.itemsize
    n = out.shape[0]
    tmp = np.empty(n * isz, dtype=np.uint8)
    for i in range(n):
        for k in range(isz):
            tmp[i * isz + k] = inp[i * isz + isz - 1 - k]
    vals = tmp.view(proto.dtype)
    for i in range(n):
        out[i] = vals[i]


@numba.njit(cache=True, nogil=True, inline="always")
def _pair_12(b0, b1, b2, msb):
    if msb:
        return (b0 << 4) | (b1 >> 4), ((b1 & 0x0F) << 8) | b2
    return b0 | ((b1 & 0x0F) << 8), (b1 >> 4) | (b2 << 4)


@numba.njit(cache=True, nogil=True)
def _decode_12(inp, out, skip, msb):
    """Two pixels per 3 bytes; ``skip`` (0 or 1) pixels of the first group are dropped."""
    n = out.shape[0]
    if n == 0:
        return
    i = 0
    g = 0
    if skip:
        lo, hi = _pair_12(np.uint32(inp[0]), np.uint32(inp[1]), np.uint32(inp[2]), msb)
        out[0] = hi
        i = 1
        g = 1
    pairs = (n - i) // 2
    for k in range(pairs):
        b = (g + k) * 3
        lo, hi = _pair_12(np.uint32(inp[b]), np.uint32(inp[b + 1]), np.uint32(inp[b + 2]), msb)
        out[i + 2 * k] = lo
        out[i + 2 * k + 1] = hi
    i += 2 * pairs
    if i < n:
        b = (g + pairs) * 3
        lo, hi = _pair_12(np.uint32(inp[b]), np.uint32(inp[b + 1]), np.uint32(inp[b + 2]), msb)
        out[i] = lo


@numba.njit(cache=True, nogil=True)
def _decode_bits(inp, out, skip, bits, msb):
    """Generic bit reader: ``bits`` bits per pixel, ``skip`` leading pixels dropped."""
    mask = np.uint64((1 << bits) - 1)
    pos = skip * bits
    byte = pos >> 3
    drop = pos & 7
    acc = np.uint64(0)
    nacc = 0
    if drop:
        if msb:
            acc = np.uint64(inp[byte]) & np.uint64((1 << (8 - drop)) - 1)
        else:
            acc = np.uint64(inp[byte]) >> np.uint64(drop)
        nacc = 8 - drop
        byte += 1
    for i in range(out.shape[0]):
        while nacc < bits:
            if msb:
                acc = (acc << np.uint64(8)) | np.uint64(inp[byte])
            else:
                acc |= np.uint64(inp[byte]) << np.uint64(nacc)
            byte += 1
            nacc += 8
        if msb:
            out[i] = (acc >> np.uint64(nacc - bits)) & mask
        else:
            out[i] = acc & mask
            acc >>= np.uint64(bits)
        nacc -= bits


def decode_tile(decode: Callable, args: tuple, source: Callable[[int], np.ndarray], ranges: np.ndarray,
                fmin: int, fmax: int, blank: bool, out: np.ndarray) -> None:
    """Decode one tile's read ranges into ``out``, the flat tile buffer, with a decoder's kernel.

    ``(decode, args)`` is :meth:`Decoder.tile_decoder`'s; ``source(f)`` the
    bytes of file ``f``; ``ranges`` the tile's read ranges, reading files
    ``fmin..fmax`` (:data:`~raytile.io.read_ranges.META_FMIN`, ``META_FMAX``);
    ``blank``: some of its frames lie outside every file (ranges of file -1):
    the tile is zeroed first, and they stay zero. Each file's ranges go to
    ``decode`` in one call, in their order; a tile of one file (the usual
    case) is handed over as it is.

    >>> decode, args = NativeDecoder("<u2").tile_decoder()
    >>> raw = np.arange(4, dtype="<u2").view(np.uint8)
    >>> ranges = np.array([[0, 2, 6, 0, 2, 0], [-1, 0, 0, 2, 2, 0]])  # pixels 1, 2 of file 0; 2 blank
    >>> out = np.full(4, 9.0)
    >>> decode_tile(decode, args, lambda f: raw, ranges, 0, 0, True, out)
    >>> out
    array([1., 2., 0., 0.])
    """
    if blank:
        out[:] = 0
    if fmin == fmax and not blank:
        decode(source(fmin), ranges, out, *args)
        return
    files = ranges[:, RR_FILE]
    for f in range(fmin, fmax + 1):
        mine = ranges[files == f]
        if mine.shape[0]:
            decode(source(f), mine, out, *args)


@numba.njit(cache=True, nogil=True)
def decode_native_tile(inp, ranges, out, swapped, proto):
    """Decode ``ranges`` (read ranges of one file, see :func:`decode_tile`) from ``inp`` into ``out``.

    ``inp`` holds that file's bytes (a map of the file, or a read buffer the
    ranges were translated into); ``out`` is the flat tile buffer.
    ``proto`` is an empty array of the values' native dtype; ``swapped``
    says the file holds them in the other byte order.
    """
    for i in range(ranges.shape[0]):
        o = ranges[i, RR_OUT]
        src = inp[ranges[i, RR_START]:ranges[i, RR_STOP]]
        if swapped:
            _copy_swapped(src, out[o:o + ranges[i, RR_NPX]], proto)
        else:
            _copy_native(src, out[o:o + ranges[i, RR_NPX]], proto)


@numba.njit(cache=True, nogil=True)
def decode_packed_tile(inp, ranges, out, bits, msb):
    """:func:`decode_native_tile` for ``bits``-bit pixels in a bit stream, ``msb`` or LSB first."""
    for i in range(ranges.shape[0]):
        o = ranges[i, RR_OUT]
        src = inp[ranges[i, RR_START]:ranges[i, RR_STOP]]
        if bits == 12:
            _decode_12(src, out[o:o + ranges[i, RR_NPX]], ranges[i, RR_SKIP], msb)
        else:
            _decode_bits(src, out[o:o + ranges[i, RR_NPX]], ranges[i, RR_SKIP], bits, msb)
