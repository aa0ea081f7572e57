"""A TcpCam connection: a :class:`~raytile.live.connection.LiveConnection` over one TCP socket."""

from __future__ import annotations

import socket
from typing import Any, Callable, Iterator

import numpy as np

from _tcpcam.wire import DTYPE, HEADER, recv_exactly
from raytile.common.errors import AcquisitionError
from raytile.live.connection import check_port
from raytile.live.receiver import AcquisitionFrames

#: Frames per array handed to the stream.
STACK = 5


class PendingTcpCamAcquisition:
    def __init__(self, nimages: int, sig_shape: tuple[int, int]):
        self.nimages, self.sig_shape = nimages, sig_shape
        self.nav_shape: tuple[int, ...] | None = None


class TcpCamConnection:
    def __init__(self, data_host: str, data_port: int, timeout: float):
        check_port("tcpcam", "data_port", data_port)
        self.timeout = timeout
        self._sock: socket.socket | None = socket.create_connection((data_host, data_port), timeout=timeout)

    def _header(self, timeout: float | None) -> PendingTcpCamAcquisition | None:
        assert self._sock is not None
        self._sock.settimeout(timeout)
        try:
            raw = recv_exactly(self._sock, HEADER.size)
        except socket.timeout:
            return None
        finally:
            self._sock.settimeout(self.timeout)
        if raw is None:
            return None
        n, h, w = HEADER.unpack(raw)
        return PendingTcpCamAcquisition(n, (h, w))

    def wait_for_acquisition(self, timeout: float | None = None) -> PendingTcpCamAcquisition | None:
        return self._header(timeout)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "TcpCamConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get_active_controller(self, **kwargs: Any) -> None:
        return None  # nothing to set: the camera starts by itself once ready() was called

    def acquisition_geometry(self, pending: PendingTcpCamAcquisition | None) -> tuple[tuple[int, ...], np.dtype]:
        if pending is None:  # active mode: the geometry comes with the header, read when the run starts
            raise AcquisitionError("tcpcam: active mode is not supported; pass pending_aq")
        return pending.sig_shape, np.dtype(np.uint16)

    def acquisition_frames(self, pending: PendingTcpCamAcquisition | None, controller: Any,
                           nav_shape: tuple[int, ...], ready: Callable[[], None], count: int | None,
                           dtype: np.dtype) -> AcquisitionFrames:
        assert pending is not None
        return AcquisitionFrames(lambda af: self._frames(pending, count, af))

    def _frames(self, pending: PendingTcpCamAcquisition, count: int | None,
                af: AcquisitionFrames) -> Iterator[np.ndarray]:
        total = pending.nimages if count is None else count
        frame_bytes = int(np.prod(pending.sig_shape)) * DTYPE.itemsize
        while af.stats.frames < total:
            k = min(STACK, total - af.stats.frames)
            assert self._sock is not None
            raw = recv_exactly(self._sock, k * frame_bytes)
            if raw is None:
                raise AcquisitionError(f"tcpcam: the camera closed after {af.stats.frames} of {total} frames")
            af.stats.frames += k
            yield np.frombuffer(raw, DTYPE).reshape((k,) + pending.sig_shape).astype(np.uint16)


class TcpCamConnectionBuilder:
    def open(self, data_host: str = "127.0.0.1", data_port: int = 7878, timeout: float = 10.0) -> TcpCamConnection:
        return TcpCamConnection(data_host, data_port, timeout)
