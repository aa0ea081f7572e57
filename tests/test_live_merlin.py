"""Live Merlin acquisitions against the simulator on 127.0.0.1: results equal numpy on the frames sent.

Every simulator is stopped by its context manager; every test is bounded by the receiver's timeout.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import numpy as np
import pytest
from _procs import stop_process
from _ray_udfs import SlowSumUDF

from raytile.common.errors import AcquisitionError, ConfigValidationError, DataSetException
from raytile.live import Hooks, LiveContext
from raytile.live.detectors.merlin import MerlinCommandError, MerlinControl, MerlinSimulator
from raytile.live.detectors.merlin.mpx import AcquisitionHeader
from raytile.live.nav_shape import determine_nav_shape
from raytile.udf import ApplyMasksUDF, SumSigUDF, SumUDF, masks

NAV, SIG = (8, 12), (32, 64)
MAX_VALUE = {"U08": 0xFF, "U16": 0xFFF, "U32": 0xFFFFFF, "R1": 1, "R6": 0x3F, "R12": 0xFFF}


def scan_frames(seed: int, mode: str = "U16", nav=NAV) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, MAX_VALUE[mode] + 1, size=(int(np.prod(nav)),) + SIG).astype(np.uint32)


@pytest.fixture(scope="module")
def live_ctx():
    return LiveContext(executor="inline")


@pytest.fixture
def live_ray_ctx(ray_context):
    """A LiveContext on the session's Ray workers."""
    return LiveContext(executor=ray_context.executor)


def connect(ctx, sim, **kwargs):
    return ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=sim.data_port,
                                              api_host="127.0.0.1", api_port=sim.api_port, **kwargs)


def check_sums(res, frames, nav=NAV):
    total, per_frame = res
    assert np.array_equal(total["intensity"].data, frames.sum(axis=0))
    assert np.array_equal(per_frame["intensity"].data, frames.sum(axis=(1, 2)).reshape(nav))


@pytest.mark.parametrize("mode", ["U08", "U16", "U32", "R1", "R6", "R12"])
def test_passive_equals_numpy(live_ctx, mode):
    frames = scan_frames(1, mode)
    with MerlinSimulator(frames, mode=mode, nav_shape=NAV) as sim, connect(live_ctx, sim) as conn:
        pending = conn.wait_for_acquisition(10.0)
        assert pending is not None and pending.nimages == frames.shape[0] and pending.nav_shape == NAV
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, frames_per_partition=16)
        assert aq.shape.nav.to_tuple() == NAV and aq.shape.sig.to_tuple() == SIG
        check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)


def test_passive_on_ray_with_roi(live_ray_ctx):
    frames = scan_frames(2)
    roi = np.zeros(NAV, bool)
    roi[2:5, 3:9] = True
    ring = masks.ring(16, 32, 4, 12, SIG)
    with MerlinSimulator(frames, mode="R12", nav_shape=NAV) as sim, connect(live_ray_ctx, sim) as conn:
        aq = live_ray_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0),
                                           frames_per_partition=8)
        total, rings = live_ray_ctx.run_udf(dataset=aq, roi=roi,
                                            udf=[SumUDF(dtype="int64"), ApplyMasksUDF(mask_factories=[lambda: ring])])
    picked = frames[roi.reshape(-1)]
    assert np.array_equal(total["intensity"].data, picked.sum(axis=0))
    expected = np.full(NAV, np.nan)
    expected[roi] = (picked * ring).sum(axis=(1, 2))
    got = rings["intensity"].data[..., 0]
    assert np.allclose(got[roi], expected[roi], rtol=1e-5)
    assert np.array_equal(rings["intensity"].valid_mask[..., 0], roi)


