"""raytile.live against LiberTEM-live 0.3's own behaviour, on the same inputs: nav-shape rules and their
error types, the memory detector, the monitor UDFs, a short acquisition cancelling its run, Merlin's
``drain``, an unclosed connection, DECTRIS chunks with an all-zero header.

LiberTEM-live (a test dependency) is the reference where it runs without hardware; its simulators are
the senders where one is needed. Every simulator here is on 127.0.0.1 and stopped by its context
manager or ``finally``; every wait is bounded.
"""

from __future__ import annotations

import gc
import os
import struct
import time
import weakref

import numpy as np
import pytest

from raytile.common.errors import AcquisitionError, UDFRunCancelled
from raytile.live import Hooks, LiveContext
from raytile.live.detectors.base.acquisition import determine_nav_shape
from raytile.live.detectors.base.connection import PendingAcquisition
from raytile.live.detectors.dectris import DectrisSimulator
from raytile.live.detectors.merlin import MerlinControl, MerlinSimulator
from raytile.live.udf.monitor import PartitionMonitorUDF, SignalMonitorUDF
from raytile.live.udf.record import RecordUDF
from raytile.udf import SumSigUDF, SumUDF

ltl_acq = pytest.importorskip("libertem_live.detectors.base.acquisition",
                              reason="LiberTEM-live is the reference (a test dependency)")
ltl_conn = pytest.importorskip("libertem_live.detectors.base.connection")

NAV, SIG = (8, 12), (32, 64)


class Pending(PendingAcquisition):
    def __init__(self, nimages, nav_shape=None):
        self._n, self._nav = nimages, nav_shape

    @property
    def nimages(self):
        return self._n

    @property
    def nav_shape(self):
        return self._nav


class LtPending(ltl_conn.PendingAcquisition):
    def __init__(self, nimages, nav_shape=None):
        self._n, self._nav = nimages, nav_shape

    @property
    def nimages(self):
        return self._n

    @property
    def nav_shape(self):
        return self._nav


def _hooks(hook_result, base):
    class H(base):
        def on_determine_nav_shape(self, env):
            return hook_result
    return H()


def _outcome(fn):
    try:
        return fn()
    except Exception as e:  # the type LiberTEM-live's caller would catch
        return ValueError if isinstance(e, ValueError) else RuntimeError if isinstance(e, RuntimeError) else type(e)


@pytest.mark.parametrize("nimages,hint,hook,detector", [
    (128 * 128 + 1, None, None, None), (128 * 128, None, None, None), (128 * 128, (0, 1, 2, -1), None, None),
    (128 * 128, (-1, 17), None, None), (128 * 128, (-1, -1, -1), None, None), (128 * 128, (-1, 64), None, None),
    (128 * 128, (4, -1, -1), None, None), (17 * 29, (-1, 17), None, None), (1, (-1, -1), None, None),
    (96, None, None, (8, 12)), (96, (-1, 12), (12, 8), None), (96, None, (-1, 8), None), (96, None, (10, 10), None),
    (96, (-1, 12), None, (4, 24)),
])
def test_determine_nav_shape_as_libertem_live(nimages, hint, hook, detector):
    """Same shape, or the same exception type (ValueError / RuntimeError), as LiberTEM-live's function."""
    from libertem_live.hooks import Hooks as LtHooks

    ours = _outcome(lambda: determine_nav_shape(hooks=_hooks(hook, Hooks), pending_aq=Pending(nimages, detector),
                                                controller=None, shape_hint=hint))
    theirs = _outcome(lambda: ltl_acq.determine_nav_shape(hooks=_hooks(hook, LtHooks),
                                                          pending_aq=LtPending(nimages, detector),
                                                          controller=None, shape_hint=hint))
    assert ours == (tuple(theirs) if isinstance(theirs, tuple) else theirs)


def test_nav_shape_messages_start_with_libertem_lives_words():
    with pytest.raises(RuntimeError, match=r"^Can't handle non-square scans"):
        determine_nav_shape(hooks=Hooks(), pending_aq=Pending(5), controller=None, shape_hint=None)
    with pytest.raises(ValueError, match=r"^shape cannot contain zeros$"):
        determine_nav_shape(hooks=Hooks(), pending_aq=Pending(16), controller=None, shape_hint=(0, -1))
    with pytest.raises(ValueError, match=r"^number of images \(16\) must be divisible"):
        determine_nav_shape(hooks=Hooks(), pending_aq=Pending(16), controller=None, shape_hint=(-1, 5))


