"""`DectrisSimulator`: a DECTRIS DCU on loopback: SIMPLON REST and a ZeroMQ stream V1.

It replays frames (any ``(n, h, w)`` uint8/16/32 array) compressed as the
detector does (``compression`` bslz4, lz4 or none, settable over REST), at
``frame_rate``. The REST API (stdlib ``http.server``) answers
``/detector/api/1.8.0/config/<name>`` (GET/PUT: ``nimages``, ``ntrigger``,
``trigger_mode``, ``x_pixels_in_detector``, ...), ``command/arm`` (answers
the new series id), ``trigger``, ``disarm``, and the stream's and file
writer's ``config`` PUTs (and the stream's ``config`` GETs). Each ``arm`` sends the series header (as one
multipart message; LiberTEM-rs' simulator sends its two parts as two
messages) at once; with ``trigger_mode`` ``exts``/``exte`` the images follow
at once, with ``ints``/``inte`` after a ``trigger`` command (one a frame for
``inte``). A series has ``ntrigger`` images (``exte``/``inte``) or
``nimages * ntrigger``, the replayed frames in a cycle.

``stream_format`` ``cbor`` (or the REST stream ``format``) sends stream V2 (CBOR) messages, with
``channels`` threshold channels (``threshold_k`` holds the frames divided by ``k``).

``auto_arm`` (passive mode for the receiver): the simulator arms itself
that many times, one series after the other, as if a scan engine armed the
detector; by default it waits for ``arm`` over REST.

Faults for tests: ``stale_images`` images of another series are sent
before each header and in the middle of each series (the tail of a stale
series); ``silent_after`` images into a series the sender stops sending
but stays connected (ZeroMQ shows no disconnect); ``skip_images`` image
numbers of every series are never sent (frames the detector lost).

>>> with DectrisSimulator(frames) as sim:                               # doctest: +SKIP
...     conn = LiveContext().make_connection("dectris").open(api_port=sim.api_port, data_port=sim.data_port)
"""

from __future__ import annotations

import json
import queue
import re
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.frame_blocks import SequentialFrames
from raytile.live.detectors.dectris import stream_v2
from raytile.live.detectors.dectris.receiver import images_in_series
from raytile.live.detectors.dectris.simplon import API_VERSION
from raytile.live.detectors.dectris.stream_v1 import (
    COMPRESSIONS, encode_image, header_message, image_message, series_end_message,
)
from raytile.live.extra import live_module

__all__ = ["DectrisSimulator"]

#: Frames read from a replayed file at a time (its memory: this many frames, whatever the file's size).
READ_BLOCK = 64

_PATH = re.compile(r"^/(detector|stream|filewriter)/api/[^/]+/(config|command)/([A-Za-z0-9_]+)$")