class StartOnReady(Hooks):
    """Active mode: arm and start through the control port once raytile is ready."""

    def __init__(self, api_port: int):
        self.api_port, self.calls = api_port, 0

    def on_ready_for_data(self, env):
        self.calls += 1
        with MerlinControl("127.0.0.1", self.api_port) as c:
            c.set("NUMFRAMESTOACQUIRE", int(np.prod(NAV)))
            c.cmd("STARTACQUISITION")


def test_active_mode_three_acquisitions_in_a_row(live_ctx):
    frames = scan_frames(3)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, triggered=True, acquisitions=3) as sim, \
            connect(live_ctx, sim) as conn:
        hooks = StartOnReady(sim.api_port)
        for _ in range(3):
            aq = live_ctx.make_acquisition(conn=conn, nav_shape=NAV, hooks=hooks)
            check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
        assert hooks.calls == 3 and sim.acquisitions_sent == 3


def test_passive_three_acquisitions_and_iter_damage_grows(live_ctx):
    frames = scan_frames(4)
    with MerlinSimulator(frames, mode="R12", nav_shape=NAV, acquisitions=3, frame_rate=2000) as sim, \
            connect(live_ctx, sim) as conn:
        for _ in range(3):
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0),
                                           frames_per_partition=8)
            done = [int(p.damage.data.sum()) for p in live_ctx.run_udf_iter(dataset=aq, udf=SumSigUDF())]
            assert done == sorted(done) and done[-1] == frames.shape[0] and len(done) > 1


def test_async_iteration(live_ctx):
    frames = scan_frames(5)

    async def consume(aq):
        last = None
        async for part in live_ctx.run_udf_iter(dataset=aq, udf=SumUDF(dtype="int64"), sync=False):
            last = part
        return last

    with MerlinSimulator(frames, mode="U16", nav_shape=NAV) as sim, connect(live_ctx, sim) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=24)
        last = asyncio.run(consume(aq))
    assert np.array_equal(last.buffers[0]["intensity"].data, frames.sum(axis=0))


def test_backpressure_slow_udf_nothing_lost(live_ctx):
    """A sender far faster than the UDF: the receive slab bounds memory, every frame is counted once."""
    nav = (16, 16)
    frames = scan_frames(6, nav=nav)
    with MerlinSimulator(frames, mode="U16", nav_shape=nav) as sim, \
            connect(live_ctx, sim, frame_stack_size=4, slots=2) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=8)
        res = live_ctx.run_udf(dataset=aq, udf=[SlowSumUDF(dtype="int64"), SumSigUDF()])
        slab = conn.receiver.slab_bytes
    check_sums(res, frames, nav)
    assert slab == 2 * 4 * (384 + SIG[0] * SIG[1] * 2)  # 2 slots of 4 frames of header + U16 pixels


def test_sender_killed_mid_scan_is_an_error(live_ctx):
    frames = scan_frames(7)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, die_after=40) as sim, connect(live_ctx, sim) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=8)
        with pytest.raises(AcquisitionError, match="closed the connection after 40 of 96 frames"):
            live_ctx.run_udf(dataset=aq, udf=SumUDF())


def test_silent_sender_is_an_error_after_the_timeout(live_ctx):
    frames = scan_frames(8)
    # an abort with no next acquisition: the sender stops sending but keeps the connection open
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, abort_after=24) as sim, \
            connect(live_ctx, sim, timeout=0.5) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=8)
        with pytest.raises(AcquisitionError, match="no data for 0.5 s"):
            live_ctx.run_udf(dataset=aq, udf=SumUDF())


def test_abort_is_signalled_and_the_next_acquisition_works(live_ctx):
    frames = scan_frames(9)
    with MerlinSimulator(frames, mode="R12", nav_shape=NAV, abort_after=30, acquisitions=2) as sim, \
            connect(live_ctx, sim) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=8)
        with pytest.raises(AcquisitionError, match="aborted after 30 of 96 frames"):
            live_ctx.run_udf(dataset=aq, udf=SumUDF())
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=8)
        check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)


