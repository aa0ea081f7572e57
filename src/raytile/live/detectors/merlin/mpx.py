"""The Merlin MPX message framing and the acquisition header, shared by receiver, control and simulator.

Every message on the Merlin data port (6342) and control port (6341) is
``MPX,`` + a 10-digit decimal length + ``,`` + the payload, where the length
counts the payload and the comma before it. On the data port, an
acquisition starts with one ``HDR,...`` message (the ``.hdr`` file's text:
``Key:<TAB>value`` lines ending with ``End``), followed by one message per
frame: the MIB frame header and its pixels (see :mod:`raytile.io.decoders_mib`).

>>> mpx_prefix(10)
b'MPX,0000000011,'
>>> parse_prefix(b'MPX,0000000011,')
10
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field

from raytile.common.errors import DataSetException

__all__ = ["PREFIX_BYTES", "mpx_prefix", "mpx_message", "parse_prefix", "recv_exact", "AcquisitionHeader"]

#: Length of ``MPX,`` + 10 digits + ``,``.
PREFIX_BYTES = 15


def mpx_prefix(payload_bytes: int) -> bytes:
    """The 15-byte prefix of a message whose payload is ``payload_bytes`` long."""
    return b"MPX,%010d," % (payload_bytes + 1)


def mpx_message(payload: bytes) -> bytes:
    return mpx_prefix(len(payload)) + payload


def parse_prefix(prefix: bytes, where: str = "Merlin") -> int:
    """The payload length announced by a 15-byte prefix (DataSetException for anything else)."""
    if len(prefix) != PREFIX_BYTES or not prefix.startswith(b"MPX,") or prefix[14:15] != b",":
        raise DataSetException(f"{where}: expected an MPX message prefix, got {bytes(prefix)!r}")
    try:
        length = int(prefix[4:14])
    except ValueError:
        raise DataSetException(f"{where}: MPX prefix with a bad length {bytes(prefix)!r}") from None
    if length < 1:
        raise DataSetException(f"{where}: MPX message of length {length}")
    return length - 1


def recv_exact(sock: socket.socket, view: memoryview) -> int:
    """Fill ``view`` from ``sock``; returns the bytes received (fewer only if the peer closed).

    Socket timeouts propagate (``TimeoutError``) with what was received so far lost to the
    caller; the receiver's sockets use a short timeout and retry around whole reads.
    """
    got = 0
    n = len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return got
        got += k
    return got


@dataclass(frozen=True)
class AcquisitionHeader:
    """The ``HDR`` message that starts an acquisition: its ``Key: value`` fields.

    ``nimages`` is "Frames in Acquisition (Number)" (0: continuous, no end);
    ``nav_shape`` comes from ``ScanY``/``ScanX`` where the header has them,
    else from "Frames per Trigger" when it divides ``nimages`` into rows.
    """

    fields: dict[str, str] = field(default_factory=dict)
    raw: bytes = b""

    @classmethod
    def parse(cls, payload: bytes, where: str = "Merlin") -> "AcquisitionHeader":
        text = payload.decode("latin1")
        if not text.startswith("HDR"):
            raise DataSetException(f"{where}: expected an acquisition header (HDR), got {payload[:20]!r}")
        fields: dict[str, str] = {}
        for line in text.splitlines()[1:]:
            line = line.strip("\r\0")
            if not line or line.startswith("End"):
                continue
            key, sep, value = line.partition("\t")
            if not sep:
                raise DataSetException(f"{where}: acquisition header line without a tab: {line!r}")
            fields[key.rstrip(":").strip()] = value.strip()
        header = cls(fields, bytes(payload))
        header.nimages  # checks the one field every header has
        return header

    def _int(self, key: str) -> int | None:
        value = self.fields.get(key)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise DataSetException(f"Merlin acquisition header: {key!r} is {value!r}, not an integer") from None

    @property
    def nimages(self) -> int:
        n = self._int("Frames in Acquisition (Number)")
        if n is None:
            raise DataSetException("Merlin acquisition header has no 'Frames in Acquisition (Number)'")
        return n

    @property
    def frames_per_trigger(self) -> int | None:
        return self._int("Frames per Trigger (Number)")

    @property
    def counter_depth(self) -> int | None:
        return self._int("Counter Depth (number)")

    @property
    def nav_shape(self) -> tuple[int, ...] | None:
        """``(ScanY, ScanX)`` when the header has them, else ``(nimages / fpt, fpt)`` rows of triggers."""
        x, y = self._int("ScanX"), self._int("ScanY")
        if x and y and x * y == self.nimages:
            return (y, x)
        fpt = self.frames_per_trigger
        n = self.nimages
        if fpt and 1 < fpt < n and n % fpt == 0:
            return (n // fpt, fpt)
        return None

    @classmethod
    def make(cls, nimages: int, frames_per_trigger: int = 1, counter_depth: int = 12,
             scan_xy: tuple[int, int] | None = None) -> "AcquisitionHeader":
        """A header as the Merlin software sends it (what the simulator sends)."""
        lines = ["HDR,", f"Frames in Acquisition (Number):\t{nimages}",
                 f"Frames per Trigger (Number):\t{frames_per_trigger}",
                 f"Counter Depth (number):\t{counter_depth}"]
        if scan_xy is not None:
            lines += [f"ScanX:\t{scan_xy[0]}", f"ScanY:\t{scan_xy[1]}"]
        lines.append("End\t")
        return cls.parse("\n".join(lines).encode("latin1"))


def square_nav_shape(nimages: int) -> tuple[int, int] | None:
    """``(s, s)`` when ``nimages`` is a square number, else None."""
    s = math.isqrt(nimages)
    return (s, s) if s * s == nimages and nimages > 0 else None
