"""`raytile live sim dectris` in a subprocess on 127.0.0.1 (V1 and V2, passive and triggered), frames
the detector lost (counted, zero-filled or failing), and a DECTRIS series of many scans in one run
with flat memory. Results equal numpy on the frames sent; every process started here is stopped."""

from __future__ import annotations

import re
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from raytile.cli import main
from raytile.common.errors import AcquisitionError, ConfigValidationError
from raytile.live import Hooks, LiveContext
from raytile.live.detectors.dectris import DectrisSimulator, SimplonClient
from raytile.runtime.progress import ProgressReporter
from raytile.udf import SumSigUDF, SumUDF

from _procs import stop_process

pytest.importorskip("zmq")
pytest.importorskip("bitshuffle")

NAV, SIG = (8, 12), (32, 48)


def scan_frames(seed: int, dtype=np.uint16, n: int = 96) -> np.ndarray:
    rng = np.random.default_rng(seed)
    frames = rng.poisson(2.0, size=(n,) + SIG)
    frames[:, 3, :] = rng.integers(0, np.iinfo(dtype).max, size=SIG[1])
    return frames.astype(dtype)


class SimProcess:
    """``raytile live sim dectris ...`` in a subprocess; its ports from its first line; stopped on exit."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "raytile.cli", "live", "sim", "dectris",
                                      "--data-port", "0", "--api-port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def __enter__(self) -> "SimProcess":
        line = self.proc.stdout.readline()
        found = re.search(r"data 127.0.0.1:(\d+), REST 127.0.0.1:(\d+)", line)
        if found is None:
            self.__exit__()
            raise AssertionError(f"simulator did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        self.data_port, self.api_port = found.group(1), found.group(2)
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="module")
def live_ctx():
    return LiveContext(executor="inline")


@pytest.mark.parametrize("stream_format,compression", [("cbor", "bslz4"), ("legacy", "lz4")])
def test_cli_sim_passive_and_cli_run_equal_numpy(tmp_path, stream_format, compression):
    """A data set replayed by the simulator arming itself; `raytile live run dectris` saves what numpy says."""
    frames = scan_frames(1)
    np.save(tmp_path / "scan.npy", frames.reshape(NAV + SIG))
    out = tmp_path / "live.npz"
    with SimProcess("--dataset", str(tmp_path / "scan.npy"), "--format", "npy", "--stream-format", stream_format,
                    "--compression", compression, "--frame-rate", "5000") as sim:
        assert main(["live", "run", "dectris", "--udf", "sum,sumsig", "--nav-shape", "8,12", "--stream-format",
                     stream_format, "--data-port", sim.data_port, "--api-port", sim.api_port, "--executor", "inline",
                     "--timeout", "20", "--out", str(out)]) == 0
    got = np.load(out)
    assert np.array_equal(got["sum_intensity"], frames.sum(axis=0, dtype=np.float64))
    assert np.array_equal(got["sumsig_intensity"], frames.sum(axis=(1, 2)).reshape(NAV))
    assert int(got["frames_dropped"]) == 0


class TriggerOnReady(Hooks):
    def __init__(self, api_port: int):
        self.api_port = api_port

    def on_ready_for_data(self, env):
        SimplonClient("127.0.0.1", self.api_port).send_detector_command("trigger")


def test_cli_sim_triggered_active_mode_three_series(live_ctx, tmp_path):
    """Triggered: the simulator waits for arm (and, ints, the trigger) over REST; active mode arms it."""
    frames = scan_frames(2, np.uint32)
    np.save(tmp_path / "scan.npy", frames)
    with SimProcess("--dataset", str(tmp_path / "scan.npy"), "--format", "npy", "--triggered") as sim, \
            live_ctx.make_connection("dectris").open(api_port=int(sim.api_port), data_port=int(sim.data_port),
                                                     buffer_size=16) as conn:
        controller = conn.get_active_controller(trigger_mode="ints", compression="bslz4")
        for _ in range(3):
            aq = live_ctx.make_acquisition(conn=conn, controller=controller, nav_shape=NAV,
                                           hooks=TriggerOnReady(int(sim.api_port)))
            total, per_frame = live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()])
            assert np.array_equal(total["intensity"].data, frames.sum(axis=0, dtype=np.int64))
            assert np.array_equal(per_frame["intensity"].data, frames.sum(axis=(1, 2)).reshape(NAV))


def test_lost_frames_are_zeros_and_counted_through_the_cli(tmp_path):
    """The simulator never sends images 5, 40 and 95 (the last): zero frames in their places, counted."""
    frames = scan_frames(3)
    np.save(tmp_path / "scan.npy", frames)
    out = tmp_path / "live.npz"
    with SimProcess("--dataset", str(tmp_path / "scan.npy"), "--format", "npy", "--skip-images", "5,40,95") as sim:
        assert main(["live", "run", "dectris", "--udf", "sum,sumsig", "--nav-shape", "8,12", "--data-port",
                     sim.data_port, "--api-port", sim.api_port, "--executor", "inline", "--out", str(out)]) == 0
    expected = frames.copy()
    expected[[5, 40, 95]] = 0
    got = np.load(out)
    assert int(got["frames_dropped"]) == 3
    assert np.array_equal(got["sum_intensity"], expected.sum(axis=0, dtype=np.float64))
    assert np.array_equal(got["sumsig_intensity"], expected.sum(axis=(1, 2)).reshape(NAV))


def test_lost_frames_fail_the_run_with_on_dropped_fail(live_ctx):
    frames = scan_frames(4)
    with DectrisSimulator(frames, skip_images=(17, 18)) as sim, \
            live_ctx.make_connection("dectris").open(api_port=sim.api_port, data_port=sim.data_port, buffer_size=16,
                                                     on_dropped="fail") as conn:
        conn.get_api_client().send_detector_command("arm")
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=NAV)
        with pytest.raises(AcquisitionError, match=r"series 1 lost 2 frame\(s\) \(frames 17 to 18\)"):
            live_ctx.run_udf(dataset=aq, udf=SumUDF())
        assert conn.receiver.frames_dropped == 2
    with pytest.raises(ConfigValidationError, match="'on_dropped'"):
        live_ctx.make_connection("dectris").open(on_dropped="ignore", bytes_per_frame=1024)


def test_series_of_many_scans_scans_0_flat_memory(live_ctx):
    """scans=0: one run reads scans until the series ends (300 scans of 4x6 frames), per-scan results
    equal numpy, and the memory the run holds does not grow with the scans (measured with tracemalloc)."""
    nav, scans = (4, 6), 300
    frames = scan_frames(5, n=24)
    with DectrisSimulator(frames) as sim, \
            live_ctx.make_connection("dectris").open(api_port=sim.api_port, data_port=sim.data_port, buffer_size=4,
                                                     bytes_per_frame=8192, frame_stack_size=8) as conn:
        sim.config["nimages"] = scans * 24
        conn.get_api_client().send_detector_command("arm")
        pending = conn.wait_for_acquisition(10.0)
        assert pending.nimages == scans * 24
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=nav, scans=0)
        tracemalloc.start()
        try:
            held, complete = {}, 0
            for part in live_ctx.run_udf_iter(dataset=aq, udf=SumUDF(dtype="int64")):
                if part.damage.data.all():
                    assert np.array_equal(part.buffers[0]["intensity"].data, frames.sum(axis=0, dtype=np.int64))
                    complete += 1
                held[part.scans_done] = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert part.scans_done == scans and complete > 10
        assert conn.receiver.frames_received == scans * 24 and conn.receiver.frames_dropped == 0
    early = max(v for k, v in held.items() if 20 <= k < 60)
    late = max(v for k, v in held.items() if k >= scans - 40)
    print(f"traced memory: scans 20-60 {early / 1e6:.2f} MB, last 40 scans {late / 1e6:.2f} MB")
    assert late < early + 256 * 1024, (early, late)  # flat: no growth with the number of scans


def test_cbor_threshold_channels(live_ctx):
    """Stream V2 with two threshold channels: each connection reads the channel it names."""
    pytest.importorskip("cbor2")
    frames = scan_frames(6)
    with DectrisSimulator(frames, stream_format="cbor", channels=2) as sim:
        for channel, expected in ((None, frames), ("threshold_1", frames), ("threshold_2", frames // 2)):
            with live_ctx.make_connection("dectris").open(api_port=sim.api_port, data_port=sim.data_port,
                                                          buffer_size=16, stream_format="cbor",
                                                          channel=channel) as conn:
                aq = live_ctx.make_acquisition(conn=conn, nav_shape=NAV)
                total, per_frame = live_ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()])
            assert np.array_equal(total["intensity"].data, expected.sum(axis=0, dtype=np.int64))
            assert np.array_equal(per_frame["intensity"].data, expected.sum(axis=(1, 2)).reshape(NAV))
        with live_ctx.make_connection("dectris").open(api_port=sim.api_port, data_port=sim.data_port, buffer_size=16,
                                                      stream_format="cbor", channel="threshold_3") as conn:
            aq = live_ctx.make_acquisition(conn=conn, nav_shape=NAV)
            with pytest.raises(AcquisitionError, match=r"no channel 'threshold_3'; it has \['threshold_1', "
                                                       r"'threshold_2'\]"):
                live_ctx.run_udf(dataset=aq, udf=SumUDF())


class DropsHeard(ProgressReporter):
    """A GUI-like reporter: frames and the lost-frame counts it was told of."""

    def __init__(self):
        self.frames, self.dropped, self.finished = 0, [], False

    def advance(self, run_id, frames):
        self.frames += frames

    def frames_dropped(self, run_id, n):
        self.dropped.append(n)

    def finish(self, run_id):
        self.finished = True


def test_lost_frames_reach_the_progress_reporter_and_aq_stats(live_ctx, capsys):
    frames = scan_frames(7)
    with DectrisSimulator(frames, skip_images=(5, 40), auto_arm=2) as sim, \
            live_ctx.make_connection("dectris").open(api_port=sim.api_port, data_port=sim.data_port,
                                                     buffer_size=16) as conn:
        heard = DropsHeard()
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=NAV,
                                       frames_per_partition=12)
        total = live_ctx.run_udf(dataset=aq, udf=SumUDF(dtype="int64"), progress=heard)
        assert heard.dropped and heard.dropped[-1] == 2 and heard.dropped == sorted(heard.dropped)
        assert heard.frames == 96 and heard.finished
        assert (aq.stats.frames, aq.stats.frames_dropped) == (96, 2)
        expected = frames.copy()
        expected[[5, 40]] = 0
        assert np.array_equal(total["intensity"].data, expected.sum(axis=0, dtype=np.int64))
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=NAV,
                                       frames_per_partition=12)
        counts = []  # each partial result counts the frames lost so far: never fewer than were merged
        for part in live_ctx.run_udf_iter(dataset=aq, udf=SumUDF(dtype="int64"), progress=True):
            merged = np.flatnonzero(part.damage.data.reshape(-1))
            counts.append(part.frames_dropped)
            assert part.frames_dropped >= sum(1 for i in (5, 40) if i in merged)
        assert aq.stats.frames_dropped == 2 and counts[-1] == 2 and counts == sorted(counts)
    assert "dropped=2" in capsys.readouterr().err  # the tqdm bar shows the count


def test_files_count_no_dropped_frames(ctx):
    ds = ctx.load("memory", data=np.ones((4, 3, 8, 8), np.uint16), num_partitions=2)
    parts = list(ctx.run_udf_iter(dataset=ds, udf=SumUDF()))
    assert [p.frames_dropped for p in parts] == [0] * len(parts)


BLOCK_ZMQ = ("import sys; sys.modules['zmq'] = None  # as if pyzmq were not installed\n"
             "from raytile.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize("argv", [["live", "sim", "dectris", "--data-port", "0", "--api-port", "0"],
                                  ["live", "run", "dectris", "--timeout", "1", "--executor", "inline"]])
def test_without_the_live_extra_the_error_names_it(argv):
    """Without pyzmq, ``raytile live ... dectris`` says which extra to install (no traceback)."""
    proc = subprocess.run([sys.executable, "-c", BLOCK_ZMQ, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs the live extra (pip install -e '.[live]')" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_the_live_extra_the_python_api_names_it():
    """The same from Python: the simulator and the connection raise ConfigValidationError naming the extra."""
    code = ("import sys; sys.modules['zmq'] = None\n"
            "import numpy as np\n"
            "from raytile.common.errors import ConfigValidationError\n"
            "from raytile.live.detectors.dectris import DectrisSimulator, DectrisReceiver\n"
            "for make in (lambda: DectrisSimulator(np.zeros((2, 4, 4), np.uint16)),\n"
            "             lambda: DectrisReceiver('tcp://127.0.0.1:1').start()):\n"
            "    try:\n"
            "        make()\n"
            "    except ConfigValidationError as e:\n"
            "        print('OK', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.count("OK") == 2 and proc.stdout.count("live extra") == 2, proc.stdout + proc.stderr[-2000:]


def test_a_float_file_is_replayed_as_uint32_and_fractions_are_refused(tmp_path):
    """A DECTRIS detector sends unsigned integers: a float32 file of whole counts replays as uint32 (read
    as it is sent) and equals numpy; one with a fraction is refused before the simulator starts, naming
    ``--dataset``."""
    frames = scan_frames(21).reshape(NAV + SIG).astype(np.float32)
    np.save(tmp_path / "scan.npy", frames)
    out = tmp_path / "live.npz"
    with SimProcess("--dataset", str(tmp_path / "scan.npy"), "--format", "npy", "--frame-rate", "5000") as sim:
        assert main(["live", "run", "dectris", "--udf", "sum,sumsig", "--nav-shape", "8,12", "--data-port",
                     sim.data_port, "--api-port", sim.api_port, "--executor", "inline", "--timeout", "20",
                     "--out", str(out)]) == 0
    got = np.load(out)
    assert np.array_equal(got["sum_intensity"], frames.sum(axis=(0, 1), dtype=np.float64))
    assert np.array_equal(got["sumsig_intensity"], frames.sum(axis=(2, 3), dtype=np.float64))
    frames[1, 2, 3, 4] = 0.5
    np.save(tmp_path / "half.npy", frames)
    proc = subprocess.run([sys.executable, "-m", "raytile.cli", "live", "sim", "dectris", "--dataset",
                           str(tmp_path / "half.npy"), "--format", "npy"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--dataset {tmp_path / 'half.npy'}: a DECTRIS detector sends whole numbers in 0..4294967295" \
        in proc.stderr
    assert "Traceback" not in proc.stderr