def test_continuous_acquisition_scan_by_scan_and_many_scans_in_one_run(live_ctx):
    frames = scan_frames(10)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, continuous=True) as sim, \
            connect(live_ctx, sim, frame_stack_size=5) as conn:  # stacks straddle scan boundaries
        pending = conn.wait_for_acquisition(10.0)
        assert pending.nimages == 0
        with pytest.raises(ConfigValidationError, match="continuous"):
            live_ctx.make_acquisition(conn=conn, pending_aq=pending)
        for _ in range(2):  # LiberTEM-live's meaning: each run consumes the next scan
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV)
            check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV, scans=30)
        scans_seen = set()
        for part in live_ctx.run_udf_iter(dataset=aq, udf=SumUDF(dtype="int64")):
            if part.damage.data.all():
                assert np.array_equal(part.buffers[0]["intensity"].data, frames.sum(axis=0))
                scans_seen.add(part.scan)
        assert part.scans_done == 30 and len(scans_seen) > 1
        assert conn.receiver.slab_bytes == 16 * 5 * (384 + SIG[0] * SIG[1] * 2)


def test_continuous_acquisition_each_run_on_one_acquisition_reads_the_next_scan(live_ctx):
    """LiberTEM-live's meaning: ``run_udf`` again on the same acquisition object reads the next scan of
    a continuous acquisition (here scans alternate between two sets of frames), 35 times, with the
    memory the runs leave behind flat (tracemalloc after run 5 and after run 35)."""
    frames = scan_frames(12, nav=(2,) + NAV)  # two scans' frames, sent one after the other, forever
    n = int(np.prod(NAV))
    with MerlinSimulator(frames, mode="U16", nav_shape=(2 * NAV[0], NAV[1]), continuous=True) as sim, \
            connect(live_ctx, sim, frame_stack_size=5) as conn:
        pending = conn.wait_for_acquisition(10.0)
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=NAV, frames_per_partition=16)
        tracemalloc.start()
        try:
            for k in range(35):
                scan = frames[(k % 2) * n:(k % 2 + 1) * n]
                check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), scan)
                if k == 4:
                    gc.collect()
                    early = tracemalloc.get_traced_memory()[0]
            gc.collect()
            late = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert conn.receiver.frames_received >= 35 * n  # (the receiver reads ahead into its slab)
    print(f"traced memory after run 5: {early / 1e6:.2f} MB, after run 35: {late / 1e6:.2f} MB")
    assert late < early + 256 * 1024, (early, late)  # flat: nothing kept per run


def test_a_second_run_on_an_acquisition_being_read_is_refused(live_ctx):
    """One run at a time on an acquisition: a second one while the first reads it fails, naming why;
    after the first ended, the next run reads the next scan."""
    frames = scan_frames(13)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, continuous=True, frame_rate=2000) as sim, \
            connect(live_ctx, sim) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=NAV,
                                       frames_per_partition=8)
        run = iter(live_ctx.run_udf_iter(dataset=aq, udf=SumUDF(dtype="int64")))
        next(run)
        with pytest.raises(DataSetException, match="being read by a run"):
            live_ctx.run_udf(dataset=aq, udf=SumUDF(dtype="int64"))
        for part in run:
            pass
        assert np.array_equal(part.buffers[0]["intensity"].data, frames.sum(axis=0))
        check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), frames)


def test_control_port_commands():
    frames = scan_frames(11)
    with MerlinSimulator(frames, mode="R6", nav_shape=NAV) as sim, MerlinControl("127.0.0.1", sim.api_port) as c:
        assert c.get("IMAGEX") == b"64" and c.get("COUNTERDEPTH") == b"6"
        c.set("NUMFRAMESTOACQUIRE", 17)
        assert c.get("NUMFRAMESTOACQUIRE") == b"17"
        with pytest.raises(MerlinCommandError, match="Unrecognised Command"):
            c.cmd("FLYTOTHEMOON")


