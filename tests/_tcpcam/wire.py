"""TcpCam's wire format: per acquisition a header ``<III`` (image count, frame height, frame width),
then the frames as little-endian uint16, one after another, on one TCP connection."""

from __future__ import annotations

import socket
import struct

import numpy as np

HEADER = struct.Struct("<III")
DTYPE = np.dtype("<u2")


def recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes from ``sock``, or None if it closed first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)
