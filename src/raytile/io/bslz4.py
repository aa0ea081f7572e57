"""Decoding HDF5 chunks compressed with bitshuffle-LZ4 (filter 32008) or LZ4 (filter 32004), many per call.

DECTRIS detectors (EIGER, ARINA, QUADRO) store frames as HDF5 chunks of one
frame each, compressed by the bitshuffle filter with LZ4. HDF5's own filter
pipeline (h5py with ``hdf5plugin``) decodes them one chunk per library call
on one core of the reading process (h5py #2593). raytile instead reads the
stored chunk bytes itself (from a file map, at the offsets HDF5 reports)
and decodes them in each worker with :func:`decode_chunks`: one call of a
numba loop (``cache=True``: a second process loads it from disk) for a
whole tile of chunks, which walks each chunk's block headers and calls the C
kernels of the ``bitshuffle`` package (the filter's reference
implementation, the same code ``hdf5plugin`` builds): ``LZ4_decompress_safe``
per block and ``bshuf_untrans_bit_elem`` (SIMD) to undo the bit transpose.
Calling the per-block kernels rather than ``bshuf_decompress_lz4`` keeps
OpenMP out (its per-call thread team cost ~0.8 ms a frame on a busy
machine) and lets every length be checked against the chunk first.

Measured on one core (``python benchmarks/_formats_dectris.py --decoders``:
4000 ARINA-like 96x96 uint16 frames in the page cache, a shared 2-core
machine): HDF5's filter pipeline (h5py + hdf5plugin) 0.91 GB/s,
``bitshuffle.decompress_lz4`` called per chunk 0.78 GB/s (one OpenMP
thread), this loop 2.52 GB/s. A pure numba LZ4 + bit-unshuffle and
``lz4.block`` with a jitted unshuffle were 5-8x slower than this loop.

Layouts, from the filters' documentation (bitshuffle's ``bshuf_h5filter.c``
and ``bitshuffle_core.c``, the HDF5 LZ4 filter 32004's description):

* bitshuffle-LZ4 chunk: 8-byte big-endian uncompressed size, 4-byte
  big-endian block size in bytes, then per block of ``block_size /
  elem_size`` elements a 4-byte big-endian compressed length and an LZ4
  block. The elements left after the whole blocks, rounded down to a
  multiple of 8, make one more (shorter) block; the last ``n % 8`` elements
  follow uncompressed.
* LZ4 chunk (32004): 8-byte big-endian uncompressed size, 4-byte big-endian
  block size in bytes, then per block a 4-byte big-endian compressed length
  and an LZ4 block; a block whose compressed length equals its plain length
  is stored as it is.

A corrupt or truncated chunk gives a negative status (:func:`split_status`
names the chunk and the problem), never a read or write outside the chunk
or the output.

>>> import numpy as np
>>> chunk = np.frombuffer(bytes.fromhex("0000000000000008" "00000010") + bytes(range(8)), np.uint8)
>>> out = np.empty((1, 8), np.uint8)   # 4 uint16 pixels: fewer than 8 elements are stored raw
>>> decode_chunks(chunk, np.array([0]), np.array([len(chunk)]), np.zeros(1, np.bool_), CODEC_BSLZ4, 2, out)
0
>>> out[0].view(np.uint16).tolist()
[256, 770, 1284, 1798]
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types

from raytile.common.errors import DataSetException

__all__ = ["CODEC_RAW", "CODEC_BSLZ4", "CODEC_LZ4", "ERRORS", "decode_chunks", "split_status", "have_decoder", "check_decoder"]

#: Chunks stored as plain bytes (no filter).
CODEC_RAW = 0
#: bitshuffle (HDF5 filter 32008) with LZ4 compression.
CODEC_BSLZ4 = 1
#: LZ4 alone (HDF5 filter 32004).
CODEC_LZ4 = 2

#: What is wrong with a chunk, by the (negated) status of :func:`decode_chunks`.
ERRORS = {
    1: "the chunk is shorter than its header and block lengths say (truncated)",
    2: "the chunk's uncompressed size does not match the chunk shape",
    3: "an LZ4 block is corrupt",
    4: "the chunk's block size is not a positive multiple of 8 elements",
    5: "the bit transpose failed",
}


def _load_kernels() -> bool:
    """Make the bitshuffle package's C symbols known to numba's linker; False without the package."""
    try:
        import bitshuffle.ext
        import llvmlite.binding as llvm
    except ImportError:
        return False
    llvm.load_library_permanently(bitshuffle.ext.__file__)
    return True


_HAVE_KERNELS = _load_kernels()

# int LZ4_decompress_safe(const char* src, char* dst, int compressedSize, int dstCapacity)
_lz4_decompress_safe = types.ExternalFunction(
    "LZ4_decompress_safe", types.int32(types.uintp, types.uintp, types.int32, types.int32))
# int64_t bshuf_untrans_bit_elem(const void* in, void* out, size_t size, size_t elem_size)
_bshuf_untrans_bit_elem = types.ExternalFunction(
    "bshuf_untrans_bit_elem", types.int64(types.uintp, types.uintp, types.uintp, types.uintp))


def have_decoder() -> bool:
    """Whether :func:`decode_chunks` can run (the ``bitshuffle`` package is installed)."""
    return _HAVE_KERNELS


@numba.njit(cache=True, nogil=True, inline="always")
def _be_u32(buf, pos):
    return (np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8) \
        | np.int64(buf[pos + 3])


@numba.njit(cache=True, nogil=True, inline="always")
def _block_bytes(buf, start, stop, nbytes):
    """The chunk header's block size in bytes, or minus an :data:`ERRORS` key."""
    if stop - start < 12:
        return -1
    if (_be_u32(buf, start) << 32) | _be_u32(buf, start + 4) != nbytes:
        return -2
    block_bytes = _be_u32(buf, start + 8)
    return block_bytes if block_bytes > 0 else -4