def test_bad_input(live_ctx):
    with pytest.raises(ConfigValidationError, match="'detector_type' 'k3'"):
        live_ctx.make_connection("k3")
    with pytest.raises(ConfigValidationError, match="'recovery_strategy'"):
        live_ctx.make_connection("merlin").open(recovery_strategy="pray")
    with pytest.raises(AcquisitionError, match="cannot connect"):
        live_ctx.make_connection("merlin").open(data_port=1)


def test_nav_shape_rules():
    assert determine_nav_shape(96, (-1, 12)) == (8, 12)
    assert determine_nav_shape(64) == (8, 8)
    assert determine_nav_shape(96, None, detector_shape=(8, 12)) == (8, 12)
    assert determine_nav_shape(96, (-1, 12), hook=lambda env: (12, 8)) == (12, 8)
    assert determine_nav_shape(96, (4, 24), hook=lambda env: (12, 8)) == (4, 24)  # a concrete shape wins
    with pytest.raises(ConfigValidationError, match="not a square"):
        determine_nav_shape(96)
    assert determine_nav_shape(96, (10, 10)) == (10, 10)  # as given, as in LiberTEM-live: the run is cancelled
    with pytest.raises(ConfigValidationError, match="holds 100 frames"):
        determine_nav_shape(96, None, detector_shape=(10, 10))
    header = AcquisitionHeader.make(96, frames_per_trigger=12)
    assert header.nav_shape == (8, 12) and header.nimages == 96


def test_cli_sim_and_run(tmp_path):
    """`raytile live sim merlin` in a subprocess, `raytile live run merlin` against it: the .npz equals numpy."""
    import re
    import subprocess
    import sys

    from raytile.cli import main

    sim = subprocess.Popen([sys.executable, "-m", "raytile.cli", "live", "sim", "merlin", "--mode", "R12",
                            "--nav-shape", "8,12", "--sig-shape", "32,64", "--data-port", "0", "--api-port", "0"],
                           stdout=subprocess.PIPE, text=True)
    try:
        line = sim.stdout.readline()
        data_port, api_port = re.search(r"data 127.0.0.1:(\d+), control 127.0.0.1:(\d+)", line).groups()
        out = tmp_path / "live.npz"
        assert main(["live", "run", "merlin", "--udf", "sum,sumsig", "--data-port", data_port, "--api-port",
                     api_port, "--executor", "inline", "--out", str(out)]) == 0
    finally:
        stop_process(sim)
    frames = np.random.default_rng(0).integers(0, 0xFFF + 1, size=(96, 32, 64))  # the simulator's synthetic frames
    got = np.load(out)
    assert np.allclose(got["sum_intensity"], frames.sum(axis=0))
    assert np.allclose(got["sumsig_intensity"], frames.sum(axis=(1, 2)).reshape(8, 12))


def _rss_mib(pid: int, key: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(f"{key}:"))


