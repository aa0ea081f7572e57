"""The ``stream`` data set: frames from an iterable or async iterable while the run goes on.

Every test runs on the inline executor, on Ray with the coordinator in the
driver and on Ray with the coordinator actor (``placement``), and compares
with numpy on the same frames (and with the offline memory data set run).
"""

from __future__ import annotations

import threading
import time
import tracemalloc

import anyio
import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import ConfigValidationError, DataSetException, UDFRunCancelled
from raytile.io.formats.stream import default_frames_per_partition
from raytile.runtime.progress import ProgressReporter
from raytile.udf.applymasks import ApplyMasksUDF

from _ray_udfs import ScaledSumUDF, ring_mask

NAV, SIG = (8, 6), (12, 12)


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(7).integers(0, 1000, size=NAV + SIG).astype(np.uint16)


@pytest.fixture(scope="module")
def actor_ctx(ray_context):
    ctx = rt.Context(coordinator="actor", cpus=2)
    yield ctx
    ctx.close()


@pytest.fixture(params=["inline", pytest.param("ray", marks=pytest.mark.ray),
                        pytest.param("actor", marks=pytest.mark.ray)])
def sctx(request):
    """A Context per placement: inline, Ray with the coordinator in the driver, Ray with the actor."""
    name = {"inline": "inline_ctx", "ray": "ray_context", "actor": "actor_ctx"}[request.param]
    return request.getfixturevalue(name)


def batches(frames: np.ndarray, sizes=(1, 3, 7, 2, 11), delay: float = 0.0, log: list | None = None):
    """``frames`` ``(n, *sig)`` in batches of the given sizes (cycled), each a new array."""
    i, n = 0, 0
    while i < len(frames):
        k = sizes[n % len(sizes)]
        if delay:
            time.sleep(delay)
        if log is not None:
            log.append(time.monotonic())
        yield frames[i:i + k].copy()
        i, n = i + k, n + 1


def load(ctx, source, **kw):
    kw.setdefault("nav_shape", NAV)
    return ctx.load("stream", frames=source, sig_shape=SIG, dtype="uint16", **kw)


def _ring(shape=SIG):
    return ring_mask(shape, 2.0, 5.0).astype(np.float32)


@pytest.mark.parametrize("use_roi", [False, True])
def test_stream_equals_offline_run(sctx, data, use_roi):
    roi = None
    if use_roi:
        roi = np.zeros(NAV, dtype=bool)
        roi[1:5, 2:] = True
        roi[6, :3] = True
    flat = data.reshape((-1,) + SIG)
    udfs = [rt.SumUDF(dtype="int64"), rt.SumSigUDF(), ApplyMasksUDF(mask_factories=[_ring])]
    ds = load(sctx, batches(flat), frames_per_partition=5)
    parts = list(sctx.run_udf_iter(dataset=ds, udf=udfs, roi=roi))
    final = parts[-1]
    assert final.finished
    mask = np.ones(NAV, dtype=bool) if roi is None else roi
    expect_sum = data[mask].astype(np.int64).sum(axis=0)
    assert np.array_equal(final.buffers[0]["intensity"].data, expect_sum)
    sumsig = final.buffers[1]["intensity"].data
    np.testing.assert_allclose(sumsig[mask], data.sum(axis=(2, 3))[mask], rtol=1e-5)
    masked = final.buffers[2]["intensity"].data[..., 0]
    np.testing.assert_allclose(masked[mask], (data * _ring()).sum(axis=(2, 3))[mask], rtol=1e-5)
    assert np.array_equal(final.damage.data, mask)
    damage = [p.damage.data.sum() for p in parts]
    assert damage == sorted(damage)  # grows
    offline = sctx.run_udf(dataset=sctx.load("memory", data=data), udf=udfs, roi=roi)
    assert np.array_equal(offline[0]["intensity"].data, final.buffers[0]["intensity"].data)
    np.testing.assert_allclose(offline[2]["intensity"].data[mask], final.buffers[2]["intensity"].data[mask])