def _lt_live_context():
    from libertem.executor.inline import InlineJobExecutor
    from libertem.viz.base import Dummy2DPlot
    from libertem_live.api import LiveContext as LtLiveContext

    return LtLiveContext(executor=InlineJobExecutor(), plot_class=Dummy2DPlot)


class CountingHooks(Hooks):
    def __init__(self):
        self.navs = []

    def on_ready_for_data(self, env):
        self.navs.append(tuple(env.aq.shape.nav))


def test_memory_detector_as_libertem_live():
    """make_connection("memory"): results equal LiberTEM-live's on the same array; the ready hook runs once per
    run in active mode and never in passive mode, as there."""
    from libertem.udf.sum import SumUDF as LtSumUDF
    from libertem_live.api import Hooks as LtHooks
    from libertem_live.udf.monitor import SignalMonitorUDF as LtSignalMonitorUDF

    class LtCounting(LtHooks):
        def __init__(self):
            self.navs = []

        def on_ready_for_data(self, env):
            self.navs.append(tuple(env.aq.shape.nav))

    data = np.random.default_rng(1).random((6, 7, 8, 9))
    ours, theirs = LiveContext(executor="inline"), _lt_live_context()
    for passive in (False, True):
        hooks, lt_hooks = CountingHooks(), LtCounting()
        with ours.make_connection("memory").open(data=data) as conn:
            pending = conn.wait_for_acquisition(1.0) if passive else None
            aq = ours.make_acquisition(conn=conn, hooks=hooks, pending_aq=pending)
            res = ours.run_udf(dataset=aq, udf=[SumUDF(), SignalMonitorUDF()])
        with theirs.make_connection("memory").open(data=data) as conn:
            pending = conn.wait_for_acquisition(1.0) if passive else None
            aq = theirs.make_acquisition(conn=conn, hooks=lt_hooks, pending_aq=pending)
            ref = theirs.run_udf(dataset=aq, udf=[LtSumUDF(), LtSignalMonitorUDF()])
        assert hooks.navs == lt_hooks.navs == ([] if passive else [(6, 7)])
        np.testing.assert_allclose(res[0]["intensity"].data, ref[0]["intensity"].data)
        np.testing.assert_array_equal(res[1]["intensity"].data, ref[1]["intensity"].data)
        np.testing.assert_array_equal(res[1]["intensity"].data, data[-1, -1])


def test_memory_detector_extra_kwargs_and_record(tmp_path):
    """``extra_kwargs`` reach LiberTEM's memory data set (``datashape``: zeros of that shape, ``num_partitions``);
    RecordUDF at LiberTEM-live's path writes the frames."""
    ctx = LiveContext(executor="inline")
    with ctx.make_connection("memory").open(data=None, extra_kwargs={"datashape": [4, 4, 8, 8]}) as conn:
        aq = ctx.make_acquisition(conn=conn)
        assert tuple(aq.shape) == (4, 4, 8, 8)
        assert np.array_equal(ctx.run_udf(dataset=aq, udf=SumUDF())["intensity"].data, np.zeros((8, 8)))
    data = np.random.default_rng(2).random((5, 6, 7, 8))
    path = os.path.join(tmp_path, "rec.npy")
    with ctx.make_connection("memory").open(data=data, extra_kwargs={"num_partitions": 3}) as conn:
        aq = ctx.make_acquisition(conn=conn)
        assert len(list(aq.get_partitions())) == 3
        ctx.run_udf(dataset=aq, udf=RecordUDF(path))
    assert np.array_equal(np.load(path), data)


def test_monitor_udfs_as_libertem_live():
    """SignalMonitorUDF / PartitionMonitorUDF on a memory data set: LiberTEM-live's results (inline, 4 partitions)."""
    from libertem.api import Context as LtContext
    from libertem.executor.inline import InlineJobExecutor
    from libertem.io.dataset.memory import MemoryDataSet as LtMemoryDataSet
    from libertem_live.udf.monitor import PartitionMonitorUDF as LtPartitionMonitorUDF
    from libertem_live.udf.monitor import SignalMonitorUDF as LtSignalMonitorUDF

    from raytile import Context

    data = np.random.default_rng(3).random((8, 6, 5, 7)).astype(np.float32)
    ref = LtContext(executor=InlineJobExecutor()).run_udf(
        dataset=LtMemoryDataSet(data=data, num_partitions=4),
        udf=[LtSignalMonitorUDF(), LtPartitionMonitorUDF(), LtPartitionMonitorUDF(dtype=np.complex128)])
    res = Context(executor="inline").run_udf(
        dataset=Context(executor="inline").load("memory", data=data, num_partitions=4),
        udf=[SignalMonitorUDF(), PartitionMonitorUDF(), PartitionMonitorUDF(dtype=np.complex128)])
    for ours, theirs in zip(res, ref):
        assert ours["intensity"].data.dtype == theirs["intensity"].data.dtype
        np.testing.assert_allclose(ours["intensity"].data, theirs["intensity"].data, rtol=1e-6)
    np.testing.assert_allclose(res[1]["intensity"].data, data[6:].sum(axis=(0, 1)), rtol=1e-5)  # the last partition


