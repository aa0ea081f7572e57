"""make_connection("asi_tpx3"): raytile's ASI Timepix3 receiver against LiberTEM-live's simulator and
LiberTEM-rs' stream encoder (written by others), LiberTEM-live's own results and numpy; raytile's
simulator and CLI; a truncated stream, a dead port, garbage and silence end in raytile's errors.
Everything on 127.0.0.1, bounded in time, stopped by the test."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import scipy.sparse

from raytile.cli import main
from raytile.common.errors import AcquisitionError, ConfigValidationError, DataSetException
from raytile.live import LiveContext
from raytile.live.detectors.asi_tpx3 import AsiTpx3Acquisition, AsiTpx3Simulator
from raytile.live.detectors.asi_tpx3.wire import (
    AcquisitionEnd, AcquisitionStart, ScanEnd, ScanStart, encode_chunk, parse_header,
)
from raytile.udf import UDF, ApplyMasksUDF, SumSigUDF, SumUDF

from _procs import stop_process

lat = pytest.importorskip("libertem_asi_tpx3", reason="LiberTEM-rs' Timepix3 encoder is a test dependency")
pytest.importorskip("libertem_live", reason="LiberTEM-live (its simulator and results) is a test dependency")

LTL_SIG = (512, 512)  # what LiberTEM-rs' make_sim_data writes


@pytest.fixture(scope="module")
def live_ctx():
    ctx = LiveContext(executor="inline")
    yield ctx
    ctx.close()


@pytest.fixture
def live_ray_ctx(ray_context):
    return LiveContext(executor=ray_context.executor)


def sparse_frames(seed: int, n: int, sig: tuple[int, int], dtype=np.uint32, density=0.002) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return ((rng.random((n,) + sig) < density) * rng.integers(1, 1000, size=(n,) + sig)).astype(dtype)


def rs_stream(nav: tuple[int, int], frames: np.ndarray) -> bytes:
    """One acquisition as LiberTEM-rs encodes it (``make_sim_data``: 512x512 frames, uint32 CSR)."""
    csr = scipy.sparse.csr_matrix(frames.reshape(len(frames), -1))
    return bytes(lat.make_sim_data(nav, csr.indptr.astype(np.uint32), csr.indices.astype(np.uint32),
                                   csr.data.astype(np.uint32)))


def test_wire_format_is_libertem_rs(tmp_path):
    """raytile's encoder writes byte for byte what LiberTEM-rs' does, and parses its headers."""
    nav = (2, 3)
    frames = sparse_frames(0, 6, LTL_SIG)
    theirs = rs_stream(nav, frames)
    start = AcquisitionStart(nav_shape=nav, sig_shape=LTL_SIG, sequence=1)
    ours = (start.encode() + ScanStart(1, 0).encode() + encode_chunk(frames, start) + ScanEnd(1).encode()
            + AcquisitionEnd(1).encode())
    assert ours == theirs
    assert parse_header(theirs[:32], "rs") == start
    assert parse_header(theirs[-32:], "rs") == AcquisitionEnd(1)


def _ltl_sim(path: str):
    from libertem_live.detectors.asi_tpx3.sim import TpxCameraSim

    sim = TpxCameraSim(cached="MEM", port=0, sleep=0.1, paths=[path])
    sim.start()
    sim.wait_for_listen()
    return sim


def _ltl_results(port: int):
    """LiberTEM-live's own run (inline executor) on the simulator's stream."""
    from libertem.executor.inline import InlineJobExecutor
    from libertem.udf.sum import SumUDF as LtSumUDF
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF
    from libertem_live.api import LiveContext as LtlLiveContext

    ctx = LtlLiveContext(executor=InlineJobExecutor())
    # its receive slots must hold the whole one-chunk scan (LiberTEM-live fails a larger chunk; raytile's grow)
    with ctx.make_connection("asi_tpx3").open(data_port=port, bytes_per_chunk=64 * 1024) as conn:
        aq = ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0))
        total, per_frame = ctx.run_udf(dataset=aq, udf=[LtSumUDF(), LtSumSigUDF()])
    return np.asarray(total["intensity"].data), np.asarray(per_frame["intensity"].data)


def test_libertem_live_simulator_equals_numpy_and_libertem_live(live_ctx, tmp_path):
    """LiberTEM-live's simulator replays a LiberTEM-rs stream of random events (pixels hit twice in
    a frame add up): raytile's results equal numpy's on the frames and LiberTEM-live's own."""
    nav = (8, 16)
    frames = sparse_frames(1, 128, LTL_SIG)
    path = tmp_path / "stream.scr"
    path.write_bytes(rs_stream(nav, frames))

    def make_mask():
        return np.random.default_rng(2).random(LTL_SIG).astype(np.float32)

    mask = make_mask()
    sim = _ltl_sim(str(path))
    try:
        with live_ctx.make_connection("asi_tpx3").open(data_port=sim.server_t.port) as conn:
            pending = conn.wait_for_acquisition(10.0)
            assert pending is not None and pending.nav_shape == nav and pending.nimages == 128
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=pending)
            assert isinstance(aq, AsiTpx3Acquisition) and aq.shape.to_tuple() == nav + LTL_SIG
            assert aq.dtype == np.float32  # as LiberTEM-live's acquisition declares
            total, per_frame, masked = live_ctx.run_udf(dataset=aq, udf=[
                SumUDF(), SumSigUDF(), ApplyMasksUDF(mask_factories=[make_mask])])
        ltl_total, ltl_per_frame = _ltl_results(sim.server_t.port)
    finally:
        sim.stop()
    assert np.array_equal(total["intensity"].data, frames.sum(axis=0, dtype=np.float64).astype(np.float32))
    assert np.array_equal(per_frame["intensity"].data, frames.sum(axis=(1, 2)).reshape(nav))
    np.testing.assert_allclose(masked["intensity"].data[..., 0],
                               np.einsum("nhw,hw->n", frames.astype(np.float64), mask).reshape(nav), rtol=1e-5)
    assert np.array_equal(total["intensity"].data, ltl_total)
    assert np.array_equal(per_frame["intensity"].data, ltl_per_frame)


