"""Live DECTRIS acquisitions (SIMPLON REST + ZeroMQ stream V1) on 127.0.0.1: results equal numpy on the frames sent.

Against raytile's simulator (passive and active, every encoding, stale series, a silent sender,
backpressure) and LiberTEM-live's own (``libertem-live-dectris-sim``, LiberTEM-rs' sender, in a
subprocess stopped at the end). Every simulator is stopped by its context manager; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from _ray_udfs import SlowSumUDF

from raytile.common.errors import AcquisitionError, ConfigValidationError
from raytile.live import Hooks, LiveContext
from raytile.live.detectors.dectris import DectrisSimulator, SimplonClient
from raytile.live.detectors.dectris.stream_v1 import encode_image, header_message, image_message, series_end_message
from raytile.udf import ApplyMasksUDF, SumSigUDF, SumUDF, masks

pytest.importorskip("zmq")
pytest.importorskip("bitshuffle")

NAV, SIG = (8, 12), (32, 48)


def scan_frames(seed: int, dtype=np.uint16, nav=NAV) -> np.ndarray:
    rng = np.random.default_rng(seed)
    frames = rng.poisson(2.0, size=(int(np.prod(nav)),) + SIG)  # sparse counts: compressible, as on a detector
    frames[:, rng.integers(0, SIG[0]), :] = rng.integers(0, np.iinfo(dtype).max, size=SIG[1])  # and some wide values
    return frames.astype(dtype)


@pytest.fixture(scope="module")
def live_ctx():
    return LiveContext(executor="inline")


def connect(ctx, sim, **kwargs):
    kwargs.setdefault("buffer_size", 16)
    return ctx.make_connection("dectris").open(api_host="127.0.0.1", api_port=sim.api_port, data_host="127.0.0.1",
                                               data_port=sim.data_port, **kwargs)


def check_sums(res, frames, nav=NAV):
    total, per_frame = res
    assert total["intensity"].data.dtype == np.int64
    assert np.array_equal(total["intensity"].data, frames.sum(axis=0, dtype=np.int64))
    assert np.array_equal(per_frame["intensity"].data, frames.sum(axis=(1, 2)).reshape(nav))


@pytest.mark.parametrize("compression,dtype", [("bslz4", np.uint16), ("bslz4", np.uint32), ("bslz4", np.uint8),
                                               ("lz4", np.uint16), ("none", np.uint32)])
def test_passive_equals_numpy(live_ctx, compression, dtype):
    frames = scan_frames(1, dtype)
    with DectrisSimulator(frames, compression=compression) as sim, connect(live_ctx, sim) as conn:
        series = conn.get_api_client().send_detector_command("arm")["sequence id"]  # someone else arms
        pending = conn.wait_for_acquisition(10.0)
        assert pending is not None and pending.series == series and pending.nimages == frames.shape[0]
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=(-1, NAV[1]), frames_per_partition=16)
        assert aq.shape.nav.to_tuple() == NAV and aq.shape.sig.to_tuple() == SIG and aq.dtype == dtype
        check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
        assert conn.receiver.stale_messages == 0


def test_wait_for_acquisition_times_out(live_ctx):
    with DectrisSimulator(scan_frames(2)) as sim, connect(live_ctx, sim) as conn:
        t0 = time.monotonic()
        assert conn.wait_for_acquisition(0.3) is None
        assert time.monotonic() - t0 < 2.0


class TriggerOnReady(Hooks):
    """Active mode: the run armed the detector; send the software trigger (``ints``)."""

    def __init__(self, api_port: int):
        self.api_port, self.calls = api_port, 0

    def on_ready_for_data(self, env):
        self.calls += 1
        assert env.aq is not None
        SimplonClient("127.0.0.1", self.api_port).send_detector_command("trigger")


def test_active_mode_three_acquisitions_in_a_row(live_ctx):
    frames = scan_frames(3)
    with DectrisSimulator(frames, trigger_mode="exte", compression="none", first_series=41) as sim, \
            connect(live_ctx, sim) as conn:
        hooks = TriggerOnReady(sim.api_port)
        controller = conn.get_active_controller(trigger_mode="ints", compression="bslz4", frame_time=1e-3)
        for _ in range(3):
            aq = live_ctx.make_acquisition(conn=conn, controller=controller, nav_shape=NAV, hooks=hooks,
                                           frames_per_partition=24)
            check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
        # the controller set the series up over REST: ints, nimages for the nav shape, the compression
        assert sim.config["trigger_mode"] == "ints" and sim.config["nimages"] == 96 and sim.config["ntrigger"] == 1
        assert sim.config["compression"] == "bslz4"
        assert hooks.calls == 3 and sim.series_sent == [41, 42, 43]


def test_active_mode_on_ray_with_roi_and_iter(ray_context):
    ctx = LiveContext(executor=ray_context.executor)
    frames = scan_frames(4)
    roi = np.zeros(NAV, bool)
    roi[1:6, 2:9] = True
    ring = masks.ring(16, 24, 4, 12, SIG)
    with DectrisSimulator(frames, frame_rate=2000) as sim, connect(ctx, sim) as conn:
        aq = ctx.make_acquisition(conn=conn, nav_shape=NAV, frames_per_partition=8,
                                  controller=conn.get_active_controller(trigger_mode="exte"))
        parts = list(ctx.run_udf_iter(dataset=aq, roi=roi, udf=[SumUDF(dtype="int64"),
                                                                  ApplyMasksUDF(mask_factories=[lambda: ring])]))
    done = [int(p.damage.data.sum()) for p in parts]
    assert done == sorted(done) and done[-1] == int(roi.sum()) and len(done) > 1
    total, rings = parts[-1].buffers
    picked = frames[roi.reshape(-1)]
    assert np.array_equal(total["intensity"].data, picked.sum(axis=0, dtype=np.int64))
    assert np.allclose(rings["intensity"].data[..., 0][roi], (picked * ring).sum(axis=(1, 2)), rtol=1e-5)


def test_stale_series_is_skipped_and_counted(live_ctx):
    """Images of another series come before the header and in the middle of the series: skipped, counted."""
    frames = scan_frames(5)
    with DectrisSimulator(frames, stale_images=5) as sim, connect(live_ctx, sim) as conn:
        for expected_stale in (10, 20):  # passive, then active on the same connection
            if expected_stale == 10:
                conn.get_api_client().send_detector_command("arm")
                aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=NAV)
            else:
                aq = live_ctx.make_acquisition(conn=conn, nav_shape=NAV)
            check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
            assert conn.receiver.stale_messages == expected_stale


def test_silent_sender_is_an_error_within_the_timeout(live_ctx):
    frames = scan_frames(6)
    with DectrisSimulator(frames, silent_after=40) as sim, connect(live_ctx, sim, timeout=0.5) as conn:
        conn.get_api_client().send_detector_command("arm")
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=NAV,
                                       frames_per_partition=8)
        t0 = time.monotonic()
        with pytest.raises(AcquisitionError, match=r"no message for 0.5 s in series 1 \(40 of 96 frames\)"):
            live_ctx.run_udf(dataset=aq, udf=SumUDF())
        assert time.monotonic() - t0 < 5.0


def test_backpressure_slow_udf_nothing_lost(live_ctx):
    """A sender far faster than the UDF: the slab (1 MiB here) bounds memory, every frame is counted once."""
    nav = (16, 16)
    frames = scan_frames(7, nav=nav)
    with DectrisSimulator(frames, sndhwm=4) as sim, \
            connect(live_ctx, sim, buffer_size=1, bytes_per_frame=65536, frame_stack_size=4, rcvhwm=4) as conn:
        conn.get_api_client().send_detector_command("arm")
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=8)
        res = live_ctx.run_udf(dataset=aq, udf=[SlowSumUDF(dtype="int64"), SumSigUDF()])
        assert conn.receiver.slab_bytes == 1024 * 1024  # 4 slots of 4 frames of 64 KiB
        assert conn.receiver.frames_received == 256 and sim.frames_sent == 256
    check_sums(res, frames, nav)


STOP_WHILE_RECEIVER_LEFT = """
import time, numpy as np, zmq
from raytile.live.detectors.dectris import DectrisSimulator
sim = DectrisSimulator(np.zeros((8, 4, 4), np.uint16), auto_arm=1)
sim._push.poll = lambda *a, **k: zmq.POLLOUT  # the receiver left between poll and send: no peer to take it
sim.start()
time.sleep(0.3)
sim.stop()
print("alive after stop:", [t.is_alive() for t in sim._threads])
"""


def test_simulator_stops_cleanly_when_its_receiver_left_mid_send():
    """A receiver that disconnects mid-series (a failed run) left a plain send blocked for good; stop then
    closed the socket under it and libzmq aborted the whole process (CI, exit 134). In a subprocess: a
    regression kills only it."""
    proc = subprocess.run([sys.executable, "-c", STOP_WHILE_RECEIVER_LEFT], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "alive after stop: [False, False]" in proc.stdout


def test_bad_input(live_ctx):
    with pytest.raises(ConfigValidationError, match="'buffer_size'"):
        live_ctx.make_connection("dectris").open(buffer_size=0)
    with pytest.raises(ConfigValidationError, match="'data_port'"):
        live_ctx.make_connection("dectris").open(data_port=70000, bytes_per_frame=1024)
    with DectrisSimulator(scan_frames(8)) as sim, connect(live_ctx, sim) as conn:
        with pytest.raises(ConfigValidationError, match="'trigger_mode'"):
            conn.get_active_controller(trigger_mode="sometimes")
        with pytest.raises(ConfigValidationError, match="'compression'"):
            conn.get_active_controller(compression="zip")
        with pytest.raises(AcquisitionError, match="HTTP 404"):
            conn.get_api_client().detector_value("flux_capacitor")


# -- LiberTEM-live's simulator (LiberTEM-rs' sender) ------------------------------------------------

def write_zmq_dump(path, frames: np.ndarray, series: int) -> None:
    """A capture in the layout libertem-live-dectris-sim replays: each message part as a native int64
    length and the bytes (its ``chunks`` reader), one series in ``exte`` mode."""
    config = {"x_pixels_in_detector": SIG[1], "y_pixels_in_detector": SIG[0], "bit_depth_image": 16,
              "nimages": 1, "ntrigger": len(frames), "trigger_mode": "exte", "compression": "bslz4"}
    parts = header_message(series, config)
    for i, frame in enumerate(frames):
        data, encoding = encode_image(frame, "bslz4")
        parts += image_message(series, i, data, encoding, SIG, frames.dtype)
    parts += series_end_message(series)
    with open(path, "wb") as f:
        for part in parts:
            f.write(struct.pack("=q", len(part)) + part)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def libertem_live_simulator(tmp_path, frames, series):
    """``libertem-live-dectris-sim`` replaying a capture of ``frames`` in a subprocess: yields
    ``(api_port, data_port)``; the process group is stopped at the end."""
    pytest.importorskip("flask")
    pytest.importorskip("libertem_dectris")
    exe = shutil.which("libertem-live-dectris-sim") or os.path.join(os.path.dirname(os.sys.executable),
                                                                     "libertem-live-dectris-sim")
    if not os.path.exists(exe):
        pytest.skip("libertem-live-dectris-sim is not installed")
    write_zmq_dump(tmp_path / "capture.bin", frames, series=series)
    api_port, log = free_port(), open(tmp_path / "sim.log", "wb")
    # --zmqport 0: a random port (a fixed one races with itself inside the simulator); read it from the log
    proc = subprocess.Popen([exe, str(tmp_path / "capture.bin"), "--port", str(api_port), "--zmqport", "0"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        data_port, deadline = None, time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            text = (tmp_path / "sim.log").read_text(errors="replace")
            found = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", text)
            if found and "API server listening" in text:
                data_port = int(found.group(1))
                break
            time.sleep(0.1)
        assert data_port is not None, (tmp_path / "sim.log").read_text(errors="replace")[-2000:]
        yield api_port, data_port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the simulator and its REST server process
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def test_against_libertem_live_simulator(live_ctx, tmp_path):
    frames = scan_frames(9)
    with libertem_live_simulator(tmp_path, frames, series=77) as (api_port, data_port), \
            live_ctx.make_connection("dectris").open(api_port=api_port, data_port=data_port, buffer_size=16,
                                                     frame_stack_size=7) as conn:
        for _ in range(2):  # two series in a row on one connection
            assert conn.get_api_client().send_detector_command("arm")["sequence id"] == 77
            pending = conn.wait_for_acquisition(10.0)
            assert pending is not None and pending.series == 77 and pending.nimages == 96
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV)
            check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)


def test_active_mode_against_libertem_live_simulator(live_ctx, tmp_path):
    """Active mode (raytile arms): the simulator, like older DCU firmware, answers 500 to the stream
    ``format`` setting; a connection not asked for a format neither sets it nor fails on reading it.
    Each run on the one acquisition object arms the detector again (LiberTEM-live's meaning)."""
    frames = scan_frames(10)
    with libertem_live_simulator(tmp_path, frames, series=78) as (api_port, data_port), \
            live_ctx.make_connection("dectris").open(api_port=api_port, data_port=data_port, buffer_size=16,
                                                     frame_stack_size=5) as conn:
        aq = live_ctx.make_acquisition(conn=conn, nav_shape=NAV, controller=conn.get_active_controller())
        for _ in range(2):
            check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)