def test_slow_producer_partials_flow(sctx, data):
    """A producer slower than the workers: results arrive as the frames do, in arrival order."""
    flat = data.reshape((-1,) + SIG)
    ds = load(sctx, batches(flat, sizes=(6,), delay=0.03), frames_per_partition=6)
    seen = []
    for part in sctx.run_udf_iter(dataset=ds, udf=rt.SumSigUDF()):
        done = part.damage.data.reshape(-1)
        seen.append(int(done.sum()))
        assert done[:done.sum()].all()  # in nav order: merged frames are a prefix
    assert len(seen) >= 3 and seen[-1] == flat.shape[0]
    np.testing.assert_allclose(part.buffers[0]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)


def test_slow_workers_bound_memory(sctx, data):
    """Workers slower than the producer: at most ``max_partitions_in_flight`` partitions between the
    source and their results, and the producer waits (it ends after most of the work)."""
    flat = data.reshape((-1,) + SIG)
    log: list[float] = []
    ds = load(sctx, batches(flat, sizes=(4,), log=log), frames_per_partition=4, max_partitions_in_flight=3)
    run = sctx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(delay=0.05))
    t0 = time.monotonic()
    for part in run:
        pass
    t_end = time.monotonic()
    np.testing.assert_allclose(part.buffers[0]["intensity"].data, data.sum(axis=(0, 1)))
    stats = run.stats
    assert stats is not None
    assert stats["stream_partitions"] == 12
    assert stats["stream_capacity"] == 3
    assert stats["stream_max_in_flight"] == 3  # reached the bound (the producer was ahead), never beyond
    # 12 partitions of >= 50 ms on at most 2 workers: >= 300 ms; unbounded, the producer would be done at once
    assert log[-1] - t0 > 0.5 * (t_end - t0) - 0.05


def test_producer_raises_mid_run(sctx, data):
    flat = data.reshape((-1,) + SIG)

    def failing():
        yield flat[:10].copy()
        yield flat[10:20].copy()
        raise RuntimeError("detector link lost")

    ds = load(sctx, failing(), frames_per_partition=5)
    t0 = time.monotonic()
    with pytest.raises(DataSetException, match="RuntimeError: detector link lost"):
        for _ in sctx.run_udf_iter(dataset=ds, udf=rt.SumUDF()):
            pass
    assert time.monotonic() - t0 < 10


def test_cancel_during_stream(sctx, data):
    """An endless source that blocks between scans: cancel after the first partial ends the run at once
    (the coordinator never waits on the source), and the source is closed when it yields next."""
    closed = threading.Event()
    flat = data.reshape((-1,) + SIG)

    def endless():
        try:
            while True:
                yield flat.copy()
                time.sleep(1.5)  # a detector between scans
        finally:
            closed.set()

    ds = load(sctx, endless(), frames_per_partition=12, scans=0)
    run = sctx.run_udf_iter(dataset=ds, udf=rt.SumUDF())
    with pytest.raises(UDFRunCancelled):
        for part in run:
            t0 = time.monotonic()
            run.cancel()
    while not run.done and time.monotonic() - t0 < 10:
        time.sleep(0.005)
    assert run.done and time.monotonic() - t0 < 1.0  # not held up by the source's 1.5 s sleep
    assert closed.wait(10)


def test_cancel_stops_pulling_the_source_and_closes_it(sctx, data):
    """Issue #37: after ``run.cancel()`` the source went on being pulled (frame by frame, up to a whole
    partition, over a second) before it was closed. Now no pull starts after the cancel but the one
    the feeder may be in, and the source generator sees GeneratorExit."""
    pulls: list[int] = []
    cancelled_at: list[int] = []
    closed = threading.Event()
    flat = data.reshape((-1,) + SIG)

    def one_frame_at_a_time():
        try:
            i = 0
            while True:
                pulls.append(len(pulls))
                time.sleep(0.01)
                yield flat[i % len(flat)][None].copy()
                i += 1
        except GeneratorExit:
            closed.set()
            raise

    ds = load(sctx, one_frame_at_a_time(), frames_per_partition=40, scans=0)
    run = sctx.run_udf_iter(dataset=ds, udf=rt.SumUDF())
    with pytest.raises(UDFRunCancelled):
        for _part in run:
            while len(pulls) < 50:  # into the second partition's 40 frames: the source is pulled on
                time.sleep(0.005)
            cancelled_at.append(len(pulls))
            run.cancel()
            cancelled_at.append(len(pulls))
    assert closed.wait(10), "the source was not closed"
    # at most the pull that was under way as cancel() returned (1 more if it raced with the cancel)
    assert len(pulls) <= cancelled_at[1] + 1, (cancelled_at, len(pulls))