def test_duplicate_events_add_up_as_in_scipy(live_ctx):
    """A CSR chunk naming a pixel twice: its counts add up, as scipy's csr_matrix made dense does."""
    start = AcquisitionStart(nav_shape=(1, 2), sig_shape=(2, 2), sequence=1)
    indptr = np.array([0, 3, 4], "<u4")
    indices = np.array([1, 1, 3, 0], "<u4")
    values = np.array([5, 7, 1, 2], "<u2")
    payload = indptr.tobytes() + indices.tobytes() + values.tobytes()
    from raytile.live.detectors.asi_tpx3.wire import ArrayChunk
    chunk = ArrayChunk(np.dtype("<u2"), 2, 4, indptr.nbytes, indptr.nbytes + indices.nbytes).encode()
    stream = start.encode() + ScanStart(1, 0).encode() + chunk + payload + ScanEnd(1).encode() + AcquisitionEnd(1).encode()
    expected = scipy.sparse.csr_matrix((values, indices, indptr), shape=(2, 4)).toarray().reshape(2, 2, 2)
    with _RawServer(stream) as port, live_ctx.make_connection("asi_tpx3").open(data_port=port) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0))
        total = live_ctx.run_udf(dataset=aq, udf=SumUDF())
    assert np.array_equal(total["intensity"].data, expected.sum(axis=0))