class DectrisSimulator:
    """See the module docstring. Ports 0 pick free ones (``api_port``/``data_port`` say which)."""

    def __init__(self, frames: np.ndarray | SequentialFrames, host: str = "127.0.0.1", api_port: int = 0, data_port: int = 0,
                 frame_rate: float | None = None, compression: str = "bslz4", trigger_mode: str = "exts",
                 first_series: int = 1, stale_images: int = 0, silent_after: int | None = None,
                 sndhwm: int = 1000, stream_format: str = "legacy", auto_arm: int = 0,
                 skip_images: tuple[int, ...] = (), channels: int = 1):
        if isinstance(frames, SequentialFrames):  # a file, replayed in bounded memory
            self._source: SequentialFrames | None = frames
            self._frames: np.ndarray | None = None
            shape, dtype = (frames.num_frames, *frames.sig_shape), frames.dtype
        else:
            self._source, self._frames = None, np.asarray(frames)
            shape, dtype = self._frames.shape, self._frames.dtype
        if len(shape) < 3 or dtype not in (np.uint8, np.uint16, np.uint32):
            raise ConfigValidationError(f"DectrisSimulator: parameter 'frames' must be (n, h, w) uint8/16/32, got "
                                        f"{dtype} {shape}")
        if compression not in COMPRESSIONS:
            raise ConfigValidationError(f"DectrisSimulator: parameter 'compression' must be one of "
                                        f"{sorted(COMPRESSIONS)}, got {compression!r}")
        h, w = int(shape[-2]), int(shape[-1])
        if self._frames is not None:
            self._frames = self._frames.reshape((-1, h, w))
        self._num_frames = int(np.prod(shape[:-2]))
        self._dtype = np.dtype(dtype)
        self._sig: tuple[int, int] = (h, w)
        self._block: tuple[int, np.ndarray] = (0, np.empty((0, h, w), self._dtype))  # frames read from _source
        self.config: dict[str, Any] = {
            "x_pixels_in_detector": int(w), "y_pixels_in_detector": int(h),
            "bit_depth_image": self._dtype.itemsize * 8, "nimages": self._num_frames, "ntrigger": 1,
            "trigger_mode": trigger_mode, "compression": compression, "count_time": 0.001, "frame_time": 0.001,
            "roi_mode": "disabled", "roi_y_size": int(h), "roi_bit_depth": self._dtype.itemsize * 8,
            "mask_to_zero": False,
        }
        self.stream_config: dict[str, Any] = {"mode": "enabled", "format": stream_format, "header_detail": "basic"}
        self._encoded: dict[str, list[tuple[bytes, str]]] = {}
        self._frame_rate, self._stale, self._silent_after = frame_rate, stale_images, silent_after
        self._auto_arm, self._skip = int(auto_arm), frozenset(int(i) for i in skip_images)
        if not isinstance(channels, int) or channels < 1:
            raise ConfigValidationError(f"DectrisSimulator: parameter 'channels' must be a positive int, got "
                                        f"{channels!r}")
        self._channels = channels
        self._series = first_series - 1
        self._lock = threading.Lock()
        self._arms: queue.Queue[tuple[int, dict]] = queue.Queue()
        self._triggers = threading.Semaphore(0)
        self._stop = threading.Event()
        zmq = live_module("zmq", "the DECTRIS simulator")
        self._zmq = zmq.Context()
        self._push = self._zmq.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, sndhwm)
        self._push.setsockopt(zmq.LINGER, 0)
        if data_port:
            self._push.bind(f"tcp://{host}:{data_port}")
            self.data_port = data_port
        else:
            self.data_port = self._push.bind_to_random_port(f"tcp://{host}")
        self._http = ThreadingHTTPServer((host, api_port), _handler(self))
        self._http.daemon_threads = True
        self.api_port = int(self._http.server_address[1])
        self._threads = [threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05},
                                          name="dectris-sim-rest", daemon=True),
                         threading.Thread(target=self._send_loop, name="dectris-sim-data", daemon=True)]
        self.frames_sent = 0
        self.series_sent: list[int] = []

    @property
    def acquisitions_sent(self) -> int:
        """Series sent so far (``raytile live sim`` reports them as acquisitions)."""
        return len(self.series_sent)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "DectrisSimulator":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stops both threads, then closes the socket. The data thread never blocks in ZeroMQ (it
        sends without blocking and polls 50 ms at a time), so it ends within one frame's encoding;
        closing a socket another thread is sending on would abort the process inside libzmq."""
        self._stop.set()
        self._triggers.release()
        self._http.shutdown()
        for t in self._threads:
            if t.ident is not None:
                t.join()
        self._http.server_close()
        self._push.close()
        self._zmq.term()

    def __enter__(self) -> "DectrisSimulator":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- REST side ----------------------------------------------------------------------
    def arm(self) -> int:
        with self._lock:
            self._series += 1
            series, config = self._series, dict(self.config)
        self._arms.put((series, config))
        return series

    def trigger(self) -> None:
        self._triggers.release()

    # -- data side ----------------------------------------------------------------------
    def channel_frames(self, channel: int) -> np.ndarray:
        """The frames of stream V2 channel ``threshold_<channel>`` (1-based): the frames divided by
        ``channel`` (frames given as an array only)."""
        if self._frames is None:
            raise ConfigValidationError("DectrisSimulator: channel_frames needs frames given as an array")
        return self._frames if channel == 1 else self._frames // channel

    def _frame(self, i: int, channel: int = 1) -> np.ndarray:
        """Frame ``i`` (of the replayed frames) of ``channel``; a file's frames are read a block at a time."""
        if self._frames is not None:
            frame = self._frames[i]
        else:
            assert self._source is not None
            first, block = self._block
            if not first <= i < first + len(block):
                block = self._source.read(i, min(i + READ_BLOCK, self._num_frames))
                self._block = (first, block) = (i, block)
            frame = block[i - first]
        return frame if channel == 1 else frame // channel

    def _images(self, compression: str, channel: int = 1) -> list[tuple[bytes, str]]:
        """Every frame of ``channel`` encoded once (frames given as an array: they are few)."""
        key = f"{compression}-{channel}"
        if key not in self._encoded:
            self._encoded[key] = [encode_image(f, compression) for f in self.channel_frames(channel)]
        return self._encoded[key]

    def _encoded_image(self, i: int, compression: str, channel: int = 1) -> tuple[bytes, str]:
        if self._frames is not None:
            return self._images(compression, channel)[i]
        return encode_image(self._frame(i, channel), compression)

    def _v2(self) -> bool:
        return self.stream_config.get("format") == "cbor"

    def _image(self, series: int, i: int, compression: str) -> list[bytes]:
        j = i % self._num_frames  # the replayed frames, in a cycle
        data, enc = self._encoded_image(j, compression)
        if self._v2():
            more = [(self._frame(j, c), self._v2_payload(self._encoded_image(j, compression, c)[0], compression))
                    for c in range(2, self._channels + 1)]
            return [stream_v2.image_message(series, i, self._frame(j), compression,
                                            self._v2_payload(data, compression), more)]
        return image_message(series, i, data, enc, self._sig, self._dtype, time.monotonic_ns())

    def _v2_payload(self, data: bytes, compression: str) -> bytes:
        if compression == "lz4":  # V2's lz4 is in the HDF5 LZ4 filter's framing: one block of the whole image
            nbytes = int(np.prod(self._sig)) * self._dtype.itemsize
            return struct.pack(">QI", nbytes, nbytes) + struct.pack(">I", len(data)) + data
        return data

    def _send(self, parts: list[bytes]) -> bool:
        """Sends one multipart message; False when stopping. Never blocks: a PUSH socket whose
        receiver went away between ``poll`` and ``send`` would block a plain send for good."""
        import zmq

        while not self._stop.is_set():
            if self._push.poll(50, zmq.POLLOUT):
                try:
                    self._push.send_multipart(parts, zmq.NOBLOCK)
                    return True
                except zmq.Again:
                    continue
        return False

    def _send_loop(self) -> None:
        while not self._stop.is_set():
            if self._auto_arm > 0 and self._arms.empty():
                self._auto_arm -= 1
                self.arm()
            try:
                series, config = self._arms.get(timeout=0.05)
            except queue.Empty:
                continue
            self._send_series(series, config)

    def _send_stale(self, series: int, n: int) -> bool:
        for i in range(n):
            if not self._send(self._image(series - 1000, i, "bslz4")):
                return False
        return True

    def _send_series(self, series: int, config: dict) -> None:
        total = images_in_series(config)
        per_trigger = 1 if config["trigger_mode"] == "inte" else int(config["nimages"])
        wait_trigger = config["trigger_mode"] in ("ints", "inte")
        header = [stream_v2.start_message(series, {**config, "number_of_images": total}, self._channels)] \
            if self._v2() \
            else header_message(series, config)
        for channel in range(1, self._channels + 1):  # encode first: no pause between the header and image 0
            if self._frames is not None:
                self._images(config["compression"], channel)
        if not self._send_stale(series, self._stale) or not self._send(header):
            return
        self.series_sent.append(series)
        t0, sent = time.monotonic(), 0
        for i in range(total):
            if wait_trigger and i % per_trigger == 0:
                while not self._triggers.acquire(timeout=0.05):
                    if self._stop.is_set():
                        return
                t0, sent = time.monotonic(), 0
            if self._silent_after is not None and i == self._silent_after:
                return  # silent: no more messages, the socket stays open
            if self._stale and i == total // 2 and not self._send_stale(series, self._stale):
                return
            if i in self._skip:
                continue  # lost by the detector: never sent
            if not self._send(self._image(series, i, config["compression"])):
                return
            self.frames_sent += 1
            sent += 1
            if self._frame_rate:
                delay = t0 + sent / self._frame_rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        self._send([stream_v2.end_message(series)] if self._v2() else series_end_message(series))


