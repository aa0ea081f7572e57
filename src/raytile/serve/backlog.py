"""`SocketBacklog`: how many bytes a streaming client has not yet taken off its TCP connection.

Why. A stream sends the latest state whenever it changed, at most ``max_rate_hz``
a second; a client that reads slower than that must skip states, not queue
them. In a plain ASGI server the body's ``send`` waits while the socket is
full, and skipping happens by itself. Behind Ray Serve it does not: the
replica hands each message to Serve's proxy at once, and the proxy holds
what the socket does not take. A reader at 8 KiB/s then had ~88 KB
messages queue up ahead of its run's final message, which it never received
(issue 37). Serve tells the replica nothing about the socket, so the replica
looks at it: the kernel's table of TCP connections (``/proc/net/tcp``,
``/proc/net/tcp6``) gives, for the proxy's end of the client's connection,
the bytes sent and not yet acknowledged by the client (``tx_queue``). The
stream writes the next message only when that is small ("the socket is
free"), so at most about one message waits ahead of the final one.

It finds the connection only where the proxy that holds it runs on the
replica's machine (``raytile serve`` on one node, the usual case; on a
cluster the head's proxy serves it when the replica runs there). Elsewhere,
and on systems without ``/proc/net``, :meth:`SocketBacklog.bytes` is None
and the stream paces by ``max_rate_hz`` alone.

>>> backlog = SocketBacklog(server=("127.0.0.1", 8000), client=("127.0.0.1", 51234))
>>> backlog.bytes()         # None: no such connection on this machine
"""

from __future__ import annotations

import ipaddress

__all__ = ["SocketBacklog", "FREE_BYTES"]

#: A connection with fewer bytes than this sent and not acknowledged is free for the next message.
FREE_BYTES = 64 * 1024
_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_ESTABLISHED = "01"


def _endpoint(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address of /proc/net/tcp ("0100007F:1F90"): the IP (32-bit words in host order) and the port."""
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # each word is little-endian
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, int(port, 16)
    return ip, int(port, 16)


class SocketBacklog:
    """The send backlog of the server's end of one client's TCP connection on this machine.

    ``server``/``client``: the connection's (host, port) pairs as the ASGI scope gives them
    (``scope["server"]``, ``scope["client"]``).
    """

    def __init__(self, server: tuple[str, int] | None, client: tuple[str, int] | None):
        self._key = None
        self._found = True  # until a look finds no table or no such connection
        try:
            if server is not None and client is not None:
                self._key = (int(server[1]), ipaddress.ip_address(client[0]), int(client[1]))
        except (ValueError, TypeError, IndexError):
            self._key = None

    def bytes(self) -> int | None:
        """Bytes sent on the connection and not yet acknowledged by the client; None if the
        connection is not on this machine (or not known)."""
        if self._key is None or not self._found:
            return None
        port, client_ip, client_port = self._key
        for table in _TABLES:
            try:
                with open(table) as f:
                    next(f, None)  # the header
                    for line in f:
                        fields = line.split()
                        if len(fields) < 5 or fields[3] != _ESTABLISHED:
                            continue
                        local_ip, local_port = _endpoint(fields[1])
                        if local_port != port:
                            continue
                        remote_ip, remote_port = _endpoint(fields[2])
                        if remote_port == client_port and remote_ip == client_ip:
                            return int(fields[4].split(":")[0], 16)
            except (OSError, ValueError):
                continue
        self._found = False  # gone (closed) or never here: stop looking
        return None

    def free(self) -> bool:
        """True if the next message may be written: the backlog is small, or unknown."""
        backlog = self.bytes()
        return backlog is None or backlog < FREE_BYTES