def test_unbounded_200_scans_flat_memory(sctx):
    """200 scans of an unbounded stream: per-scan results equal numpy, and memory stays flat."""
    nav, sig = (4, 4), (8, 8)
    rng = np.random.default_rng(3)
    bank = [rng.integers(0, 100, size=(16,) + sig).astype(np.uint16) for _ in range(5)]

    def scans():
        for s in range(200):
            yield bank[s % 5] + np.uint16(s % 7)  # a new array per scan

    ds = sctx.load("stream", frames=scans(), nav_shape=nav, sig_shape=sig, dtype="uint16", scans=0,
                   frames_per_partition=8)
    tracemalloc.start()
    try:
        checked, sizes = 0, {}
        run = sctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(dtype="int64"))
        for part in run:
            if part.damage.data.all():
                expect = (bank[part.scan % 5] + np.uint16(part.scan % 7)).astype(np.int64).sum(axis=0)
                assert np.array_equal(part.buffers[0]["intensity"].data, expect), part.scan
                checked += 1
            for mark in (40, 190):
                if part.scans_done >= mark and mark not in sizes:
                    sizes[mark] = tracemalloc.get_traced_memory()[0]
            last = part
    finally:
        tracemalloc.stop()
    assert last.finished and last.scan == 199 and last.scans_done == 200
    assert checked >= 2
    assert sizes[190] - sizes[40] < 256 * 1024, sizes  # flat: no per-scan state kept
    stats = run.stats  # where the coordinator runs (here or in its actor): frames held at once stay bounded
    assert stats["stream_partitions"] == 400 and stats["stream_max_in_flight"] <= stats["stream_capacity"]


def test_async_source_and_async_consumer(sctx, data):
    flat = data.reshape((-1,) + SIG)

    async def source():
        for i in range(0, len(flat), 8):
            await anyio.sleep(0.001)
            yield flat[i:i + 8].copy()

    async def main():
        ds = load(sctx, source(), frames_per_partition=8)
        parts = [p async for p in sctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(dtype="int64"), sync=False)]
        return parts[-1]

    final = anyio.run(main)
    assert np.array_equal(final.buffers[0]["intensity"].data, data.astype(np.int64).sum(axis=(0, 1)))


def test_live_patch_and_progress(sctx, data):
    flat = data.reshape((-1,) + SIG)
    frames_seen = []

    class Count(ProgressReporter):
        def start(self, run_id, total_frames, total_partitions):
            frames_seen.append(("start", total_frames))

        def advance(self, run_id, frames):
            frames_seen.append(frames)

    ds = load(sctx, batches(flat, sizes=(6,), delay=0.02), frames_per_partition=6)
    run = sctx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(scale=1.0), progress=Count())
    with pytest.raises(ConfigValidationError, match="recompute"):
        run.update_parameters([{"scale": 3.0}], recompute=True)
    patched = False
    for part in run:
        if not patched:
            run.update_parameters([{"scale": 2.0}])
            patched = True
    versions = part.param_versions
    assert set(versions.values()) <= {0, 1} and 1 in versions.values()
    expect = sum((2.0 if versions[p] else 1.0) * flat[p * 6:(p + 1) * 6].sum(axis=0).astype(np.float64)
                 for p in range(8))
    np.testing.assert_allclose(part.buffers[0]["intensity"].data, expect)
    assert frames_seen[0] == ("start", 48) and sum(f for f in frames_seen[1:]) == 48