def _handler(sim: DectrisSimulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _reply(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> tuple[str, str, str] | None:
            m = _PATH.match(self.path)
            if m is None:
                self._reply(404, {"error": f"no such path {self.path}"})
                return None
            return m.group(1), m.group(2), m.group(3)

        def do_GET(self) -> None:
            route = self._route()
            if route is None:
                return
            subsystem, kind, name = route
            if subsystem == "detector" and kind == "config" and name in sim.config:
                value = sim.config[name]
                vtype = {bool: "bool", int: "uint", float: "float", str: "string"}[type(value)]
                self._reply(200, {"value": value, "value_type": vtype, "access_mode": "rw"})
            elif subsystem == "stream" and kind == "config" and name in sim.stream_config:
                self._reply(200, {"value": sim.stream_config[name], "value_type": "string", "access_mode": "rw"})
            elif subsystem == "detector" and name == "version":
                self._reply(200, {"value": API_VERSION, "value_type": "string"})
            else:
                self._reply(404, {"error": f"{subsystem} {kind} {name!r} not known"})

        def do_PUT(self) -> None:
            route = self._route()
            if route is None:
                return
            subsystem, kind, name = route
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length)) if length else {}
            except ValueError:
                self._reply(400, {"error": "body is not JSON"})
                return
            if subsystem == "detector" and kind == "command":
                if name == "arm":
                    self._reply(200, {"sequence id": sim.arm()})
                elif name == "trigger":
                    sim.trigger()
                    self._reply(200, {})
                elif name in ("disarm", "abort", "cancel", "initialize"):
                    self._reply(200, {"sequence id": sim._series})
                else:
                    self._reply(400, {"error": f"command {name!r} not known"})
            elif subsystem == "detector" and kind == "config":
                if name not in sim.config or "value" not in body:
                    self._reply(400, {"error": f"config {name!r} not known or no value"})
                    return
                if name == "compression" and body["value"] not in COMPRESSIONS:
                    self._reply(400, {"error": f"compression {body['value']!r} not one of {sorted(COMPRESSIONS)}"})
                    return
                sim.config[name] = body["value"]
                self._reply(200, [name])
            elif subsystem == "stream" and kind == "config":
                if name == "format" and body.get("value") not in ("legacy", "cbor"):
                    self._reply(400, {"error": f"stream format {body.get('value')!r} not one of legacy, cbor"})
                    return
                sim.stream_config[name] = body.get("value")
                self._reply(200, [name])
            else:  # file writer settings: accepted
                self._reply(200, [name])

    return Handler
