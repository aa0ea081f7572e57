"""Node-local sockets between a pipeline's group actors: message framing and the actor's step loop.

The ``ray`` placement's channel (:class:`~raytile.pipeline.ray_channels.SocketChannel`)
connects the driver and the group actors of one node by Unix-domain stream
sockets: the driver sends each group ``(t, relayed values)``, a group sends
what it wrote to the groups that read it in the same step and, when it is an
output group, to the driver. Each actor runs :class:`StepLoop` in a thread:
receive the step's messages, step its :class:`~raytile.pipeline.group_host.GroupHost`,
send. A message is an 8-byte length and a pickle. Why sockets: a blocked
``recv`` sleeps in the kernel and wakes on data, where Ray's compiled-graph
channels spin with ``sched_yield`` (their rate fell to a quarter under load on
2 cores) and leave semaphore files in /dev/shm; plain actor calls cost a
round trip through Ray's task machinery per group and step (3.6 ms against
1.5 ms for the AO example). The socket files live in a private temporary
folder that the driver removes once every connection is made.

A stage that raises does not end the loop: the exception travels instead of
the values, downstream groups pass it on without stepping, and the driver
raises it. End of input (the driver closed its socket) ends the loop; a
closed link is a ConnectionError (the placement finds out which actor died).

>>> loop = StepLoop(host.step, inputs, outputs); loop.start()   # doctest: +SKIP
"""

from __future__ import annotations

import pickle
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable

from raytile.common.errors import ExecutorError

__all__ = ["StepError", "pack", "send_packed", "send_msg", "recv_msg", "connect", "listen", "accept_named", "StepLoop"]

_HEADER = 8


@dataclass(frozen=True)
class StepError:
    """Sent in place of a step's values: the exception a group's step raised (passed on downstream)."""

    error: BaseException


def pack(obj: Any) -> bytes:
    """One message: its length (8 bytes, little-endian) and its pickle. What cannot be pickled (a stream
    value, an exception) becomes a :class:`StepError` saying so: the driver raises it, nothing hangs."""
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        what = (f"{type(obj.error).__name__}: {obj.error}" if isinstance(obj, StepError)
                else f"a step's values ({type(obj).__name__})")
        data = pickle.dumps(StepError(ExecutorError(f"{what} could not be sent to another group: "
                                                    f"{type(e).__name__}: {e}")))
    return len(data).to_bytes(_HEADER, "little") + data


def send_packed(sock: socket.socket, message: bytes) -> None:
    """Send a :func:`pack`-ed message; ConnectionError when the other end is gone."""
    try:
        sock.sendall(message)
    except (BrokenPipeError, ConnectionResetError) as e:
        raise ConnectionError(f"pipeline link closed while sending: {e}") from None


def send_msg(sock: socket.socket, obj: Any) -> None:
    """Send one message (see :func:`pack`)."""
    send_packed(sock, pack(obj))


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = sock.recv_into(view[got:])
        except ConnectionResetError as e:
            raise ConnectionError(f"pipeline link reset: {e}") from None
        if k == 0:
            raise ConnectionError("pipeline link closed by the other end")
        got += k
    return buf


def recv_msg(sock: socket.socket) -> Any:
    """Receive one message (TimeoutError after the socket's timeout, ConnectionError at its end)."""
    n = int.from_bytes(_recv_exact(sock, _HEADER), "little")
    return pickle.loads(_recv_exact(sock, n))


def listen(path: str) -> socket.socket:
    """A Unix-domain socket listening at ``path``."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    return srv


def connect(path: str, name: str, timeout: float) -> socket.socket:
    """Connect to the listener at ``path`` and say who we are (the listener's :func:`accept_named`)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(path)
    send_msg(sock, name)
    sock.settimeout(None)
    return sock


def accept_named(srv: socket.socket, names: set[str], timeout: float) -> dict[str, socket.socket]:
    """Accept one connection from each of ``names`` (each says its name first); ExecutorError on timeout."""
    got: dict[str, socket.socket] = {}
    srv.settimeout(timeout)
    try:
        while len(got) < len(names):
            conn, _ = srv.accept()
            conn.settimeout(timeout)
            who = recv_msg(conn)
            conn.settimeout(None)
            if who not in names or who in got:
                conn.close()
                raise ExecutorError(f"pipeline link: unexpected peer {who!r} (expected {sorted(names)})")
            got[who] = conn
    except socket.timeout:
        for c in got.values():
            c.close()
        raise ExecutorError(f"pipeline link: {sorted(names - set(got))} did not connect within {timeout} s") from None
    return got


class StepLoop:
    """An actor's step loop over its links: driver input and upstream values in, its values out."""

    def __init__(self, step: Callable[..., Any], driver: socket.socket, upstream: list[socket.socket],
                 downstream: list[socket.socket]):
        self.step = step
        self.driver = driver
        self.upstream = upstream
        self.downstream = downstream
        self._thread = threading.Thread(target=self._run, name="raytile-pipeline-steps", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                t, relayed = recv_msg(self.driver)
                received = [recv_msg(s) for s in self.upstream]
                failed = next((r for r in received if isinstance(r, StepError)), None)
                if failed is not None:
                    out: Any = failed
                else:
                    try:
                        out = self.step(t, relayed, *received)
                    except Exception as e:  # the stage's error goes to the driver, the loop goes on
                        out = StepError(e)
                message = pack(out)  # once for every group (and the driver) that reads it
                for s in self.downstream:
                    send_packed(s, message)
        except OSError:  # ConnectionError at the end of input, or any socket error
            pass  # the channel was closed (or a peer died): the loop ends, the actor stays
        finally:
            self._close_all()

    def _close_all(self) -> None:
        for s in (self.driver, *self.upstream, *self.downstream):
            try:
                s.close()
            except OSError:
                pass

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop (wakes a blocked receive) and wait for its thread."""
        for s in (self.driver, *self.upstream, *self.downstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout)
