"""A DECTRIS connection (SIMPLON REST + ZeroMQ stream), its pending acquisitions and active controller.

LiberTEM-live's names and defaults: ``buffer_size`` (MiB of receive slab,
2048), ``bytes_per_frame`` (a slot's bytes per frame; default an eighth of
an uncompressed frame, what bitshuffle-LZ4 typically reaches),
``frame_stack_size`` (24). raytile's own: ``timeout`` (seconds of silence
mid-series before it fails: ZeroMQ reports no lost peer), ``stream_format``
(``"legacy"``: stream V1, JSON multipart, port 9999; ``"cbor"``: stream V2,
port 31001 on a DCU; None, the default: what the detector's
``stream/.../config/format`` says, and ``"legacy"`` where it has no such
setting, as LiberTEM-live's simulator and older DCU firmware, which answer
500 to it. Only a format given here is ever set over REST), ``rcvhwm`` (ZeroMQ's receive high-water mark),
``on_dropped`` (``"zero"``: lost frames become zero frames, counted in
``aq.stats``; ``"fail"``: the run fails), ``channel`` (stream V2: the
threshold channel read, e.g. ``"threshold_2"``; None: the first).

>>> conn = DectrisConnectionBuilder().open(api_host="127.0.0.1", api_port=8910,
...                                        data_host="127.0.0.1", data_port=9999)   # doctest: +SKIP
>>> conn.get_api_client().send_detector_command("arm")                 # passive: arm elsewhere
>>> pending = conn.wait_for_acquisition(10.0); pending.series, pending.nimages
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from raytile.common.errors import AcquisitionCancelled, AcquisitionError, ConfigValidationError, DataSetException
from raytile.live.detectors.dectris.receiver import STREAM_FORMATS, DectrisReceiver, images_in_series
from raytile.live.detectors.dectris.simplon import SimplonClient
from raytile.live.detectors.dectris.stream_v1 import COMPRESSIONS
from raytile.live.connection import ReceiverConnection, check_positive_int
from raytile.live.receiver import DROP_POLICIES, AcquisitionFrames

__all__ = ["DectrisConnectionBuilder", "DectrisDetectorConnection", "DectrisPendingAcquisition",
           "DectrisActiveController", "TRIGGER_MODES"]

TRIGGER_MODES = ("exte", "exts", "ints", "inte")


class DectrisPendingAcquisition:
    """A series whose header arrived: ``series`` (its id), ``detector_config`` (the header's JSON)
    and ``nimages`` (``ntrigger`` for ``exte``/``inte``, else ``nimages * ntrigger``)."""

    def __init__(self, detector_config: dict, series: int):
        self._config, self._series = detector_config, series

    @property
    def detector_config(self) -> dict:
        return self._config

    @property
    def series(self) -> int:
        return self._series

    @property
    def nimages(self) -> int:
        return images_in_series(self._config)

    @property
    def nav_shape(self) -> tuple[int, ...] | None:
        return None  # the stream's header carries no scan shape

    def __repr__(self) -> str:
        return f"<DectrisPendingAcquisition series={self._series} nimages={self.nimages}>"


class DectrisActiveController:
    """Active mode: detector settings applied, and the detector armed, when the run starts.
    Settings left None are not changed (LiberTEM-live's parameters)."""

    def __init__(self, api_host: str, api_port: int, trigger_mode: str | None = None,
                 count_time: float | None = None, frame_time: float | None = None, roi_mode: str | None = None,
                 roi_y_size: int | None = None, roi_bit_depth: int | None = None,
                 enable_file_writing: bool | None = None, compression: str | None = None,
                 name_pattern: str | None = None, nimages_per_file: int | None = 0,
                 enable_corrections: bool = False, mask_to_zero: bool | None = None):
        if trigger_mode is not None and trigger_mode not in TRIGGER_MODES:
            raise ConfigValidationError(f"get_active_controller: parameter 'trigger_mode' must be one of "
                                        f"{TRIGGER_MODES}, got {trigger_mode!r}")
        if compression is not None and compression not in COMPRESSIONS:
            raise ConfigValidationError(f"get_active_controller: parameter 'compression' must be one of "
                                        f"{sorted(COMPRESSIONS)}, got {compression!r}")
        self._api_host, self._api_port = api_host, api_port
        self._trigger_mode = trigger_mode
        self._misc = {"roi_mode": roi_mode, "roi_y_size": roi_y_size, "roi_bit_depth": roi_bit_depth,
                      "count_time": count_time, "frame_time": frame_time, "compression": compression,
                      "mask_to_zero": mask_to_zero}
        self._enable_file_writing, self._name_pattern = enable_file_writing, name_pattern
        self._nimages_per_file = nimages_per_file
        self.enable_corrections = enable_corrections

    def get_api_client(self) -> SimplonClient:
        return SimplonClient(self._api_host, self._api_port)

    def apply_scan_settings(self, nav_shape: tuple[int, ...], count: int | None = None) -> None:
        """Image counts for ``count`` frames (``scans`` scans of ``nav_shape``): ``ntrigger`` for external
        triggers, ``nimages`` for ``ints``. ``count`` None (``scans=0``): the detector's image counts are
        left as they are, and the series' end ends the run."""
        ec = self.get_api_client()
        if count is None:
            if self._trigger_mode is not None:
                ec.set_detector_config("trigger_mode", self._trigger_mode)
            return
        nimages = count
        if self._trigger_mode is not None:
            ec.set_detector_config("ntrigger", 1)
            ec.set_detector_config("nimages", 1)
            ec.set_detector_config("trigger_mode", self._trigger_mode)
        if self._trigger_mode in ("exte", "exts", "inte"):
            ec.set_detector_config("ntrigger", nimages)
        elif self._trigger_mode == "ints":
            ec.set_detector_config("nimages", nimages)

    def apply_misc_settings(self) -> None:
        ec = self.get_api_client()
        for name, value in self._misc.items():
            if value is not None:
                ec.set_detector_config(name, value)
        if self._enable_file_writing:
            ec.set_filewriter_config("mode", "enabled")
            if self._name_pattern is not None:
                ec.set_filewriter_config("name_pattern", self._name_pattern)
            ec.set_filewriter_config("nimages_per_file", self._nimages_per_file)
        elif self._enable_file_writing is False:
            ec.set_filewriter_config("mode", "disabled")

    def arm(self) -> int:
        """Arm the detector; returns the series id its stream will carry."""
        reply = self.get_api_client().send_detector_command("arm")
        if not isinstance(reply, dict) or "sequence id" not in reply:
            raise AcquisitionError(f"SIMPLON {self._api_host}:{self._api_port}: arm answered {reply!r}, "
                                   f"expected a 'sequence id'")
        return int(reply["sequence id"])


class DectrisDetectorConnection(ReceiverConnection[DectrisReceiver]):
    """A ZeroMQ data connection to a DECTRIS DCU, kept open across series; REST on demand."""

    detector = "dectris"

    def __init__(self, *, api_host: str = "127.0.0.1", api_port: int = 80, data_host: str = "127.0.0.1",
                 data_port: int = 9999, buffer_size: int = 2048, bytes_per_frame: int | None = None,
                 frame_stack_size: int = 24, huge_pages: bool = False, timeout: float = 10.0, rcvhwm: int = 256,
                 stream_format: str | None = None, on_dropped: str = "zero", channel: str | None = None):
        if on_dropped not in DROP_POLICIES:
            raise ConfigValidationError(f"dectris connection: parameter 'on_dropped' must be one of "
                                        f"{DROP_POLICIES}, got {on_dropped!r}")
        if stream_format is not None and stream_format not in STREAM_FORMATS:
            raise ConfigValidationError(f"dectris connection: parameter 'stream_format' must be one of "
                                        f"{STREAM_FORMATS} (stream V1, V2) or None (the detector's), "
                                        f"got {stream_format!r}")
        self._addresses(api_host, api_port, data_host, data_port)
        check_positive_int("dectris", "buffer_size", buffer_size)
        check_positive_int("dectris", "frame_stack_size", frame_stack_size)
        if bytes_per_frame is not None and (not isinstance(bytes_per_frame, int) or bytes_per_frame < 1):
            raise ConfigValidationError(f"dectris connection: parameter 'bytes_per_frame' must be a positive int "
                                        f"or None, got {bytes_per_frame!r}")
        self._huge_pages = huge_pages  # accepted for LiberTEM-live's signature; the slab is plain memory
        if bytes_per_frame is None:
            ec = self.get_api_client()
            pixels = int(ec.detector_value("x_pixels_in_detector")) * int(ec.detector_value("y_pixels_in_detector"))
            bytes_per_frame = max(512, pixels * int(ec.detector_value("bit_depth_image")) // 8 // 8)
        self._bytes_per_frame = bytes_per_frame
        #: The stream format asked for (set over REST in active mode); None: the detector's, never set.
        self._stream_format_asked = stream_format
        if stream_format is None:
            stream_format = self.detector_stream_format()
        slots = (buffer_size * 1024 * 1024) // (bytes_per_frame * frame_stack_size)
        if slots < 2:
            raise ConfigValidationError(f"dectris connection: buffer_size {buffer_size} MiB holds {slots} stacks "
                                        f"of {frame_stack_size} frames of {bytes_per_frame} bytes; at least 2 needed")
        self._receiver_args: dict[str, Any] = dict(frame_stack_size=frame_stack_size, slots=slots,
                                                   bytes_per_frame=bytes_per_frame, timeout=float(timeout),
                                                   rcvhwm=rcvhwm, stream_format=stream_format,
                                                   on_dropped=on_dropped, channel=channel)
        self.connect()

    @property
    def bytes_per_frame(self) -> int:
        return self._bytes_per_frame

    @property
    def timeout(self) -> float:
        return float(self._receiver_args["timeout"])

    def _new_receiver(self) -> DectrisReceiver:
        return DectrisReceiver(f"tcp://{self._data_host}:{self._data_port}", **self._receiver_args)

    def get_api_client(self) -> SimplonClient:
        return SimplonClient(self._api_host, self._api_port)

    def detector_stream_format(self) -> str:
        """The stream format the detector is set to (``stream/.../config/format``); ``"legacy"`` (V1)
        where it has no such setting: LiberTEM-live's simulator and older DCU firmware answer an
        error to it, and speak V1 only."""
        try:
            reply = self.get_api_client().stream_config("format")
        except AcquisitionError:
            return "legacy"
        value = reply.get("value") if isinstance(reply, dict) else None
        if value not in STREAM_FORMATS:
            raise AcquisitionError(f"DECTRIS {self._api_host}:{self._api_port}: stream format {value!r}; raytile "
                                   f"reads {STREAM_FORMATS}: set one with open(..., stream_format=...)")
        return str(value)

    def wait_for_acquisition(self, timeout: float | None = None) -> DectrisPendingAcquisition | None:
        """Passive mode: wait up to ``timeout`` s (None: forever) for the next series' header
        (someone else arms the detector); None on timeout."""
        receiver = self.connect()
        receiver.expect_series(None)
        found = receiver.wait_for_header(timeout)
        return None if found is None else DectrisPendingAcquisition(found[1], found[0])

    def get_active_controller(self, trigger_mode: str | None = None, count_time: float | None = None,
                              frame_time: float | None = None, roi_mode: str | None = None,
                              roi_y_size: int | None = None, roi_bit_depth: int | None = None,
                              enable_file_writing: bool | None = None, compression: str | None = None,
                              name_pattern: str | None = None, nimages_per_file: int | None = 0,
                              enable_corrections: bool = False,
                              mask_to_zero: bool | None = None) -> DectrisActiveController:
        return DectrisActiveController(
            self._api_host, self._api_port, trigger_mode=trigger_mode, count_time=count_time, frame_time=frame_time,
            roi_mode=roi_mode, roi_y_size=roi_y_size, roi_bit_depth=roi_bit_depth,
            enable_file_writing=enable_file_writing, compression=compression, name_pattern=name_pattern,
            nimages_per_file=nimages_per_file, enable_corrections=enable_corrections, mask_to_zero=mask_to_zero)

    # -- the common live-connection protocol (raytile.live.connection) ---------------------
    def acquisition_geometry(self, pending: DectrisPendingAcquisition | None) -> tuple[tuple[int, ...], np.dtype]:
        """Signal shape and dtype: from the series header when it has them, else from SIMPLON."""
        config = pending.detector_config if pending is not None else {}
        names = ("y_pixels_in_detector", "x_pixels_in_detector", "bit_depth_image")
        if not all(n in config for n in names):
            ec = self.get_api_client()
            config = {n: ec.detector_value(n) for n in names}
        bits = int(config["bit_depth_image"])
        if bits not in (8, 16, 32):
            raise DataSetException(f"DECTRIS {self._api_host}:{self._api_port}: bit_depth_image {bits}; "
                                   f"expected 8, 16 or 32")
        self._sig_shape = (int(config["y_pixels_in_detector"]), int(config["x_pixels_in_detector"]))
        return self._sig_shape, np.dtype(f"uint{bits}")

    def _frames(self, pending: DectrisPendingAcquisition | None, controller: Any, nav_shape: tuple[int, ...],
                ready: Callable[[], None], count: int | None, dtype: np.dtype,
                af: AcquisitionFrames) -> Iterator[np.ndarray]:
        """The series' frame stacks (and its :class:`~raytile.live.receiver.AcquisitionStats`). Active
        mode (no ``pending``): apply the controller's settings, arm, call ``ready``
        (``Hooks.on_ready_for_data``: trigger there), wait for the armed series."""
        receiver = self.connect()
        if pending is None:
            ctl = controller if controller is not None else self.get_active_controller()
            ctl.apply_scan_settings(nav_shape, count)
            ctl.apply_misc_settings()
            ec = self.get_api_client()
            ec.set_stream_config("mode", "enabled")
            if self._stream_format_asked is not None:  # a non-default format: set it
                ec.set_stream_config("format", self._stream_format_asked)
            else:  # the detector's, as it is now
                receiver.stream_format = self._receiver_args["stream_format"] = self.detector_stream_format()
            receiver.expect_series(None)  # the header may come before arm() returns; frames() checks the id
            series = ctl.arm()
            receiver.expect_series(series)
            ready()
            found = receiver.wait_for_header(self.timeout, series=series)
            if found is None:
                raise AcquisitionError(f"DECTRIS {receiver.uri}: no header of series {series} within "
                                       f"{self.timeout:g} s of arming")
            nimages = DectrisPendingAcquisition(found[1], found[0]).nimages
            if nimages and count is not None and nimages < count:
                raise AcquisitionCancelled(f"DECTRIS {receiver.uri}: series {series} has {nimages} images, "
                                           f"nav_shape needs {count}: the run is cancelled")
        yield from receiver.frames(count, dtype, batch=af.batch, stats=af.stats)


class DectrisConnectionBuilder:
    """``LiveContext.make_connection("dectris")``; :meth:`open` connects."""

    def open(self, *, api_host: str = "127.0.0.1", api_port: int = 80, data_host: str = "127.0.0.1",
             data_port: int = 9999, buffer_size: int = 2048, bytes_per_frame: int | None = None,
             frame_stack_size: int = 24, huge_pages: bool = False, **kwargs: Any) -> DectrisDetectorConnection:
        return DectrisDetectorConnection(api_host=api_host, api_port=api_port, data_host=data_host,
                                         data_port=data_port, buffer_size=buffer_size,
                                         bytes_per_frame=bytes_per_frame, frame_stack_size=frame_stack_size,
                                         huge_pages=huge_pages, **kwargs)
