"""DECTRIS ZeroMQ stream V2 (SIMPLON stream ``format`` ``cbor``): one CBOR map per ZeroMQ message.

From DECTRIS' documentation (``stream_v2/README.md``, ``cbor/dectris-compression-tag.md``):

* ``{"type": "start", "series_id": S, "number_of_images": n, "image_size_x": w, "image_size_y": h,
  "channels": [...], ...}`` when the detector is armed;
* ``{"type": "image", "series_id": S, "image_id": i, "data": {channel: MultiDimArray}, ...}``, where a
  MultiDimArray is tag 40 ``[[rows, columns], typed array]`` (RFC 8746, row-major) and the typed array
  (tag 64 uint8, 69 uint16 LE, 70 uint32 LE) holds a byte string or, compressed, tag 56500
  ``[algorithm, element size, bytes]`` with ``bslz4`` or ``lz4`` in the HDF5 filters' framing;
* ``{"type": "end", "series_id": S}``.

Decoding here stops at the compressed bytes: the receiver stores them in its slab and the consumer
decodes a whole stack at once, as for stream V1.

>>> msg = image_message(3, 0, np.arange(6, dtype=np.uint16).reshape(2, 3), "none")
>>> kind, series, image_id, (info, data) = parse_message(msg, "x")
>>> kind, series, image_id, info.sig_shape, info.dtype.name, len(data)
('image', 3, 0, (2, 3), 'uint16', 12)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from raytile.common.errors import AcquisitionError
from raytile.io.bslz4 import CODEC_BSLZ4, CODEC_LZ4, CODEC_RAW
from raytile.live.detectors.dectris.stream_v1 import ImageInfo

__all__ = ["parse_message", "start_message", "image_message", "end_message", "TAG_COMPRESSED"]

#: DECTRIS' tag for a compressed byte string.
TAG_COMPRESSED = 56500
_TYPED: dict[int, np.dtype] = {64: np.dtype("u1"), 69: np.dtype("<u2"), 70: np.dtype("<u4")}
_TAG_OF = {np.dtype("u1"): 64, np.dtype("<u2"): 69, np.dtype("<u4"): 70}
_CODECS = {"bslz4": CODEC_BSLZ4, "lz4": CODEC_LZ4}


class _Raw:
    """A tag left undecoded by the hook (the receiver needs its bytes, not a decompressed array)."""

    def __init__(self, tag: int, value: Any):
        self.tag, self.value = tag, value


def _hook(*args: Any) -> Any:
    """cbor2's tag hook: ``(decoder, tag)`` before cbor2 6, ``(tag, immutable)`` since."""
    import cbor2

    tag = next(a for a in args if isinstance(a, cbor2.CBORTag))
    return _Raw(tag.tag, tag.value)