# -- stream V2 (CBOR) -----------------------------------------------------------------------------

@pytest.mark.parametrize("compression,dtype", [("bslz4", np.uint16), ("lz4", np.uint32), ("none", np.uint8)])
def test_cbor_stream_v2_active_with_stale_series(live_ctx, compression, dtype):
    pytest.importorskip("cbor2")
    frames = scan_frames(10, dtype)
    with DectrisSimulator(frames, compression=compression, stream_format="legacy", stale_images=3) as sim, \
            connect(live_ctx, sim, stream_format="cbor") as conn:
        for expected_stale in (6, 12):  # two series in a row; the run sets the stream format over REST
            aq = live_ctx.make_acquisition(conn=conn, nav_shape=NAV, frames_per_partition=16)
            check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
            assert conn.receiver.stale_messages == expected_stale
        assert sim.stream_config["format"] == "cbor"


def test_stream_format_read_from_the_detector_when_not_asked(live_ctx):
    """No ``stream_format`` given: the detector's (V2 here) is read, passively and actively, and never
    set; the simulator's format changed over REST between runs is followed in active mode."""
    pytest.importorskip("cbor2")
    frames = scan_frames(11)
    with DectrisSimulator(frames, stream_format="cbor", auto_arm=1) as sim, connect(live_ctx, sim) as conn:
        pending = conn.wait_for_acquisition(10.0)
        assert pending is not None and conn.receiver.stream_format == "cbor"
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV)
        check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
        puts = []
        real_put = SimplonClient.set_stream_config
        try:
            SimplonClient.set_stream_config = lambda self, name, value: puts.append(name) or real_put(self, name, value)
            for fmt in ("legacy", "cbor"):
                sim.stream_config["format"] = fmt  # changed on the detector, not by raytile
                aq = live_ctx.make_acquisition(conn=conn, nav_shape=NAV)
                check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
                assert conn.receiver.stream_format == fmt
        finally:
            SimplonClient.set_stream_config = real_put
        assert "format" not in puts and "mode" in puts