def test_prepare_acquisition_is_removed_as_in_libertem_live():
    with pytest.raises(RuntimeError, match="make_connection") as ours:
        LiveContext(executor="inline").prepare_acquisition("merlin")
    with pytest.raises(RuntimeError) as theirs:
        _lt_live_context().prepare_acquisition("merlin")
    assert str(theirs.value).split(".")[0] in str(ours.value)


def _frames(seed, dtype=np.uint16, nav=NAV):
    return np.random.default_rng(seed).integers(0, 4000, size=(int(np.prod(nav)),) + SIG).astype(dtype)


class StartOnReady(Hooks):
    def __init__(self, api_port, n):
        self.api_port, self.n = api_port, n

    def on_ready_for_data(self, env):
        with MerlinControl("127.0.0.1", self.api_port) as c:
            c.set("NUMFRAMESTOACQUIRE", self.n)
            c.cmd("STARTACQUISITION")


def test_short_active_merlin_acquisition_cancels_the_run():
    """LiberTEM-live cancels a run whose acquisition has fewer images than nav_shape (UDFRunCancelled); the
    connection then runs the next acquisition."""
    frames = _frames(4)
    ctx = LiveContext(executor="inline")
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, triggered=True, acquisitions=2) as sim, \
            ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=sim.data_port,
                                               api_host="127.0.0.1", api_port=sim.api_port) as conn:
        hooks = StartOnReady(sim.api_port, frames.shape[0])
        aq = ctx.make_acquisition(conn=conn, nav_shape=(NAV[0] + 1, NAV[1]), hooks=hooks)
        with pytest.raises(UDFRunCancelled) as info:
            ctx.run_udf(dataset=aq, udf=SumUDF())
        assert isinstance(info.value, AcquisitionError) and "nav_shape needs 108" in str(info.value)
        aq = ctx.make_acquisition(conn=conn, nav_shape=NAV, hooks=hooks)
        res = ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()])
    assert np.array_equal(res[0]["intensity"].data, frames.sum(axis=0))
    assert np.array_equal(res[1]["intensity"].data, frames.sum(axis=(1, 2)).reshape(NAV))


def test_short_passive_dectris_series_cancels_the_run():
    """A passive series with fewer images than a concrete nav_shape is accepted by make_acquisition and its run
    is cancelled when the series ends (LiberTEM-live's test_cancellation); the next series runs."""
    frames = _frames(5)
    ctx = LiveContext(executor="inline")
    with DectrisSimulator(frames, compression="bslz4") as sim, \
            ctx.make_connection("dectris").open(api_host="127.0.0.1", api_port=sim.api_port, data_host="127.0.0.1",
                                                data_port=sim.data_port, buffer_size=16) as conn:
        conn.get_api_client().send_detector_command("arm")
        pending = conn.wait_for_acquisition(10.0)
        aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=(NAV[0], NAV[1] + 1))
        with pytest.raises(UDFRunCancelled, match="ended after 96 of 104 frames"):
            ctx.run_udf(dataset=aq, udf=SumUDF())
        conn.get_api_client().send_detector_command("arm")
        pending = conn.wait_for_acquisition(10.0)
        aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV)
        res = ctx.run_udf(dataset=aq, udf=SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, frames.sum(axis=0))