@numba.njit(cache=True, nogil=True, inline="always")
def _block_length(buf, ip, stop):
    """The compressed length of the block whose length field is at ``ip``, or -1 if it overruns ``stop``."""
    if ip + 4 > stop:
        return -1
    clen = _be_u32(buf, ip)
    return clen if ip + 4 + clen <= stop else -1


@numba.njit(cache=True, nogil=True)
def _decode_bslz4(buf, start, stop, elem_size, row, scratch):
    block_bytes = _block_bytes(buf, start, stop, row.shape[0])
    if block_bytes < 0:
        return -block_bytes
    if block_bytes % (8 * elem_size):
        return 4
    block = block_bytes // elem_size
    n = row.shape[0] // elem_size
    whole = n - n % 8
    ip = start + 12
    done = 0
    base = buf.ctypes.data
    out = row.ctypes.data
    tmp = scratch.ctypes.data
    while done < whole:
        this = min(block, whole - done)
        clen = _block_length(buf, ip, stop)
        if clen < 0:
            return 1
        ip += 4
        want = this * elem_size
        if _lz4_decompress_safe(base + ip, tmp, clen, want) != want:
            return 3
        if _bshuf_untrans_bit_elem(tmp, out + done * elem_size, this, elem_size) < 0:
            return 5
        ip += clen
        done += this
    left = (n - done) * elem_size
    if ip + left > stop:
        return 1
    for i in range(left):
        row[done * elem_size + i] = buf[ip + i]
    return 0


@numba.njit(cache=True, nogil=True)
def _decode_lz4(buf, start, stop, row):
    nbytes = row.shape[0]
    block_bytes = _block_bytes(buf, start, stop, nbytes)
    if block_bytes < 0:
        return -block_bytes
    ip = start + 12
    done = 0
    base = buf.ctypes.data
    out = row.ctypes.data
    while done < nbytes:
        this = min(block_bytes, nbytes - done)
        clen = _block_length(buf, ip, stop)
        if clen < 0:
            return 1
        ip += 4
        if clen == this:  # stored as it is
            for i in range(this):
                row[done + i] = buf[ip + i]
        elif _lz4_decompress_safe(base + ip, out + done, clen, this) != this:
            return 3
        ip += clen
        done += this
    return 0


@numba.njit(cache=True, nogil=True)
def decode_chunks(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, stored_raw: np.ndarray, codec: int,
                  elem_size: int, out: np.ndarray) -> int:
    """Decode chunk ``i`` (``buf[offsets[i]:offsets[i] + sizes[i]]``) into the byte row ``out[i]``.

    ``buf`` is uint8 (a file map); ``codec`` is :data:`CODEC_BSLZ4`,
    :data:`CODEC_LZ4` or :data:`CODEC_RAW`; a chunk with ``stored_raw[i]``
    (HDF5 skipped its filter: the chunk's filter mask) is copied as it is.
    ``out`` is ``(chunks, chunk bytes)`` uint8, C-contiguous: a view of the
    destination pixels of ``elem_size`` bytes each. Returns 0, or for the
    first chunk ``i`` that fails ``-(16 * i + e)`` with ``e`` a key of
    :data:`ERRORS`: see :func:`split_status`.
    """
    scratch = np.empty(max(out.shape[1], 1), np.uint8)  # one block is at most the chunk's bytes
    for i in range(offsets.shape[0]):
        start = offsets[i]
        stop = start + sizes[i]
        row = out[i]
        if start < 0 or stop > buf.shape[0]:
            return -(16 * i + 1)
        if stored_raw[i] or codec == CODEC_RAW:
            if sizes[i] < row.shape[0]:
                return -(16 * i + 1)
            for k in range(row.shape[0]):
                row[k] = buf[start + k]
            st = 0
        elif codec == CODEC_BSLZ4:
            st = _decode_bslz4(buf, start, stop, elem_size, row, scratch)
        else:
            st = _decode_lz4(buf, start, stop, row)
        if st != 0:
            return -(16 * i + st)
    return 0


def split_status(status: int) -> tuple[int, str]:
    """``(chunk index, what is wrong)`` of a negative :func:`decode_chunks` status."""
    code = -int(status)
    return code // 16, ERRORS.get(code % 16, f"unknown decoding error {code % 16}")


def check_decoder() -> None:
    """DataSetException unless the ``bitshuffle`` package is there for :func:`decode_chunks`."""
    if not _HAVE_KERNELS:
        raise DataSetException(
            "decoding bitshuffle/LZ4 chunks in the workers needs the bitshuffle package; "
            "pip install 'raytile[hdf5]' (or read with decoder='hdf5plugin')"
        )