def test_padding_between_the_csr_arrays(live_ctx):
    """Chunks whose indices and values start at aligned offsets after padding bytes (what the format's
    ``indices_offset``/``values_offset`` allow, e.g. 8-byte alignment): the padding is skipped."""
    from raytile.live.detectors.asi_tpx3.wire import ArrayChunk

    frames = sparse_frames(9, 6, (8, 8), density=0.15)
    start = AcquisitionStart(nav_shape=(2, 3), sig_shape=(8, 8), sequence=1)
    stream = start.encode() + ScanStart(1, 0).encode()
    for first in (0, 3):
        csr = scipy.sparse.csr_matrix(frames[first:first + 3].reshape(3, -1))
        indptr, indices, values = (csr.indptr.astype("<u4"), csr.indices.astype("<u4"), csr.data.astype("<u4"))
        ioff = -(-indptr.nbytes // 64) * 64
        voff = -(-(ioff + indices.nbytes) // 64) * 64
        payload = bytearray(b"\xab" * (voff + values.nbytes))
        payload[:indptr.nbytes] = indptr.tobytes()
        payload[ioff:ioff + indices.nbytes] = indices.tobytes()
        payload[voff:] = values.tobytes()
        stream += ArrayChunk(np.dtype("<u4"), 3, len(values), ioff, voff).encode() + bytes(payload)
    stream += ScanEnd(1).encode() + AcquisitionEnd(1).encode()
    with _RawServer(stream) as port, live_ctx.make_connection("asi_tpx3").open(data_port=port) as conn:
        aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0))
        total, per_frame = live_ctx.run_udf(dataset=aq, udf=[SumUDF(), SumSigUDF()])
    assert np.array_equal(total["intensity"].data, frames.sum(axis=0))
    assert np.array_equal(per_frame["intensity"].data, frames.sum(axis=(1, 2)).reshape(2, 3))


@pytest.mark.parametrize("chunk_frames,bytes_per_chunk,chunks_per_stack", [(7, None, 24), (64, 64, 1)])
def test_raytile_simulator_on_ray_with_roi(live_ray_ctx, chunk_frames, bytes_per_chunk, chunks_per_stack):
    """raytile's simulator, chunks across partition boundaries (and larger than the receive slots:
    the slots grow), on Ray with a ROI, two acquisitions on one connection: numpy's results."""
    nav, sig = (12, 16), (64, 48)
    frames = sparse_frames(3, 192, sig, np.uint16, density=0.01)
    roi = np.random.default_rng(4).random(nav) < 0.6
    with AsiTpx3Simulator(frames, nav_shape=nav, chunk_frames=chunk_frames, acquisitions=2) as sim:
        with live_ray_ctx.make_connection("asi_tpx3").open(data_port=sim.data_port, bytes_per_chunk=bytes_per_chunk,
                                                          chunks_per_stack=chunks_per_stack, buffer_size=1) as conn:
            for _ in range(2):
                aq = live_ray_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0),
                                                   frames_per_partition=20)
                total, per_frame = live_ray_ctx.run_udf(dataset=aq, udf=[SumUDF(), SumSigUDF()], roi=roi)
                assert np.array_equal(total["intensity"].data, frames[roi.reshape(-1)].sum(axis=0))
                expected = np.where(roi, frames.sum(axis=(1, 2)).reshape(nav), 0)
                assert np.array_equal(np.where(roi, per_frame["intensity"].data, 0), expected)
                assert aq.stats.frames == 192


class _TileKind(UDF):
    """Per-frame sums, and whether the tiles came as scipy CSR (1) or dense numpy (0); ``backends``: what
    it declares."""

    def __init__(self, backends):
        super().__init__(backends=tuple(backends))

    def get_backends(self):
        return self.params.backends

    def get_result_buffers(self):
        return {"sums": self.buffer(kind="nav", dtype="float64"), "csr": self.buffer(kind="nav", dtype="int8")}

    def process_tile(self, tile):
        csr = scipy.sparse.issparse(tile) and tile.format == "csr"
        assert csr or isinstance(tile, np.ndarray), type(tile)
        self.results.sums[:] += np.asarray(tile.sum(axis=1)).reshape(-1) if csr else tile.sum(axis=(1, 2))
        self.results.csr[:] = 1 if csr else 0

    def merge(self, dest, src):
        dest.sums[:] = src.sums
        dest.csr[:] = src.csr