def test_merlin_drain_skips_garbage_before_the_acquisition(tmp_path):
    """LiberTEM-live's Merlin simulator with garbage=True sends junk on connect; drain=True reads past it and the
    result equals numpy; without drain the run fails on the junk, as LiberTEM-live's does."""
    sim_mod = pytest.importorskip("libertem_live.detectors.merlin.sim")
    from raytile.io.testing.mib import write_mib

    nav, sig = (4, 6), (16, 16)
    frames = np.random.default_rng(6).integers(0, 255, size=(24,) + sig).astype(np.uint8)
    hdr = write_mib(tmp_path / "scan", frames, mode="U08", nav_shape=nav)
    text = open(hdr).read()
    with open(hdr, "w") as f:  # LiberTEM-live's header parser takes no empty line after "End"
        f.write(text.rstrip("\n"))
    sim = sim_mod.CameraSim(path=str(hdr), nav_shape=nav, host="127.0.0.1", data_port=0, control_port=0,
                            trigger_port=0, wait_trigger=True, garbage=True,
                            initial_params={"IMAGEX": "16", "IMAGEY": "16", "COUNTERDEPTH": "6"})
    sim.start()
    try:
        sim.wait_for_listen()
        (_, data_port), (_, api_port), trigger = (sim.server_t.sockname, sim.control_t.sockname,
                                                  sim.trigger_t.sockname)

        class Trigger(Hooks):
            def on_ready_for_data(self, env):
                with MerlinControl("127.0.0.1", api_port) as c:
                    c.cmd("STARTACQUISITION")
                with sim_mod.TriggerClient(*trigger) as t:
                    t.trigger()

        ctx = LiveContext(executor="inline")
        with ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=data_port, api_host="127.0.0.1",
                                                api_port=api_port, drain=True, timeout=10.0) as conn:
            aq = ctx.make_acquisition(conn=conn, nav_shape=nav, hooks=Trigger())
            res = ctx.run_udf(dataset=aq, udf=SumUDF(dtype="int64"))
            assert conn.receiver.drained_bytes == len(b"GARBAGE" * 3 * 1024)
        assert np.array_equal(res["intensity"].data, frames.sum(axis=0))
    finally:
        sim.stop()


def test_unclosed_connection_releases_its_socket_when_collected():
    """A connection the user drops without close() stops its receiver when it is collected, so the sender sees
    the socket closed (LiberTEM-live's simulator could otherwise not stop)."""
    ctx = LiveContext(executor="inline")
    with MerlinSimulator(_frames(7), mode="U16", nav_shape=NAV) as sim:
        conn = ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=sim.data_port,
                                                  api_host="127.0.0.1", api_port=sim.api_port)
        rx = conn.receiver
        assert rx.running
        del conn
        gc.collect()
        deadline = time.monotonic() + 10.0
        while rx.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not rx.running


def test_finished_run_frees_an_unclosed_connection_by_reference_counting():
    """LiberTEM-live's test_dwelltime runs on a Merlin connection it never closes; when the test returns,
    reference counting frees the acquisition and the connection, whose socket closes, so the simulator
    can stop. A finished raytile run holds no reference cycle around its data set: with the cycle
    collector off, the connection goes as soon as the run's objects do, and its receiver stops."""
    frames = _frames(9)
    ctx = LiveContext(executor="inline")

    def run(sim):
        conn = ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=sim.data_port,
                                                  api_host="127.0.0.1", api_port=sim.api_port)
        aq = ctx.make_acquisition(conn=conn, nav_shape=NAV)
        res = ctx.run_udf(dataset=aq, udf=SumUDF(dtype="int64"))
        assert np.array_equal(res["intensity"].data, frames.sum(axis=0))
        return weakref.ref(conn), conn.receiver

    with MerlinSimulator(frames, mode="U16", nav_shape=NAV) as sim:
        gc.collect()
        gc.disable()
        try:
            conn_ref, rx = run(sim)
            deadline = time.monotonic() + 10.0  # the run's threads let go of it as they end
            while (conn_ref() is not None or rx.running) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert conn_ref() is None, "the finished run keeps the connection in a reference cycle"
            assert not rx.running
        finally:
            gc.enable()


