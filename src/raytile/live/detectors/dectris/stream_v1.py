"""DECTRIS ZeroMQ stream V1 (SIMPLON "stream" interface): its JSON multipart messages, read and written.

A series on the PUSH socket is (SIMPLON API reference, stream interface):

* global header, one multipart message: ``{"htype": "dheader-1.0",
  "series": S, "header_detail": "basic"|"all"|"none"}`` then, unless
  ``none``, the detector configuration as JSON (``x_pixels_in_detector``,
  ``nimages``, ``ntrigger``, ``bit_depth_image``, ...);
* per image, one multipart message of four parts: ``{"htype":
  "dimage-1.0", "series": S, "frame": i, "hash": ...}``, ``{"htype":
  "dimage_d-1.0", "shape": [x, y], "type": "uint16", "encoding":
  "bs16-lz4<", "size": n}``, the ``n`` data bytes, and ``{"htype":
  "dconfig-1.0", "start_time": ..., "stop_time": ..., "real_time": ...}``;
* series end: ``{"htype": "dseries_end-1.0", "series": S}``.

Encodings: ``bs<bits>-lz4<`` is bitshuffle-LZ4 with the same 12-byte header
as the HDF5 filter's chunks (8-byte big-endian size, 4-byte big-endian block
bytes), ``lz4<`` one plain LZ4 block of the whole image, ``<`` the pixels as
they are (little endian).

>>> info = parse_image_info(b'{"htype": "dimage_d-1.0", "shape": [64, 32], "type": "uint16", "encoding": "bs16-lz4<"}', "x")
>>> info.sig_shape, info.dtype, info.codec == CODEC_BSLZ4
((32, 64), dtype('uint16'), True)
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytile.common.errors import AcquisitionError, ConfigValidationError
from raytile.io.bslz4 import CODEC_BSLZ4, CODEC_LZ4, CODEC_RAW

__all__ = ["ImageInfo", "CODEC_PLAIN_LZ4", "COMPRESSIONS", "parse_json", "parse_image_info", "ImageInfoParser", "encode_image",
           "header_message", "image_message", "series_end_message"]

#: Our codec number for the stream's ``lz4<``: one LZ4 block without the HDF5 filter's header.
CODEC_PLAIN_LZ4 = 3
#: SIMPLON ``compression`` values and the codec each sends.
COMPRESSIONS = {"bslz4": CODEC_BSLZ4, "lz4": CODEC_PLAIN_LZ4, "none": CODEC_RAW}
_TYPES: dict[str, np.dtype] = {"uint8": np.dtype("<u1"), "uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
_ = CODEC_LZ4  # the HDF5 32004 layout: not sent on the stream


@dataclass(frozen=True)
class ImageInfo:
    """An image's layout from its ``dimage_d-1.0`` part: ``sig_shape`` (rows, columns), pixel
    ``dtype``, ``codec`` (:mod:`raytile.io.bslz4` codec or :data:`CODEC_PLAIN_LZ4`)."""

    sig_shape: tuple[int, int]
    dtype: np.dtype
    codec: int

    @property
    def nbytes(self) -> int:
        return self.sig_shape[0] * self.sig_shape[1] * self.dtype.itemsize


def parse_json(part: Any, what: str) -> dict:
    """A message part as a JSON object, or AcquisitionError naming ``what``."""
    try:
        value = json.loads(bytes(part))
    except (ValueError, UnicodeDecodeError) as e:
        raise AcquisitionError(f"{what}: a message part is not JSON ({e})") from None
    if not isinstance(value, dict):
        raise AcquisitionError(f"{what}: a message part is JSON but not an object: {str(value)[:80]}")
    return value


def parse_image_info(part: Any, what: str) -> ImageInfo:
    d = parse_json(part, what)
    try:
        x, y = (int(v) for v in d["shape"])
        dtype = _TYPES[d["type"]]
        encoding = str(d["encoding"])
    except (KeyError, TypeError, ValueError) as e:
        raise AcquisitionError(f"{what}: bad dimage_d-1.0 part {d} ({type(e).__name__}: {e})") from None
    if encoding.startswith("bs") and encoding.endswith("-lz4<"):
        codec = CODEC_BSLZ4
    elif encoding == "lz4<":
        codec = CODEC_PLAIN_LZ4
    elif encoding in ("<", "", "none"):
        codec = CODEC_RAW
    else:
        raise AcquisitionError(f"{what}: image encoding {encoding!r} is not supported "
                               f"(bs8/bs16/bs32-lz4<, lz4<, <)")
    return ImageInfo((y, x), dtype, codec)


#: A ``dimage_d`` part's ``"size": n`` field (a JSON integer, then the next field or the object's end): the
#: only field that differs from image to image of a series, and one :class:`ImageInfo` does not hold.
_SIZE_FIELD = re.compile(rb'"size"\s*:\s*(?:0|[1-9][0-9]*)(?=\s*[,}])')


class ImageInfoParser:
    """:func:`parse_image_info` for every image of a stream, remembering the layouts it parsed.

    Each image's ``dimage_d-1.0`` part is the same JSON but for its ``size``, so the part with that
    field cut out keys a small cache: a repeated layout costs a regular-expression substitution
    and a lookup (about 1 us) instead of a JSON parse and an :class:`ImageInfo` (about 6 us, on
    the receiver's thread, which holds the GIL meanwhile: ``benchmarks/bench_live.py``). A part
    that does not parse is never cached, so it fails each time; the cache is emptied when it
    holds ``max_layouts`` keys (a sender with another varying field gets no faster, but no
    bigger either).

    >>> parse = ImageInfoParser("x")
    >>> a = parse(b'{"htype": "dimage_d-1.0", "shape": [64, 32], "type": "uint16", "encoding": "<", "size": 4096}')
    >>> parse(b'{"htype": "dimage_d-1.0", "shape": [64, 32], "type": "uint16", "encoding": "<", "size": 17}') is a
    True
    """

    def __init__(self, what: str, max_layouts: int = 64):
        self.what, self.max_layouts = what, max_layouts
        self._layouts: dict[bytes, ImageInfo] = {}

    def __call__(self, part: Any) -> ImageInfo:
        raw = bytes(part)
        key = _SIZE_FIELD.sub(b"", raw, count=1)
        info = self._layouts.get(key)
        if info is None:
            info = parse_image_info(raw, self.what)
            if len(self._layouts) >= self.max_layouts:
                self._layouts.clear()
            self._layouts[key] = info
        return info


# -- writing (the simulator) -----------------------------------------------------------------------

def encode_image(frame: np.ndarray, compression: str) -> tuple[bytes, str]:
    """``(data, encoding)`` of one 2D unsigned frame as a DECTRIS detector sends it."""
    import bitshuffle  # the filter's reference implementation, C

    frame = np.ascontiguousarray(frame)
    bits = frame.dtype.itemsize * 8
    if compression == "bslz4":
        block_elems = 8192 // frame.dtype.itemsize  # bitshuffle's default block (bshuf_default_block_size)
        payload = bitshuffle.compress_lz4(frame.reshape(-1), block_elems).tobytes()
        return struct.pack(">QI", frame.nbytes, block_elems * frame.dtype.itemsize) + payload, f"bs{bits}-lz4<"
    if compression == "lz4":
        import lz4.block
        return lz4.block.compress(frame.tobytes(), store_size=False), "lz4<"
    if compression == "none":
        return frame.astype(frame.dtype.newbyteorder("<")).tobytes(), "<"
    raise ConfigValidationError(f"parameter 'compression' must be one of {sorted(COMPRESSIONS)}, got {compression!r}")


def _json(obj: dict) -> bytes:
    return json.dumps(obj).encode("utf-8")


def header_message(series: int, config: dict | None) -> list[bytes]:
    """The global header's parts (``header_detail`` basic with a config, none without)."""
    parts = [_json({"htype": "dheader-1.0", "series": series, "header_detail": "none" if config is None else "basic"})]
    if config is not None:
        parts.append(_json(config))
    return parts


def image_message(series: int, frame: int, data: bytes, encoding: str, shape: tuple[int, int], dtype: np.dtype,
                  t_ns: int = 0) -> list[bytes]:
    """One image's four parts; ``shape`` is (rows, columns)."""
    return [_json({"htype": "dimage-1.0", "series": series, "frame": frame, "hash": ""}),
            _json({"htype": "dimage_d-1.0", "shape": [shape[1], shape[0]], "type": np.dtype(dtype).name,
                   "encoding": encoding, "size": len(data)}),
            data,
            _json({"htype": "dconfig-1.0", "start_time": t_ns, "stop_time": t_ns, "real_time": 0})]


def series_end_message(series: int) -> list[bytes]:
    return [_json({"htype": "dseries_end-1.0", "series": series})]