def _start_sim(*args: str):
    """``raytile live sim merlin --mode U16 *args`` on free ports: the process and its first line."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "raytile.cli", "live", "sim", "merlin", "--mode", "U16", *args,
                             "--data-port", "0", "--api-port", "0"], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline()


def _resting_rss_mib(*args: str, key: str = "VmRSS") -> float:
    """The memory of a simulator started with ``args`` (a scan of one frame), at rest; it is stopped."""
    rest, _ = _start_sim(*args)
    try:
        return _rss_mib(rest.pid, key)
    finally:
        stop_process(rest)


def test_cli_sim_large_scan_repeats_one_stack_in_bounded_memory(tmp_path):
    """A 64x64 scan of 128x128 frames: the simulator makes 512 frames (16 MiB, one stack) and sends them
    in a cycle; its memory above a simulator of one frame stays within 2 stacks (it held the whole scan,
    +380 MiB, before), and a run over the scan equals numpy on the cycled frames."""
    import re

    from raytile.cli import main

    resting = _resting_rss_mib("--nav-shape", "1,1", "--sig-shape", "128,128")
    sim, line = _start_sim("--nav-shape", "64,64", "--sig-shape", "128,128")
    try:
        assert "4096 frames (512 distinct, repeated)" in line, line
        assert _rss_mib(sim.pid) - resting < 2 * 16, (_rss_mib(sim.pid), resting)
        data_port, api_port = re.search(r"data 127.0.0.1:(\d+), control 127.0.0.1:(\d+)", line).groups()
        out = tmp_path / "live.npz"
        assert main(["live", "run", "merlin", "--udf", "sum,sumsig", "--data-port", data_port, "--api-port",
                     api_port, "--executor", "inline", "--out", str(out)]) == 0
        assert _rss_mib(sim.pid) - resting < 2 * 16
    finally:
        stop_process(sim)
    stack = np.random.default_rng(0).integers(0, 0xFFF + 1, size=(512, 128, 128))  # the synthetic frames
    frames = np.concatenate([stack] * 8)
    got = np.load(out)
    assert np.allclose(got["sum_intensity"], frames.sum(axis=0))
    assert np.allclose(got["sumsig_intensity"], frames.sum(axis=(1, 2)).reshape(64, 64))


def test_cli_sim_replays_a_file_in_bounded_memory(tmp_path):
    """``--dataset``: a 32x64 scan of 128x128 frames in a .npy file (64 MiB) is read as it is sent: the
    simulator's memory above a resting one stays under one 16 MiB stack (it loaded and encoded the whole
    file, +228 MiB of anonymous memory, before), and a run over the replayed scan equals numpy on the file."""
    import re

    from raytile.cli import main

    frames = np.random.default_rng(3).integers(0, 0xFFF + 1, size=(32, 64, 128, 128)).astype(np.uint16)
    np.save(tmp_path / "scan.npy", frames)
    np.save(tmp_path / "one.npy", frames[:1, :1])
    resting = _resting_rss_mib("--dataset", str(tmp_path / "one.npy"), "--format", "npy", key="RssAnon")
    sim, line = _start_sim("--dataset", str(tmp_path / "scan.npy"), "--format", "npy")
    try:
        assert "2048 frames of 128x128" in line, line
        data_port, api_port = re.search(r"data 127.0.0.1:(\d+), control 127.0.0.1:(\d+)", line).groups()
        out = tmp_path / "live.npz"
        assert main(["live", "run", "merlin", "--udf", "sum,sumsig", "--data-port", data_port, "--api-port",
                     api_port, "--executor", "inline", "--out", str(out)]) == 0
        # anonymous memory: the file's pages the reader maps are page cache, not the simulator's own
        assert _rss_mib(sim.pid, "RssAnon") - resting < 16, (_rss_mib(sim.pid, "RssAnon"), resting)
    finally:
        stop_process(sim)
    got = np.load(out)
    assert np.array_equal(got["sum_intensity"], frames.sum(axis=(0, 1), dtype=np.float64))
    assert np.allclose(got["sumsig_intensity"], frames.sum(axis=(2, 3)), rtol=1e-6)  # float32 sums


def test_simulator_num_frames_cycles_the_given_frames(live_ctx):
    """``num_frames`` beyond the frames given: they are sent again in a cycle, one acquisition of 40."""
    frames = scan_frames(14, nav=(2, 7))
    with MerlinSimulator(frames, mode="U16", nav_shape=(5, 8), num_frames=40) as sim, connect(live_ctx, sim) as conn:
        pending = conn.wait_for_acquisition(10.0)
        assert pending.nimages == 40
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, frames_per_partition=16)
        cycled = frames[np.arange(40) % 14]
        check_sums(live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]), cycled, nav=(5, 8))
    with pytest.raises(ConfigValidationError, match="num_frames"):
        MerlinSimulator(frames, num_frames=0)


def test_frames_come_cut_on_partition_boundaries(live_ctx):
    """With ``batch`` the receiver decodes stacks (5 frames, straddling scans) straight into arrays cut where
    the stream's partitions are (40, 40, 16 per scan of 96): the stream then hands them on without a copy."""
    frames = scan_frames(12)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, continuous=True) as sim, \
            connect(live_ctx, sim, frame_stack_size=5) as conn:
        conn.wait_for_acquisition(10.0)
        got = list(conn.receiver.frames(2 * 96, np.uint16, batch=(40, 96)))
    assert [len(b) for b in got] == [40, 40, 16, 40, 40, 16]
    assert all(b.flags.c_contiguous and b.dtype == np.uint16 for b in got)
    assert np.array_equal(np.concatenate(got), np.concatenate([frames, frames]))