def test_sparse_udfs_get_csr_tiles_dense_only_udfs_dense_ones(live_ctx):
    """The acquisition's partitions carry CSR events: a UDF that declares scipy CSR gets CSR tiles, one
    that declares only numpy dense tiles (the run converts), a built-in (SumSigUDF) its sparse path;
    all equal numpy. Chunks of 7 frames across partitions of 20: rows cut and stacked."""
    nav, sig = (6, 10), (24, 20)
    frames = sparse_frames(11, 60, sig, np.uint16, density=0.05)
    with AsiTpx3Simulator(frames, nav_shape=nav, chunk_frames=7) as sim:
        with live_ctx.make_connection("asi_tpx3").open(data_port=sim.data_port) as conn:
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0),
                                           frames_per_partition=20)
            assert aq.array_backends == ("scipy.sparse.csr_matrix",)
            sparse_res, dense_res, per_frame = live_ctx.run_udf(dataset=aq, udf=[
                _TileKind(("scipy.sparse.csr_matrix", "numpy")), _TileKind(("numpy",)), SumSigUDF()])
    expected = frames.sum(axis=(1, 2)).reshape(nav)
    assert np.all(sparse_res["csr"].data == 1) and np.all(dense_res["csr"].data == 0)
    assert np.array_equal(sparse_res["sums"].data, expected)
    assert np.array_equal(dense_res["sums"].data, expected)
    assert np.array_equal(per_frame["intensity"].data, expected)


def test_a_stream_of_csr_batches(live_ctx):
    """``ctx.load("stream")`` over a source that declares ``csr_batches``: batches of any size cut into
    partitions, results equal numpy; a dense batch from such a source is raytile's error."""
    nav, sig = (5, 8), (6, 7)
    frames = sparse_frames(12, 40, sig, np.float32, density=0.2)
    flat = scipy.sparse.csr_matrix(frames.reshape(40, -1))

    class Source:
        def __init__(self, dense_at=None):
            self.csr_batches = True
            self.dense_at = dense_at

        def __iter__(self):
            for i, (a, b) in enumerate([(0, 3), (3, 17), (17, 18), (18, 40)]):
                yield frames[a:b] if i == self.dense_at else flat[a:b]

    ds = live_ctx.load("stream", frames=Source(), nav_shape=nav, sig_shape=sig, dtype="float32",
                       frames_per_partition=8)
    total, per_frame = live_ctx.run_udf(dataset=ds, udf=[SumUDF(), SumSigUDF()])
    assert np.allclose(total["intensity"].data, frames.sum(axis=0), rtol=1e-6)
    assert np.array_equal(per_frame["intensity"].data, frames.sum(axis=(1, 2)).reshape(nav))
    bad = live_ctx.load("stream", frames=Source(dense_at=1), nav_shape=nav, sig_shape=sig, dtype="float32")
    with pytest.raises(DataSetException, match="batch 1 is a ndarray, expected a scipy CSR matrix"):
        live_ctx.run_udf(dataset=bad, udf=SumUDF())