def parse_message(message: Any, what: str, channel: str | None = None) -> tuple[str, int, int, Any]:
    """``(type, series_id, image_id, payload)``: for ``start`` the payload is the message as a V1-style
    detector config (``nimages``, ``x_pixels_in_detector``, ..., and ``channels``), for ``image``
    ``(ImageInfo, bytes)`` of ``channel`` (a threshold's name, e.g. ``"threshold_2"``; None: the
    first), for ``end`` None; image_id is -1 where there is none."""
    import cbor2

    try:
        msg = cbor2.loads(bytes(message), tag_hook=_hook)
    except Exception as e:
        raise AcquisitionError(f"{what}: a message is not CBOR ({type(e).__name__}: {e})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("series_id"), int):
        raise AcquisitionError(f"{what}: a CBOR message without a series_id: {str(msg)[:120]}")
    kind, series = str(msg.get("type")), msg["series_id"]
    if kind == "start":
        config = {"nimages": int(msg.get("number_of_images", 0)), "ntrigger": 1, "trigger_mode": "exts"}
        for src, dst in (("image_size_x", "x_pixels_in_detector"), ("image_size_y", "y_pixels_in_detector")):
            if src in msg:
                config[dst] = int(msg[src])
        if isinstance(msg.get("channels"), list):
            config["channels"] = [str(c) for c in msg["channels"]]
        return kind, series, -1, config
    if kind == "image":
        data = msg.get("data")
        if not isinstance(data, dict) or not data:
            raise AcquisitionError(f"{what}: image {msg.get('image_id')} of series {series} has no channel data")
        if channel is None:
            array = next(iter(data.values()))
        elif channel in data:
            array = data[channel]
        else:
            raise AcquisitionError(f"{what}: image {msg.get('image_id')} of series {series} has no channel "
                                   f"{channel!r}; it has {sorted(map(str, data))}")
        return kind, series, int(msg.get("image_id", -1)), _channel(array, what)
    return kind, series, -1, None


def _channel(array: Any, what: str) -> tuple[ImageInfo, bytes]:
    if not (isinstance(array, _Raw) and array.tag == 40 and isinstance(array.value, (list, tuple)) and len(array.value) == 2):
        raise AcquisitionError(f"{what}: channel data is not a multi-dimensional array (tag 40)")
    dims, typed = array.value
    if not (isinstance(typed, _Raw) and typed.tag in _TYPED) or len(dims) != 2:
        raise AcquisitionError(f"{what}: channel data of dimensions {dims} is not a 2D uint8/uint16le/uint32le "
                               f"typed array")
    dtype, content = _TYPED[typed.tag], typed.value
    if isinstance(content, bytes):
        return ImageInfo((int(dims[0]), int(dims[1])), dtype, CODEC_RAW), content
    if isinstance(content, _Raw) and content.tag == TAG_COMPRESSED and len(content.value) == 3:
        algorithm, _elem, payload = content.value
        if algorithm not in _CODECS:
            raise AcquisitionError(f"{what}: compression {algorithm!r} is not supported (bslz4, lz4)")
        return ImageInfo((int(dims[0]), int(dims[1])), dtype, _CODECS[algorithm]), bytes(payload)
    raise AcquisitionError(f"{what}: a typed array holds neither bytes nor a compressed byte string (tag 56500)")


# -- writing (the simulator) -----------------------------------------------------------------------

def start_message(series: int, config: dict, channels: int = 1) -> bytes:
    import cbor2

    return cbor2.dumps({"type": "start", "series_id": series, "series_unique_id": f"raytile-sim-{series}",
                        "number_of_images": int(config.get("number_of_images", config.get("nimages", 0))),
                        "image_size_x": int(config["x_pixels_in_detector"]),
                        "image_size_y": int(config["y_pixels_in_detector"]),
                        "channels": [f"threshold_{k + 1}" for k in range(channels)]})


def image_message(series: int, image_id: int, frame: np.ndarray, compression: str, encoded: bytes | None = None,
                  more_channels: Sequence[tuple[np.ndarray, bytes | None]] = ()) -> bytes:
    """One image message; ``encoded``: the frame already compressed in the HDF5 framing (as
    :func:`~raytile.live.detectors.dectris.stream_v1.encode_image` gives for bslz4). ``frame`` is
    channel ``threshold_1``; ``more_channels`` ``(frame, encoded)`` are ``threshold_2``, ..."""
    import cbor2

    data = {f"threshold_{k + 1}": _array(f, compression, e)
            for k, (f, e) in enumerate([(frame, encoded), *more_channels])}
    return cbor2.dumps({"type": "image", "series_id": series, "series_unique_id": f"raytile-sim-{series}",
                        "image_id": image_id, "data": data})


def _array(frame: np.ndarray, compression: str, encoded: bytes | None) -> Any:
    """One channel's MultiDimArray (tag 40) of ``frame``."""
    import cbor2

    frame = np.ascontiguousarray(frame)
    dtype = frame.dtype.newbyteorder("<") if frame.dtype.itemsize > 1 else frame.dtype
    if compression == "none":
        content: Any = frame.astype(dtype).tobytes()
    elif compression in ("bslz4", "lz4"):
        if encoded is None:
            raise AcquisitionError("stream v2 image_message: compressed images need their encoded bytes")
        content = cbor2.CBORTag(TAG_COMPRESSED, [compression, frame.dtype.itemsize if compression == "bslz4" else 0,
                                                 encoded])
    else:
        raise AcquisitionError(f"stream v2: compression {compression!r} is not one of bslz4, lz4, none")
    return cbor2.CBORTag(40, [list(frame.shape), cbor2.CBORTag(_TAG_OF[np.dtype(dtype)], content)])


def end_message(series: int) -> bytes:
    import cbor2

    return cbor2.dumps({"type": "end", "series_id": series, "series_unique_id": f"raytile-sim-{series}"})