def test_default_partitions_of_a_live_acquisition_are_a_quarter_scan_and_results_equal_numpy(live_ctx):
    """Without ``frames_per_partition`` a live scan is cut into 4 partitions (a file's stream: 8), at
    most 32 MiB of raw frames each: 256 frames of 256x256 uint16 for a 32x32 scan, LiberTEM-live's
    Merlin default. The receiver cuts its arrays there too (``partition_batches``, no copy), every
    partial result holds whole partitions, and the sums equal numpy."""
    from raytile.live.receiver import live_frames_per_partition, partition_batches

    assert live_frames_per_partition((32, 32), (256, 256), np.uint16) == 256  # a file's stream: 128
    assert live_frames_per_partition((64, 64), (512, 512), np.uint16) == 64   # 32 MiB of 512 KiB frames
    assert live_frames_per_partition((2, 3), (256, 256), np.uint16) == 2
    assert partition_batches(NAV, SIG, np.uint16) == (24, 96)
    frames = scan_frames(13)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV) as sim, connect(live_ctx, sim) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0))
        assert aq.frames_per_partition == 24 and aq.num_partitions == 4
        parts = list(live_ctx.run_udf_iter(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()]))
    assert all(int(p.damage.data.sum()) % 24 == 0 for p in parts) and parts[-1].damage.data.all()
    check_sums(parts[-1].buffers, frames)


def test_receiver_reuses_its_arrays_only_once_nothing_holds_them(live_ctx):
    """``ReusedArrays``: an array (or a view of it, or a memoryview) still held is never handed out
    again; a released one is. Through the receiver: arrays the consumer keeps hold the frames sent,
    equal to numpy, while arrays it dropped were written again (fewer arrays made than yielded)."""
    from raytile.live.receiver import ReusedArrays

    dt = np.dtype(np.uint16)
    arrays = ReusedArrays(keep=4)
    a = arrays.take((3, 2), dt)
    view = a[1:]
    del a
    b = arrays.take((3, 2), dt)
    assert b.base is None and not np.shares_memory(b, view) and arrays.reused == 0
    del view
    mem = memoryview(b)
    del b
    c = arrays.take((3, 2), dt)
    assert not np.shares_memory(c, np.asarray(mem)) and arrays.reused == 1  # the first one, free again
    assert arrays.take((2, 2), dt).shape == (2, 2) and arrays.made == 3      # another shape: a new one
    frames = scan_frames(14)
    kept, addresses = [], set()
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, continuous=True) as sim, \
            connect(live_ctx, sim, frame_stack_size=5) as conn:
        conn.wait_for_acquisition(10.0)
        for i, batch in enumerate(conn.receiver.frames(4 * 96, np.uint16, batch=(16, 96))):
            addresses.add(batch.__array_interface__["data"][0])
            if i % 3 == 0:
                kept.append((i, batch))  # held: must not be written again
            del batch
    expected = np.concatenate([frames] * 4).astype(np.uint16).reshape(-1, 16, *SIG)
    assert all(np.array_equal(b, expected[i]) for i, b in kept) and len(kept) == 8
    assert len(addresses) < 24
