"""`AsiTpx3Simulator`: an ASI Timepix3 detector on loopback, sending the real event stream.

It replays frames (an ``(n, h, w)`` unsigned array, or a data set's
:class:`~raytile.io.frame_blocks.SequentialFrames`) as CSR chunks of
``chunk_frames`` frames (default: one scan line) to each client that connects
to its data port, ``acquisitions`` times: ``AcquisitionStart``, ``ScanStart``,
the chunks, ``ScanEnd``, ``AcquisitionEnd`` (:mod:`raytile.live.detectors.asi_tpx3.wire`),
paced at ``frame_rate``. ``num_frames`` frames an acquisition (default: as many
as given; more repeat the given ones in a cycle). A fault for tests:
``die_after`` frames, the connection is closed inside the scan.

>>> with AsiTpx3Simulator(frames, nav_shape=(16, 16)) as sim:    # doctest: +SKIP
...     conn = LiveContext().make_connection("asi_tpx3").open(data_port=sim.data_port)
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.frame_blocks import SequentialFrames
from raytile.live.detectors.asi_tpx3.wire import (
    AcquisitionEnd, AcquisitionStart, ScanEnd, ScanStart, dtype_code, encode_chunk, encode_csr_chunk, frames_csr,
)

__all__ = ["AsiTpx3Simulator"]


class AsiTpx3Simulator:
    """See the module docstring. Port 0 picks a free one (``data_port`` says which); it has no
    control port (``api_port`` is 0)."""

    def __init__(self, frames: np.ndarray | SequentialFrames, nav_shape: tuple[int, ...] | None = None,
                 host: str = "127.0.0.1", data_port: int = 0, frame_rate: float | None = None,
                 acquisitions: int = 1, chunk_frames: int | None = None, num_frames: int | None = None,
                 die_after: int | None = None):
        if isinstance(frames, SequentialFrames):
            self._source: SequentialFrames | None = frames
            self._stack: np.ndarray | None = None
            shape: tuple[int, ...] = (frames.num_frames, *frames.sig_shape)
            dtype = frames.dtype
        else:
            self._source, self._stack = None, np.asarray(frames)
            shape, dtype = self._stack.shape, self._stack.dtype
        if len(shape) != 3:
            raise ConfigValidationError(f"AsiTpx3Simulator: parameter 'frames' must be (n, h, w), got shape {shape}")
        try:
            dtype_code(dtype)
        except ValueError as e:
            raise ConfigValidationError(f"AsiTpx3Simulator: parameter 'frames': {e}") from None
        self._replayed = int(shape[0])
        self.num_frames = self._replayed if num_frames is None else int(num_frames)
        self.nav_shape = tuple(nav_shape) if nav_shape is not None else (1, self.num_frames)
        if len(self.nav_shape) != 2 or int(np.prod(self.nav_shape)) != self.num_frames:
            raise ConfigValidationError(f"AsiTpx3Simulator: parameter 'nav_shape' {self.nav_shape} must be 2D and "
                                        f"hold {self.num_frames} frames")
        self.sig_shape = (int(shape[1]), int(shape[2]))
        self._chunk = int(chunk_frames) if chunk_frames else int(self.nav_shape[1])
        if self._chunk < 1:
            raise ConfigValidationError(f"AsiTpx3Simulator: parameter 'chunk_frames' must be >= 1, got {chunk_frames}")
        self._frame_rate, self._acquisitions, self._die_after = frame_rate, acquisitions, die_after
        # frames given as an array are few (a synthetic stack, a test's scan): their CSR made once, up front
        self._csr = None if self._stack is None else frames_csr(self._stack, AcquisitionStart((1, 1), self.sig_shape))
        self._listener = socket.create_server((host, data_port))
        self._listener.settimeout(0.1)
        self.data_port: int = self._listener.getsockname()[1]
        self.api_port = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="asi-tpx3-sim", daemon=True)
        self.frames_sent = 0
        self._acquisitions_sent = 0

    @property
    def acquisitions_sent(self) -> int:
        return self._acquisitions_sent

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> "AsiTpx3Simulator":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._listener.close()

    def __enter__(self) -> "AsiTpx3Simulator":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- serving -----------------------------------------------------------------------
    def _chunk_bytes(self, first: int, stop: int, start: AcquisitionStart) -> bytes:
        """The chunk of frames ``first:stop`` of an acquisition (the given ones in a cycle)."""
        runs, at = [], first
        while at < stop:  # runs of given frames, split where the cycle wraps
            a = at % self._replayed
            b = min(self._replayed, a + stop - at)
            runs.append((a, b))
            at += b - a
        if self._csr is None:  # a file: read and encoded as sent
            assert self._source is not None
            return encode_chunk(np.concatenate([self._source.read(a, b) for a, b in runs]), start)
        indptr, indices, values = self._csr
        parts = [(indptr[a:b + 1], indices[indptr[a]:indptr[b]], values[indptr[a]:indptr[b]]) for a, b in runs]
        rows = np.concatenate([np.diff(p[0]) for p in parts])
        out_indptr = np.zeros(len(rows) + 1, indptr.dtype)
        np.cumsum(rows, out=out_indptr[1:])
        return encode_csr_chunk(out_indptr, np.concatenate([p[1] for p in parts]),
                                np.concatenate([p[2] for p in parts]))

    def _serve(self) -> None:
        while not self._stop.is_set() and self._acquisitions_sent < self._acquisitions:
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                try:
                    self._send_acquisitions(conn)
                    while not self._stop.wait(0.05):  # all sent: keep the connection until stopped
                        pass
                except OSError:
                    pass  # the client went away: wait for the next one

    def _send_acquisitions(self, conn: socket.socket) -> None:
        nav = (int(self.nav_shape[0]), int(self.nav_shape[1]))
        while self._acquisitions_sent < self._acquisitions and not self._stop.is_set():
            seq = self._acquisitions_sent + 1
            start = AcquisitionStart(nav_shape=nav, sig_shape=self.sig_shape, sequence=seq)
            conn.sendall(start.encode() + ScanStart(seq, 0).encode())
            t0, sent = time.monotonic(), 0
            for first in range(0, self.num_frames, self._chunk):
                if self._stop.is_set():
                    return
                stop = min(self.num_frames, first + self._chunk)
                payload = self._chunk_bytes(first, stop, start)
                if self._die_after is not None and stop > self._die_after:
                    conn.sendall(payload[:len(payload) // 2])  # cut inside the chunk, then closed
                    conn.shutdown(socket.SHUT_RDWR)
                    raise OSError("die_after")
                conn.sendall(payload)
                sent += stop - first
                self.frames_sent += stop - first
                if self._frame_rate:
                    time.sleep(max(0.0, t0 + sent / self._frame_rate - time.monotonic()))
            conn.sendall(ScanEnd(seq).encode() + AcquisitionEnd(seq).encode())
            self._acquisitions_sent += 1