def test_a_preprocess_gets_dense_frames(live_ctx):
    """A ``preprocess`` takes dense frames: the acquisition then decodes into them (the stream asks its
    source for dense batches), and the results are numpy's on the binned frames."""
    from raytile.pipeline.frame_stacks import FrameStackPipeline

    nav, sig = (4, 6), (16, 12)
    frames = sparse_frames(13, 24, sig, np.uint16, density=0.1)
    pre = FrameStackPipeline.from_dict({
        "name": "bin",
        "streams": {"frame": {"shape": list(sig), "dtype": "float32"},
                    "binned": {"shape": [8, 6], "dtype": "float32"}},
        "stages": [{"name": "camera", "kind": "constant", "output": "frame"},
                   {"name": "bin", "kind": "binning", "input": "frame", "output": "binned",
                    "params": {"factor": 2, "mode": "sum"}}],
    }, input="frame")
    with AsiTpx3Simulator(frames, nav_shape=nav, chunk_frames=5) as sim:
        with live_ctx.make_connection("asi_tpx3").open(data_port=sim.data_port) as conn:
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0),
                                           frames_per_partition=8, preprocess=pre)
            assert aq.array_backends != ("scipy.sparse.csr_matrix",)
            total = live_ctx.run_udf(dataset=aq, udf=SumUDF())
    binned = frames.reshape(24, 8, 2, 6, 2).sum(axis=(2, 4))
    assert np.array_equal(total["intensity"].data, binned.sum(axis=0))


def test_truncated_stream_fails_the_run_with_raytiles_error(live_ctx):
    """The sender closes inside a chunk: the run reads the chunks that came, then fails at once."""
    frames = sparse_frames(5, 64, (16, 16), density=0.05)
    with AsiTpx3Simulator(frames, nav_shape=(8, 8), chunk_frames=8, die_after=30) as sim:
        with live_ctx.make_connection("asi_tpx3").open(data_port=sim.data_port, timeout=5.0) as conn:
            while conn.receiver.running:  # the sender is done before the user waits: what came is still read
                time.sleep(0.05)
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0))
            t0 = time.monotonic()
            with pytest.raises(AcquisitionError, match=r"ASI Timepix3 127\.0\.0\.1:\d+: the sender closed the "
                                                       r"connection inside a chunk \(after 24 of 64 frames\)"):
                live_ctx.run_udf(dataset=aq, udf=SumUDF())
            assert time.monotonic() - t0 < 5.0  # the close is seen at once, not after the silence timeout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dead_port_is_raytiles_error(live_ctx):
    port = _free_port()
    with pytest.raises(AcquisitionError, match=rf"ASI Timepix3 data port 127\.0\.0\.1:{port}: cannot connect"):
        live_ctx.make_connection("asi_tpx3").open(data_port=port)


class _RawServer:
    """Sends ``payload`` to one client on 127.0.0.1, then keeps the connection open until exit."""

    def __init__(self, payload: bytes):
        self.payload = payload
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(5.0)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.sendall(self.payload)
            self.done.wait(10.0)

    def __enter__(self) -> int:
        self.thread.start()
        return self.listener.getsockname()[1]

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5.0)
        self.listener.close()


def test_garbage_is_raytiles_error(live_ctx):
    with _RawServer(b"\xff" * 32) as port, live_ctx.make_connection("asi_tpx3").open(data_port=port) as conn:
        with pytest.raises(AcquisitionError, match="unknown header kind 0xff"):
            conn.wait_for_acquisition(5.0)


def test_silence_inside_a_scan_ends_the_run(live_ctx):
    start = AcquisitionStart(nav_shape=(2, 2), sig_shape=(4, 4), sequence=1)
    with _RawServer(start.encode() + ScanStart(1, 0).encode()) as port:
        with live_ctx.make_connection("asi_tpx3").open(data_port=port, timeout=0.5) as conn:
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(5.0))
            with pytest.raises(AcquisitionError, match=r"no data for 0.5 s in a scan \(0 of 4 frames\)"):
                live_ctx.run_udf(dataset=aq, udf=SumUDF())