def test_cbor_message_layout_follows_the_documentation():
    """A V2 image message decoded with plain cbor2 (no raytile code): the documented tags and fields."""
    cbor2 = pytest.importorskip("cbor2")
    from raytile.live.detectors.dectris import stream_v2

    frame = scan_frames(11)[0]
    data, _ = encode_image(frame, "bslz4")
    msg = cbor2.loads(stream_v2.image_message(5, 7, frame, "bslz4", data))
    assert msg["type"] == "image" and msg["series_id"] == 5 and msg["image_id"] == 7
    array = msg["data"]["threshold_1"]
    assert isinstance(array, cbor2.CBORTag) and array.tag == 40  # multi-dimensional array, row-major
    dims, typed = array.value
    assert list(dims) == list(SIG) and typed.tag == 69  # uint16, little endian
    assert typed.value.tag == 56500 and list(typed.value.value[:2]) == ["bslz4", 2]
    import bitshuffle
    plain = bitshuffle.decompress_lz4(np.frombuffer(typed.value.value[2][12:], np.uint8), (frame.size,),
                                      np.dtype(np.uint16), 8192 // 2)
    assert np.array_equal(plain.reshape(SIG), frame)
    with pytest.raises(AcquisitionError, match="not CBOR"):
        stream_v2.parse_message(b"\xff\x00junk", "test")


# -- the images' layouts, parsed once each ------------------------------------------------------------

def test_image_info_parser_equals_a_fresh_parse_and_never_caches_a_bad_part():
    from raytile.live.detectors.dectris.stream_v1 import ImageInfoParser, parse_image_info

    parse = ImageInfoParser("x", max_layouts=3)
    parts = [b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint16", "encoding": "bs16-lz4<", "size": 917}',
             b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint16", "encoding": "bs16-lz4<", "size": 1}',
             b'{"size": 5, "htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint16", "encoding": "bs16-lz4<"}',
             b'{"htype":"dimage_d-1.0","shape":[48,32],"type":"uint16","encoding":"bs16-lz4<","size" : 70}',
             b'{"htype": "dimage_d-1.0", "shape": [32, 48], "type": "uint16", "encoding": "bs16-lz4<", "size": 917}',
             b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint32", "encoding": "bs32-lz4<", "size": 917}',
             b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint8", "encoding": "lz4<", "size": 917}',
             b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint16", "encoding": "<"}',
             b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint16", "encoding": "bs16-lz4<", "size": 917}']
    for _ in range(2):  # second time round from the cache (or, past max_layouts, parsed again)
        for part in parts:
            assert parse(part) == parse_image_info(part, "x")
    assert len(parse._layouts) <= 3
    first = ImageInfoParser("x")
    assert first(parts[0]) is first(parts[1])  # same layout, another size: the cached one
    # a part that does not parse fails every time, also where a valid one with the same key was cached
    for bad in [b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint16", "encoding": "bs16-lz4<", "size": 01}',
                b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "uint16", "encoding": "bs16-lz4<", "size": 1,}',
                b'{"htype": "dimage_d-1.0", "shape": [48, 32], "type": "float16", "encoding": "<", "size": 1}']:
        for _ in range(2):
            with pytest.raises(AcquisitionError):
                first(bad)


def test_receiver_layout_changes_between_series_equal_numpy():
    """Two series on one connection, uint16 then uint32 frames of another shape, from a hand-made PUSH
    sender: each decodes to its frames (the layout cache keys on everything but the size)."""
    zmq = pytest.importorskip("zmq")
    from raytile.live.detectors.dectris import DectrisReceiver

    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    port = push.bind_to_random_port("tcp://127.0.0.1")
    rx = DectrisReceiver(f"tcp://127.0.0.1:{port}", frame_stack_size=5, slots=4, bytes_per_frame=1 << 14, timeout=5.0)
    rx.start()
    try:
        series = {1: scan_frames(3, np.uint16, nav=(3, 4)),
                  2: scan_frames(4, np.uint32, nav=(2, 3)).reshape(6, SIG[1], SIG[0])}
        for sid, frames in series.items():
            push.send_multipart(header_message(sid, {"nimages": len(frames), "trigger_mode": "exts"}))
            for i, frame in enumerate(frames):
                data, encoding = encode_image(frame, "bslz4")
                push.send_multipart(image_message(sid, i, data, encoding, frame.shape, frames.dtype))
            push.send_multipart(series_end_message(sid))
        for sid, frames in series.items():
            found = rx.wait_for_header(10.0)
            assert found is not None and found[0] == sid
            got = np.concatenate(list(rx.frames(len(frames))))
            assert got.dtype == frames.dtype and np.array_equal(got, frames)
    finally:
        rx.close()
        push.close()
        ctx.term()
