"""The ``packed_raw`` format: frames of bit-packed unsigned pixels (12-bit, 1-bit, 6-bit, ...).

``bits=12``: two pixels in three bytes; ``bits=1``/``6``: counting-detector
frames. ``bit_order`` selects the packing (see
:class:`~raytile.io.decoders.PackedDecoder`). Each frame occupies whole
pixel groups (12-bit: 3 bytes per 2 pixels, 1-bit: 1 byte per 8 pixels,
6-bit: 3 bytes per 4 pixels), plus optional headers as in ``raw``.
Tiles come out as the smallest unsigned dtype that holds ``bits`` bits,
or ``dtype`` if given.
"""

from __future__ import annotations

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.dataset import DataSetMeta
from raytile.io.decoders import PackedDecoder
from raytile.io.formats.raw import RawFileDataSet

__all__ = ["PackedRawDataSet", "pack_bits"]


def pack_bits(values: np.ndarray, bits: int, bit_order: str = "lsb") -> bytes:
    """Pack frames ``(n, *sig)`` of unsigned ints into the byte layout ``packed_raw`` reads (a writer for tests and tools)."""
    from raytile.io.read_ranges import pixel_groups

    values = np.asarray(values)
    n = values.shape[0]
    flat = values.reshape(n, -1).astype(np.uint64)
    g, bpg = pixel_groups(bits)
    frame_px = flat.shape[1]
    padded = np.zeros((n, -(-frame_px // g) * g), dtype=np.uint64)
    padded[:, :frame_px] = flat
    # bit matrix: pixel bits LSB first (lsb order) or MSB first (msb order)
    shifts = np.arange(bits, dtype=np.uint64)
    if bit_order == "msb":
        shifts = shifts[::-1]
    bitmat = ((padded[..., None] >> shifts) & 1).astype(np.uint8).reshape(n, -1)
    packed = np.packbits(bitmat, axis=1, bitorder="little" if bit_order == "lsb" else "big")
    return packed.tobytes()


class PackedRawDataSet(RawFileDataSet):
    """Raw files of ``bits``-bit packed pixels; ``ctx.load("packed_raw", path=..., nav_shape=..., sig_shape=..., bits=12)``."""

    format_name = "packed_raw"
    partial_last_frame_ok = False  # a wrong ``bits`` shows as a size that is not whole frames
    params_schema = {
        "dtype": {"type": "dtype"},
        "bits": {"type": "int", "required": True, "min": 1, "max": 31},
        "bit_order": {"type": "choice", "choices": ["lsb", "msb"]},
    }

    def __init__(self, path: str | list[str], nav_shape: tuple[int, ...], sig_shape: tuple[int, ...],
                 bits: int, bit_order: str = "lsb", dtype: np.dtype | None = None, **kwargs):
        if bits in (8, 16):
            raise ConfigValidationError(f"packed_raw: parameter 'bits' must not be {bits}: "
                                        f"read {bits}-bit pixels with the raw format and dtype uint{bits}")
        self._bits = bits
        self._decoder_packed = PackedDecoder(bits, bit_order)
        native = self._decoder_packed.native_dtype
        out = dtype if dtype is not None else native
        if out.kind not in "uif" or (out.kind in "ui" and out.itemsize * 8 < bits):
            raise ConfigValidationError(f"packed_raw: parameter 'dtype' {out} cannot hold {bits}-bit pixels "
                                        f"(parameter 'bits' {bits})")
        super().__init__(path, nav_shape=nav_shape, sig_shape=sig_shape, dtype=out, **kwargs)

    def _bpp(self) -> int:
        return self._bits

    def _do_initialize(self) -> DataSetMeta:
        meta = super()._do_initialize()
        self._decoder = self._decoder_packed
        self._native_dtype = self._decoder_packed.native_dtype
        return meta

    def get_cache_key(self):
        return ("packed_raw", super().get_cache_key(), self._bits, self._decoder_packed.bit_order)
