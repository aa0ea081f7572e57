"""Stream messages: a run's latest results as JSON, written as NDJSON lines or server-sent events.

A message is ``{"seq", "run_id", "status", "final", "partitions_done",
"partitions_total", "damage_fraction", "param_versions", "coalesced",
"buffers", "error"}``; ``buffers`` is one dict per UDF of
``name -> {"kind", "dtype", "shape", "npy"}`` with ``npy`` the base64 of the
buffer saved as ``.npy`` (``buffers="url"``: ``"url"`` to fetch it instead;
``"none"``: dtype and shape only). Decode one with :func:`decode_npy`.

>>> line = ndjson({"seq": 1, "final": False})
>>> line
b'{"seq": 1, "final": false}\\n'
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np

from raytile.runtime.results import UDFResults

__all__ = ["npy_bytes", "decode_npy", "encode_buffers", "ndjson", "sse", "BUFFER_MODES"]

#: How buffers travel in a message: inline base64 .npy, a URL each, or only their dtype and shape.
BUFFER_MODES = ("inline", "url", "none")


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as the bytes of a ``.npy`` file."""
    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(array), allow_pickle=False)
    return out.getvalue()


def decode_npy(b64: str) -> np.ndarray:
    """The array of a message's base64 ``.npy`` buffer."""
    return np.load(io.BytesIO(base64.b64decode(b64)), allow_pickle=False)


def encode_buffers(results: UDFResults, udf_names: list[str], mode: str, url_base: str) -> list[dict[str, Any]]:
    """One dict per UDF of ``buffer name -> {"kind", "dtype", "shape", and "npy" or "url"}``."""
    out = []
    for i, bufs in enumerate(results.buffers):
        enc: dict[str, Any] = {}
        for name, buf in bufs.items():
            item: dict[str, Any] = {"kind": buf.kind, "dtype": buf.data.dtype.str, "shape": list(buf.data.shape)}
            if mode == "inline":
                item["npy"] = base64.b64encode(npy_bytes(buf.data)).decode("ascii")
            elif mode == "url":
                item["url"] = f"{url_base}/results/{i}/{name}.npy"
            enc[name] = item
        out.append({"udf": udf_names[i], "buffers": enc})
    return out


def ndjson(message: dict[str, Any]) -> bytes:
    """One NDJSON line."""
    return (json.dumps(message) + "\n").encode()


def sse(message: dict[str, Any]) -> bytes:
    """One server-sent event: ``event: partial`` or, for the last message, ``event: final``."""
    event = "final" if message.get("final") else "partial"
    return f"id: {message.get('seq', 0)}\nevent: {event}\ndata: {json.dumps(message)}\n\n".encode()
