"""`MerlinControl`: commands to the Merlin control port (6341), LiberTEM-live's API.

>>> with MerlinControl(host="127.0.0.1", port=6341) as c:     # doctest: +SKIP
...     c.set("NUMFRAMESTOACQUIRE", 4096)
...     c.get("IMAGEX")
...     c.cmd("STARTACQUISITION")
"""

from __future__ import annotations

import select
import socket
from typing import Any

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.live.detectors.merlin.mpx import PREFIX_BYTES, mpx_message, parse_prefix, recv_exact

__all__ = ["MerlinControl", "MerlinCommandError", "RESPONSE_CODES"]

#: The Merlin software's status codes in a reply's last field.
RESPONSE_CODES = {0: "Command OK", 1: "System Busy", 2: "Unrecognised Command", 3: "Param out of range"}


class MerlinCommandError(DataSetException):
    """The Merlin software refused a command (busy, unknown command, value out of range)."""


class MerlinControl:
    """A connection to the Merlin control port: ``set``, ``get``, ``cmd`` and ``send_command_file``.

    Each call sends one ``MPX`` message and reads the reply; a refusal raises
    :class:`MerlinCommandError` naming the command and the code's meaning.
    No reply within ``timeout`` seconds raises ``DataSetException``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 6341, timeout: float = 1.0):
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigValidationError(f"MerlinControl: parameter 'port' must be a TCP port, got {port!r}")
        self._host, self._port, self._timeout = host, port, float(timeout)
        self._socket: socket.socket | None = None

    def connect(self) -> None:
        try:
            self._socket = socket.create_connection((self._host, self._port), timeout=self._timeout)
        except OSError as e:
            raise DataSetException(f"Merlin control port {self._host}:{self._port}: cannot connect ({e})") from e

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> "MerlinControl":
        self.connect()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _exchange(self, command: str) -> list[bytes]:
        if self._socket is None:
            raise DataSetException("MerlinControl: not connected (use it as a context manager or call connect())")
        where = f"Merlin control port {self._host}:{self._port}"
        try:
            self._socket.sendall(mpx_message(command.encode("ascii")))
            prefix = bytearray(PREFIX_BYTES)
            if recv_exact(self._socket, memoryview(prefix)) < PREFIX_BYTES:
                raise DataSetException(f"{where}: connection closed before the reply to {command!r}")
            body = bytearray(parse_prefix(bytes(prefix), where))
            if recv_exact(self._socket, memoryview(body)) < len(body):
                raise DataSetException(f"{where}: connection closed in the reply to {command!r}")
            body += self._rest_of_reply()
        except TimeoutError:
            raise DataSetException(f"{where}: no reply to {command!r} within {self._timeout} s") from None
        parts = bytes(body).split(b",")
        try:
            code = int(parts[-1])
        except ValueError:
            raise DataSetException(f"{where}: malformed reply {bytes(body)!r} to {command!r}") from None
        if code:
            raise MerlinCommandError(f"{where}: {command!r} refused: {RESPONSE_CODES.get(code, f'code {code}')}")
        return parts

    def _rest_of_reply(self) -> bytes:
        """A byte past the announced length, if one is already there: some senders (LiberTEM-live's
        simulator) count the reply's length without the comma after the length field."""
        assert self._socket is not None
        readable, _, _ = select.select([self._socket], [], [], 0)
        return self._socket.recv(1) if readable else b""

    def set(self, param: str, value: Any) -> None:
        """``SET,param,value``."""
        self._exchange(f"SET,{param},{value}")

    def get(self, param: str) -> bytes:
        """``GET,param``: the value the detector replies with (bytes, as LiberTEM-live returns it)."""
        parts = self._exchange(f"GET,{param},0")
        return parts[2] if len(parts) > 3 else b""

    def cmd(self, cmd: str) -> None:
        """``CMD,cmd`` (``STARTACQUISITION``, ``STOPACQUISITION``, ``SOFTTRIGGER``, ...)."""
        self._exchange(f"CMD,{cmd},0")

    def send_command_file(self, filename: str) -> None:
        """Send every non-empty line of ``filename`` (complete commands, e.g. ``SET,COUNTERDEPTH,12``)."""
        with open(filename) as fh:
            for line in fh:
                line = line.strip()
                if line:
                    self._exchange(line)
