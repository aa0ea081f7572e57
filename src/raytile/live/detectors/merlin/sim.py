"""`MerlinSimulator`: a Merlin detector on loopback, speaking the real MPX protocol.

It replays frames (any ``(n, h, w)`` unsigned array, e.g. a data set's
frames or synthetic ones) as MIB frames in ``mode`` (``U08``/``U16``/``U32``
or raw ``R1``/``R6``/``R12``), on a data port (acquisition header, then one
message per frame, paced at ``frame_rate``) and a control port (``SET``/
``GET``/``CMD`` as the Merlin software answers them).

``num_frames`` (default: as many as given) is the frames of each
acquisition; more than given repeat the given ones in a cycle, so a large
scan is served from one stack of frames (the memory of the frames given,
encoded once, whatever the scan's size).

In passive mode (``triggered=False``) each acquisition starts by itself,
``acquisitions`` times; in triggered mode each one waits for
``CMD,STARTACQUISITION`` (or ``SOFTTRIGGER``) on the control port. Faults
for tests: ``abort_after`` frames a new acquisition header comes instead of
the next frame (the Merlin software's abort); ``die_after`` frames the
connection is closed.

>>> with MerlinSimulator(frames, mode="R12", nav_shape=(16, 16)) as sim:    # doctest: +SKIP
...     conn = LiveContext().make_connection("merlin").open(data_port=sim.data_port,
...                                                         api_port=sim.api_port)
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.frame_blocks import SequentialFrames
from raytile.io.testing.mib import MODES, encode_frame_data, mib_header
from raytile.live.detectors.merlin.mpx import PREFIX_BYTES, AcquisitionHeader, mpx_message, mpx_prefix, parse_prefix

__all__ = ["MerlinSimulator"]


class MerlinSimulator:
    """See the module docstring. Ports 0 pick free ones (``data_port``/``api_port`` say which)."""

    def __init__(self, frames: np.ndarray | SequentialFrames, mode: str = "U16", nav_shape: tuple[int, ...] | None = None,
                 host: str = "127.0.0.1", data_port: int = 0, api_port: int = 0, frame_rate: float | None = None,
                 acquisitions: int = 1, triggered: bool = False, continuous: bool = False,
                 abort_after: int | None = None, die_after: int | None = None, start_delay: float = 0.0,
                 num_frames: int | None = None):
        if mode not in MODES or mode == "R24":
            raise ConfigValidationError(f"MerlinSimulator: parameter 'mode' must be one of "
                                        f"{[m for m in MODES if m != 'R24']}, got {mode!r}")
        source: SequentialFrames | None
        stack: np.ndarray | None
        if isinstance(frames, SequentialFrames):  # a file, replayed in bounded memory
            source, stack = frames, None
            shape: tuple[int, ...] = (frames.num_frames, *frames.sig_shape)
        else:
            source, stack = None, np.asarray(frames)
            shape = stack.shape
        if len(shape) < 3:
            raise ConfigValidationError(f"MerlinSimulator: parameter 'frames' must be (n, h, w), got shape {shape}")
        h, w = int(shape[-2]), int(shape[-1])
        self.sig_shape: tuple[int, int] = (h, w)
        self._source, self._replayed = source, int(np.prod(shape[:-2]))
        if num_frames is not None and (not isinstance(num_frames, int) or num_frames < 1):
            raise ConfigValidationError(f"MerlinSimulator: parameter 'num_frames' must be a positive int, "
                                        f"got {num_frames!r}")
        self.num_frames = self._replayed if num_frames is None else num_frames
        self.nav_shape = tuple(nav_shape) if nav_shape is not None else (self.num_frames,)
        if int(np.prod(self.nav_shape)) != self.num_frames:
            raise ConfigValidationError(f"MerlinSimulator: parameter 'nav_shape' {self.nav_shape} does not hold "
                                        f"{self.num_frames} frames")
        self.mode = mode
        self.counter_depth = int(mode[1:]) if mode.startswith("R") else {8: 6, 16: 12, 32: 24}[int(mode[1:])]
        # frames given as an array are few (a synthetic stack, a test's scan): encoded once, up front
        self._messages = None if stack is None else self._encode(stack.reshape((-1, h, w)), mode, 0)
        self._frame_rate, self._acquisitions, self._triggered = frame_rate, acquisitions, triggered
        self._continuous, self._abort_after, self._die_after = continuous, abort_after, die_after
        self._start_delay = start_delay
        self._host = host
        self._data = _listen(host, data_port)
        self._api = _listen(host, api_port)
        self.data_port, self.api_port = self._data.getsockname()[1], self._api.getsockname()[1]
        self._trigger = threading.Semaphore(0)
        self._stop = threading.Event()
        self._params: dict[str, str] = {"IMAGEX": str(self.sig_shape[1]), "IMAGEY": str(self.sig_shape[0]),
                                        "COUNTERDEPTH": str(self.counter_depth),
                                        "NUMFRAMESTOACQUIRE": str(self.num_frames)}
        self._threads = [threading.Thread(target=self._serve_data, name="merlin-sim-data", daemon=True),
                         threading.Thread(target=self._serve_control, name="merlin-sim-control", daemon=True)]
        self.frames_sent = 0
        self.acquisitions_sent = 0

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> "MerlinSimulator":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._trigger.release()
        for t in self._threads:
            t.join(timeout=5.0)
        for s in (self._data, self._api):
            s.close()

    def __enter__(self) -> "MerlinSimulator":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- encoding ----------------------------------------------------------------------
    def _encode(self, stack: np.ndarray, mode: str, first: int) -> list[bytes]:
        """One message per frame (frame ``first`` first), encoded 16 frames at a time (the encoder's
        int64 copy stays small)."""
        pixel_depth = "R64" if mode.startswith("R") else mode
        messages = []
        for start in range(0, len(stack), 16):
            data, x, y = encode_frame_data(stack[start:start + 16], mode)
            messages += [mpx_message(mib_header(first + start + i + 1, 384, 1, x, y, pixel_depth, "1x1",
                                                self.counter_depth) + d) for i, d in enumerate(data)]
        return messages

    def _header(self) -> bytes:
        nimages = 0 if self._continuous else self.num_frames
        fpt = self.nav_shape[-1] if len(self.nav_shape) > 1 else 1
        scan = (self.nav_shape[-1], self.nav_shape[-2]) if len(self.nav_shape) == 2 else None
        return mpx_message(AcquisitionHeader.make(nimages, fpt, self.counter_depth, scan).raw)

    # -- data port ---------------------------------------------------------------------
    def _serve_data(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._data.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with conn:
                try:
                    self._send_acquisitions(conn)
                except OSError:
                    pass  # the receiver went away

    def _send_acquisitions(self, conn: socket.socket) -> None:
        for _ in range(self._acquisitions):
            if self._triggered:
                if not self._wait_for_trigger(conn):
                    return
            elif self._start_delay:
                time.sleep(self._start_delay)
            if self._stop.is_set():
                return
            conn.sendall(self._header())
            self.acquisitions_sent += 1
            if not self._send_frames(conn):
                return
        # keep the connection open until the receiver closes it or the simulator stops
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                if not conn.recv(1):
                    return
            except TimeoutError:
                continue

    def _wait_for_trigger(self, conn: socket.socket) -> bool:
        """Wait for ``STARTACQUISITION``; False when the simulator stops or the receiver has gone (a
        receiver that closed its connection and connects again gets the next acquisition on its new
        connection: a trigger that comes meanwhile is left for it, as the Merlin software does)."""
        while not self._trigger.acquire(timeout=0.1):
            if self._stop.is_set() or _peer_closed(conn):
                return False
        if _peer_closed(conn):
            self._trigger.release()
            return False
        return True

    def _send_frames(self, conn: socket.socket) -> bool:
        """One acquisition's frames (repeated while continuous); False when the connection is to end."""
        t0, sent = time.monotonic(), 0
        chunk = max(1, int(self._frame_rate // 200)) if self._frame_rate else 64
        while not self._stop.is_set():
            start = 0
            while start < self.num_frames:
                if self._abort_after is not None and sent >= self._abort_after:
                    self._abort_after = None  # once
                    return True  # the next acquisition header comes where a frame was expected
                if self._die_after is not None and sent >= self._die_after:
                    return False
                stop = min(start + chunk, self.num_frames)
                for limit in (self._abort_after, self._die_after):
                    if limit is not None:
                        stop = min(stop, start + limit - sent)
                _send_all(conn, self._cycle(start, stop))
                sent += stop - start
                self.frames_sent += stop - start
                start = stop
                if self._frame_rate:
                    delay = t0 + sent / self._frame_rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                if self._stop.is_set():
                    return False
            if not self._continuous:
                return True
        return False

    def _cycle(self, start: int, stop: int) -> list[bytes]:
        """The messages of frames ``start:stop`` of an acquisition: the replayed frames, in a cycle
        (a file's read and encoded as they are sent)."""
        n, out = self._replayed, []
        while start < stop:
            first = start % n
            last = min(n, first + stop - start)
            if self._messages is not None:
                out += self._messages[first:last]
            else:
                assert self._source is not None
                out += self._encode(self._source.read(first, last), self.mode, first)
            start += last - first
        return out

    # -- control port ------------------------------------------------------------------
    def _serve_control(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._api.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._control_session, args=(conn,), daemon=True).start()

    def _control_session(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.2)
            while not self._stop.is_set():
                try:
                    prefix = _recv_all(conn, PREFIX_BYTES)
                    if prefix is None:
                        return
                    body = _recv_all(conn, parse_prefix(prefix, "Merlin simulator control"))
                except TimeoutError:
                    continue
                except Exception:
                    return
                if body is None:
                    return
                conn.sendall(self._answer(body.decode("ascii").split(",")))

    def _answer(self, parts: list[str]) -> bytes:
        method, param = parts[0].upper(), parts[1].upper() if len(parts) > 1 else ""
        if method == "GET":
            value = self._params.get(param)
            reply = [method, param, value or "0", "0" if value is not None else "2"]
        elif method == "SET" and len(parts) > 2:
            self._params[param] = parts[2]
            reply = [method, param, "0"]
        elif method == "CMD" and param == "STARTACQUISITION":
            self._trigger.release()
            reply = [method, param, "0"]
        elif method == "CMD" and param in ("SOFTTRIGGER", "STOPACQUISITION", "ABORT"):
            reply = [method, param, "0"]
        else:
            reply = [method, param, "2"]
        text = ",".join(reply).encode("ascii")
        return mpx_prefix(len(text)) + text


#: Buffers per ``sendmsg`` (well under Linux's IOV_MAX of 1024).
_IOV_MAX = 512


def _send_all(conn: socket.socket, messages: list[bytes]) -> None:
    """Send ``messages`` in order with gathered writes: no joined copy of them (a joined chunk cost a
    copy of every frame, ~13 us of the sender's CPU per 256x256 U16 frame)."""
    views = [memoryview(m) for m in messages]
    first = 0
    while first < len(views):
        sent = conn.sendmsg(views[first:first + _IOV_MAX])
        while first < len(views) and sent >= len(views[first]):
            sent -= len(views[first])
            first += 1
        if sent:
            views[first] = views[first][sent:]


def _peer_closed(conn: socket.socket) -> bool:
    """Whether the other end closed ``conn`` (without reading what it has sent)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _listen(host: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(4)
    s.settimeout(0.1)  # accept() wakes up to see stop(): closing a listening socket does not wake it
    return s


def _recv_all(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)
