"""The TcpCam simulator: a TCP server on 127.0.0.1 that sends ``acquisitions`` acquisitions of
``frames`` to the first client (what ``raytile live sim tcpcam`` runs)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import numpy as np

from _tcpcam.wire import DTYPE, HEADER


class TcpCamSimulator:
    def __init__(self, frames: Any, host: str = "127.0.0.1", data_port: int = 0, acquisitions: int = 1):
        self.frames = np.ascontiguousarray(np.asarray(frames), dtype=DTYPE)
        self.acquisitions = acquisitions
        self._server = socket.create_server((host, data_port))
        self._server.settimeout(0.1)
        self.data_port = int(self._server.getsockname()[1])
        self.api_port = 0  # no control port
        self.frames_sent = 0
        self.acquisitions_sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tcpcam-sim", daemon=True)

    def _serve(self) -> None:
        """Each client in turn gets ``acquisitions`` acquisitions, and is closed once it closes."""
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except socket.timeout:
                continue
            with client:
                n, h, w = self.frames.shape
                for _ in range(self.acquisitions):
                    client.sendall(HEADER.pack(n, h, w))
                    for frame in self.frames:
                        client.sendall(frame.tobytes())
                        self.frames_sent += 1
                    self.acquisitions_sent += 1
                client.settimeout(0.1)
                while not self._stop.is_set():
                    try:
                        if not client.recv(1):
                            break
                    except socket.timeout:
                        pass

    def __enter__(self) -> "TcpCamSimulator":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)
        self._server.close()