@pytest.mark.parametrize("bad, match", [
    (lambda f: [f[:4].reshape(4, 144)], r"batch 0 has shape \(4, 144\)"),
    (lambda f: [f[:4].astype(np.float32)], "batch 0 has dtype float32"),
    (lambda f: [f, f[:1]], "more frames than the data set holds"),
    (lambda f: [f[:40]], "ended after 40 frames"),
    (lambda f: [f[:40], [1, 2]], "batch 1 is a list"),
])
def test_bad_batches(inline_ctx, data, bad, match):
    ds = load(inline_ctx, bad(data.reshape((-1,) + SIG)), frames_per_partition=8)
    with pytest.raises(DataSetException, match=match):
        inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF())


def test_bad_parameters_and_reuse(inline_ctx, data):
    flat = data.reshape((-1,) + SIG)
    with pytest.raises(ConfigValidationError, match="'frames' must be an iterable"):
        load(inline_ctx, 5)
    with pytest.raises(ConfigValidationError, match="'frames_per_partition'"):
        load(inline_ctx, [flat], frames_per_partition=0)
    ds = load(inline_ctx, [flat])
    inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF())
    with pytest.raises(DataSetException, match="read by a run already"):
        inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF())


def test_default_partitions_are_small():
    """A 2 MiB stream is cut into several partitions, a large one into 32 MiB ones."""
    assert default_frames_per_partition(16 * 16, 8192) == 32              # 2 MiB: 8 partitions
    assert default_frames_per_partition(256 * 256, 256 * 256 * 2) == 256  # 128 KiB frames: 32 MiB
    assert default_frames_per_partition(3, 10) == 1


class _CuttingSource:
    """A source that keeps statistics and cuts its arrays where the stream's partitions end (as a live
    receiver does, io/formats/stream.py's CountingSource and PartitionAligned)."""

    def __init__(self, frames):
        self.frames, self.stats, self.batch, self.seen = frames, {"frames": 0}, None, []

    def __iter__(self):
        self.seen.append(self.batch)  # what the stream said before reading
        fpp, _ = self.batch
        for i in range(0, len(self.frames), fpp):
            self.stats["frames"] += len(self.frames[i:i + fpp])
            yield self.frames[i:i + fpp]


def test_stream_shows_its_sources_stats_and_tells_it_where_to_cut(inline_ctx, data):
    flat = data.reshape((-1,) + SIG)
    source = _CuttingSource(flat)
    ds = load(inline_ctx, source, frames_per_partition=16)
    assert ds.stats is source.stats and source.batch is None  # nothing read yet
    res = inline_ctx.run_udf(dataset=ds, udf=rt.SumUDF())
    np.testing.assert_array_equal(res["intensity"].data, flat.sum(axis=0, dtype=np.float64))
    assert source.seen == [(16, 48)] and ds.stats == {"frames": 48}
    assert load(inline_ctx, [flat]).stats is None  # a plain iterable keeps none


@pytest.mark.ray
def test_detached_stream_is_refused(actor_ctx, data):
    ds = load(actor_ctx, [data.reshape((-1,) + SIG)])
    with pytest.raises(ConfigValidationError, match="detached"):
        actor_ctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), detached=True)


def test_inlet_blocks_at_capacity_and_close_frees_the_producer():
    from raytile.runtime.stream_feed import InletClosed, PartitionInlet

    woken = []
    inlet = PartitionInlet(2, lambda: woken.append(1))
    inlet.put(0, "a")
    inlet.put(1, "b")
    with pytest.raises(TimeoutError):
        inlet.put(2, "c", timeout=0.05)  # full: the producer waits
    assert inlet.take() == [(0, "a"), (1, "b")] and inlet.take() == []
    with pytest.raises(TimeoutError):
        inlet.put(2, "c", timeout=0.05)  # taken is not done: still full
    inlet.release(0)
    inlet.put(2, "c", timeout=1)
    assert inlet.max_outstanding == 2 and inlet.outstanding == 2 and len(woken) == 3
    errors = []

    def producer():
        try:
            inlet.put(3, "d")
        except InletClosed as e:
            errors.append(e)

    t = threading.Thread(target=producer)
    t.start()
    time.sleep(0.05)
    inlet.close()  # the run is over: the blocked producer is told so
    t.join(2)
    assert not t.is_alive() and errors
    inlet.fail(DataSetException("the source broke"))
    with pytest.raises(DataSetException, match="the source broke"):
        inlet.take()