def test_bitshuffle_chunks_with_an_all_zero_header_decode():
    """libertem_dectris's mocked sender zeroes the 12-byte bitshuffle-LZ4 header (LiberTEM-rs never reads it):
    such chunks get the header bitshuffle's encoder wrote and decode to the frame; real headers stay as sent."""
    bitshuffle = pytest.importorskip("bitshuffle")
    from raytile.io import bslz4
    from raytile.live.detectors.dectris.receiver import fill_zero_headers

    bslz4.check_decoder()
    frames = np.random.default_rng(8).poisson(3.0, size=(3, 40, 50)).astype(np.uint16)
    nbytes = frames[0].nbytes
    # the HDF5 filter's chunk: uncompressed size and block size in bytes, then bitshuffle's blocks; frame 1
    # with a block size of its own (256 elements), frames 0 and 2 with bitshuffle's default (block_size=0)
    blocks = [bitshuffle.compress_lz4(f, block_size=256 if i == 1 else 0) for i, f in enumerate(frames)]
    real_chunks = [struct.pack(">QI", nbytes, 512 if i == 1 else 8192) + bytes(b) for i, b in enumerate(blocks)]
    sizes = np.array([len(c) for c in real_chunks])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    real = np.frombuffer(b"".join(real_chunks), np.uint8)
    buf = real.copy()
    buf[offsets[0]:offsets[0] + 12] = 0  # as libertem_dectris's mock sends them
    buf[offsets[2]:offsets[2] + 12] = 0
    out = np.empty((3, nbytes), np.uint8)
    assert bslz4.decode_chunks(buf, offsets, sizes, np.zeros(3, np.bool_), bslz4.CODEC_BSLZ4, 2, out) != 0
    assert fill_zero_headers(buf, offsets, sizes, nbytes) == 2
    assert np.array_equal(buf, real)  # the header the filter writes; frame 1's own header untouched
    assert bslz4.decode_chunks(buf, offsets, sizes, np.zeros(3, np.bool_), bslz4.CODEC_BSLZ4, 2, out) == 0
    assert np.array_equal(out.view(np.uint16).reshape(frames.shape), frames)


def test_libertem_live_paths_map():
    """The LiberTEM-live names its suite and notebooks import map to raytile (``python -m raytile.compat.check``)."""
    from raytile.compat import find_unmapped, rewrite_imports

    source = "\n".join([
        "from libertem_live.api import LiveContext, Hooks",
        "from libertem_live.hooks import ReadyForDataEnv, DetermineNavShapeEnv",
        "from libertem_live.detectors.merlin import MerlinAcquisition, MerlinConnectionBuilder",
        "from libertem_live.detectors.merlin.acquisition import MerlinAcquisition",
        "from libertem_live.detectors.merlin.control import MerlinControl",
        "from libertem_live.detectors.dectris import DectrisAcquisition, DectrisConnectionBuilder",
        "from libertem_live.detectors.dectris.acquisition import DectrisAcquisition",
        "from libertem_live.detectors.memory import MemoryAcquisition, MemoryConnectionBuilder",
        "from libertem_live.detectors.base.acquisition import determine_nav_shape",
        "from libertem_live.detectors.base.connection import PendingAcquisition, DetectorConnection",
        "from libertem_live.detectors.common import UndeadException, cleanup_handle_dir, set_thread_name",
        "from libertem_live.udf.monitor import SignalMonitorUDF, PartitionMonitorUDF",
        "from libertem_live.udf.record import RecordUDF",
        "from libertem.exceptions import UDFRunCancelled, UDFException, ExecutorSpecException",
    ])
    assert find_unmapped(rewrite_imports(source)) == []


@pytest.mark.ray
def test_signal_monitor_on_ray_is_the_last_frame_in_scan_order(ray_context):
    """On Ray partitions merge as they finish; SignalMonitorUDF still gives LiberTEM-live's inline result (the last
    frame, and with an ROI the last frame in it), where LiberTEM-live's own depends on the merge order."""
    from libertem.api import Context as LtContext
    from libertem.executor.inline import InlineJobExecutor
    from libertem.io.dataset.memory import MemoryDataSet as LtMemoryDataSet
    from libertem_live.udf.monitor import SignalMonitorUDF as LtSignalMonitorUDF

    data = np.random.default_rng(9).random((8, 8, 6, 5))
    roi = np.ones((8, 8), bool)
    roi[7, 3:] = False
    lt = LtContext(executor=InlineJobExecutor())
    ctx = LiveContext(executor=ray_context.executor)
    with ctx.make_connection("memory").open(data=data, extra_kwargs={"num_partitions": 8}) as conn:
        for r in (None, roi):
            ref = lt.run_udf(dataset=LtMemoryDataSet(data=data, num_partitions=8), udf=LtSignalMonitorUDF(), roi=r)
            res = ctx.run_udf(dataset=ctx.make_acquisition(conn=conn), udf=SignalMonitorUDF(), roi=r)
            assert list(res) == ["intensity"]
            np.testing.assert_array_equal(res["intensity"].data, ref["intensity"].data)
    np.testing.assert_array_equal(ref["intensity"].data, data[7, 2])