def test_passive_mode_only_and_parameters_checked(live_ctx):
    frames = sparse_frames(6, 4, (4, 4), density=0.3)
    with AsiTpx3Simulator(frames, nav_shape=(2, 2)) as sim:
        with live_ctx.make_connection("asi_tpx3").open(data_port=sim.data_port) as conn:
            with pytest.raises(ConfigValidationError, match="only passive mode"):
                live_ctx.make_acquisition(conn=conn, nav_shape=(2, 2))
    with pytest.raises(ConfigValidationError, match="parameter 'data_port' must be a TCP port, got 0"):
        live_ctx.make_connection("asi_tpx3").open(data_port=0)
    with pytest.raises(ConfigValidationError, match="parameter 'chunks_per_stack' must be a positive int"):
        live_ctx.make_connection("asi_tpx3").open(data_port=1, chunks_per_stack=0)


def test_cli_sim_and_run_equal_numpy(tmp_path):
    """``raytile live sim asi_tpx3 --dataset`` replays an npy file; ``raytile live run asi_tpx3`` saves
    what numpy says."""
    nav, sig = (6, 8), (32, 32)
    frames = sparse_frames(7, 48, sig, np.uint16, density=0.02)
    np.save(tmp_path / "scan.npy", frames.reshape(nav + sig))
    proc = subprocess.Popen([sys.executable, "-m", "raytile.cli", "live", "sim", "asi_tpx3", "--data-port", "0",
                             "--dataset", str(tmp_path / "scan.npy"), "--format", "npy"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        found = re.search(r"ASI Timepix3 simulator: data 127.0.0.1:(\d+), 48 frames of 32x32", line)
        assert found is not None, (line, proc.stderr.read()[-2000:] if proc.poll() is not None else "")
        out = tmp_path / "live.npz"
        assert main(["live", "run", "asi_tpx3", "--udf", "sum,sumsig", "--data-port", found.group(1),
                     "--executor", "inline", "--timeout", "20", "--out", str(out)]) == 0
    finally:
        stop_process(proc)
    got = np.load(out)
    assert np.array_equal(got["sum_intensity"], frames.sum(axis=0, dtype=np.float64))
    assert np.array_equal(got["sumsig_intensity"], frames.sum(axis=(1, 2)).reshape(nav))


def test_a_url_source_opens_the_detector(live_ctx):
    """``asi_tpx3://host:port`` (``raytile serve --live``): the port is the data port."""
    from raytile.live.sources import LiveSource

    frames = sparse_frames(8, 12, (8, 8), np.uint8, density=0.2)
    with AsiTpx3Simulator(frames, nav_shape=(3, 4)) as sim:
        source = LiveSource.parse(f"asi_tpx3://127.0.0.1:{sim.data_port}?timeout=5")
        assert source.params["data_port"] == sim.data_port
        with source.open() as conn:
            aq = source.next_acquisition(live_ctx, conn, timeout=10.0)
            total = live_ctx.run_udf(dataset=aq, udf=SumUDF())
    assert np.array_equal(total["intensity"].data, frames.sum(axis=0))


def test_nav_shape_given_by_the_user_or_a_hook(live_ctx):
    """The header says (3, 4); a concrete ``nav_shape``, or what ``Hooks.on_determine_nav_shape``
    returns, reshapes the scan (LiberTEM-live's rules, raytile.live.nav_shape)."""
    from raytile.live import Hooks

    class Flat(Hooks):
        def on_determine_nav_shape(self, env):
            return (env.nimages,)

    frames = sparse_frames(10, 12, (8, 8), np.uint16, density=0.2)
    with AsiTpx3Simulator(frames, nav_shape=(3, 4), acquisitions=2) as sim:
        with live_ctx.make_connection("asi_tpx3").open(data_port=sim.data_port) as conn:
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), nav_shape=(2, 6))
            given = live_ctx.run_udf(dataset=aq, udf=SumSigUDF())
            aq = live_ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), hooks=Flat())
            hooked = live_ctx.run_udf(dataset=aq, udf=SumSigUDF())
    assert np.array_equal(given["intensity"].data, frames.sum(axis=(1, 2)).reshape(2, 6))
    assert np.array_equal(hooked["intensity"].data, frames.sum(axis=(1, 2)))
