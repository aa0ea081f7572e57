"""The runtime core under faults: stale shared data, cancel storms, lost wake-ups, slow consumers,
a dead progress actor, failing merges. Each test failed before its fix."""

from __future__ import annotations

import gc
import random
import threading
import time

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import UDFException, UDFRunCancelled
from raytile.runtime.progress import ProgressReporter
from raytile.runtime.results import UDFResults

from _ray_udfs import BadMergeUDF, SlowTileUDF, WideSingleUDF
from _wait import wait_until


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(9).integers(0, 1000, size=(8, 6, 12, 10)).astype(np.uint16)


class CountingReporter(ProgressReporter):
    def __init__(self):
        self.lock = threading.Lock()
        self.advances: list[int] = []
        self.finished = False

    def advance(self, run_id, frames):
        with self.lock:
            self.advances.append(frames)

    def finish(self, run_id):
        self.finished = True


# -- 1. shared in-memory data belongs to its DataSet ---------------------------------------------

def test_array_refilled_in_place_and_loaded_again_gives_the_new_result(ctx, data):
    arr = data.copy()
    ds = ctx.load("memory", data=arr, num_partitions=4)
    first = ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(first["intensity"].data, data.sum(axis=(0, 1)))
    arr[:] = data[::-1, ::-1] // 3 + 5  # same address, shape and dtype; new contents
    again = ctx.load("memory", data=arr, num_partitions=4)
    res = ctx.run_udf(dataset=again, udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, arr.sum(axis=(0, 1), dtype=np.int64))


def _worker_data_cached(ex) -> list[int]:
    import ray

    return [w["data_cached"] for w in ray.get([a.ping.remote() for a in ex.actors])]


@pytest.mark.ray
def test_dropped_memory_datasets_are_released_on_driver_and_workers(ray_context):
    import ray

    ex = ray_context.executor
    core = ray._private.worker.global_worker.core_worker
    rng = np.random.default_rng(1)

    def one_dataset():
        arr = rng.integers(0, 9, size=(4, 4, 32, 32)).astype(np.float64)  # 128 KiB, 2 partitions
        ds = ray_context.load("memory", data=arr, num_partitions=2)
        res = ray_context.run_udf(dataset=ds, udf=rt.SumUDF())
        np.testing.assert_allclose(res["intensity"].data, arr.sum(axis=(0, 1)), rtol=1e-5)

    one_dataset()
    gc.collect()
    ray_context.executor.prepare_dataset(ray_context.load("memory", data=np.zeros((2, 2, 2, 2))))  # flushes
    base_shared, base_refs = len(ex.shared), len(core.get_all_reference_counts())
    for _ in range(40):
        one_dataset()
    gc.collect()
    ray_context.executor.prepare_dataset(ray_context.load("memory", data=np.zeros((2, 2, 2, 2))))
    assert len(ex.shared) <= base_shared + 1
    assert len(core.get_all_reference_counts()) <= base_refs + 4
    wait_until(lambda: max(_worker_data_cached(ex)) <= 4, timeout=10, what="the workers' dropped views")
    assert max(_worker_data_cached(ex)) <= 4  # views of 80 dropped partitions are gone, not kept


# -- 2. cancelling many runs leaves no gap in the actors' call order ----------------------------

@pytest.mark.ray
def test_cancel_storm_then_a_normal_run_at_normal_speed(ray_context, data):
    ex = ray_context.executor
    actors_before = [a._actor_id for a in ex.actors]
    ds = ray_context.load("memory", data=data, num_partitions=8)
    rnd = random.Random(4)
    for i in range(50):
        run = ray_context.run_udf_iter(dataset=ds, udf=SlowTileUDF(delay=0.005, depth=1))
        time.sleep(rnd.uniform(0, 0.05))
        if i % 2:
            run.cancel()
            with pytest.raises(UDFRunCancelled):
                for _ in run:
                    pass
        else:
            for _ in run:
                break  # leaving the loop cancels too
    out: dict = {}

    def normal():
        out["res"] = ray_context.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))

    t = threading.Thread(target=normal)
    t.start()
    t.join(15)  # a gap in an actor's call order stalled this run for 30 s
    assert not t.is_alive(), "the run after the cancel storm stalled"
    assert np.array_equal(out["res"]["intensity"].data, data.sum(axis=(0, 1)))
    assert [a._actor_id for a in ex.actors] == actors_before  # no worker replaced


# -- 3. a wake-up set before the executor waits is never lost ----------------------------------

@pytest.mark.ray
def test_wait_returns_at_once_when_woken_before_it_waits(ray_context, data):
    from raytile.runtime.plan import make_plan

    ex = ray_context.executor
    ds = ray_context.load("memory", data=data, num_partitions=2)
    plan = make_plan(ds, [SlowTileUDF(delay=0.5, depth=1)])
    wakeup = threading.Event()
    ex.start_run(plan.params.run_id, wakeup)
    handle = ex.submit(plan.tasks[0], ex.put_params(plan.params), 0)
    try:
        wakeup.set()  # a cancel or patch that arrived after the coordinator looked at its inputs
        t0 = time.monotonic()
        assert ex.wait(plan.params.run_id, [handle], timeout=10) == []
        assert time.monotonic() - t0 < 2.0, "wait swallowed the wake-up and blocked on the task"
        assert wakeup.is_set()
    finally:
        ex.cancel([handle])
        ex.finish_run(plan.params.run_id)


def test_cancel_and_patch_are_seen_within_milliseconds(ctx, data):
    """A cancel right after a result was taken ends the run long before the 0.2 s safety poll."""
    ds = ctx.load("memory", data=data, num_partitions=8)
    latencies = []
    for _ in range(5):
        run = ctx.run_udf_iter(dataset=ds, udf=SlowTileUDF(delay=0.002, depth=1))
        it = iter(run)
        next(it)
        t0 = time.monotonic()
        run.cancel()
        run._coordinator.join(5)
        latencies.append(time.monotonic() - t0)
        with pytest.raises(UDFRunCancelled):
            next(it)
    assert run.done
    assert min(latencies) < 0.15


# -- 4. a slow consumer holds at most two snapshots ----------------------------------------------

def _live_snapshots() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is UDFResults)


def test_slow_consumer_never_holds_more_than_two_snapshots(inline_ctx):
    frames = np.arange(16 * 4 * 4, dtype=np.float32).reshape(16, 4, 4)
    ds = inline_ctx.load("memory", data=frames, sig_dims=2, num_partitions=16)
    gc.collect()
    base = _live_snapshots()
    run = inline_ctx.run_udf_iter(dataset=ds, udf=WideSingleUDF(size=1 << 24))  # a 64 MiB result
    most, parts = 0, 0
    last = None
    for part in run:
        last = part
        parts += 1
        time.sleep(0.2)
        gc.collect()
        most = max(most, _live_snapshots() - base)  # the one held here, and at most one waiting
    assert most <= 2
    acc = last.buffers[0]["acc"].data
    assert acc[0] == frames.sum() and acc[-1] == 16
    assert parts + run.coalesced == 16 and parts < 16


def test_cancelled_run_releases_its_results(inline_ctx):
    frames = np.ones((16, 4, 4), dtype=np.float32)
    ds = inline_ctx.load("memory", data=frames, sig_dims=2, num_partitions=16)
    run = inline_ctx.run_udf_iter(dataset=ds, udf=WideSingleUDF(size=1 << 22))
    it = iter(run)
    next(it)
    run.cancel()
    with pytest.raises(UDFRunCancelled):
        next(it)
    assert run.done and run._coordinator.outbox.empty


# -- 5. a dead progress actor is replaced --------------------------------------------------------

@pytest.mark.ray
def test_dead_progress_actor_is_replaced_and_progress_stays_exact(ray_context, data, monkeypatch):
    import ray

    ex = ray_context.executor
    dead = ex.progress.actor
    ray.kill(dead, no_restart=True)
    polls = []
    take = ex.progress.take

    def counting_take(run_id, sink):
        polls.append(run_id)
        return take(run_id, sink)

    monkeypatch.setattr(ex.progress, "take", counting_take)
    ds = ray_context.load("memory", data=data, num_partitions=2)  # 24 frames per partition
    for _ in range(2):
        reporter = CountingReporter()
        res = ray_context.run_udf(dataset=ds, udf=SlowTileUDF(delay=0.02, depth=2), progress=reporter)
        np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(2, 3)))
        assert sum(reporter.advances) == 48 and reporter.finished
    assert ex.progress.actor is not dead
    assert len(reporter.advances) > 2  # per tile again, through the new actor
    assert len(polls) < 100  # re-polling the dead actor spun thousands of times


# -- errors and inputs ---------------------------------------------------------------------------

def test_error_in_merge_names_the_udf_and_partition(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=4)  # partitions start at frames 0, 12, 24, 36
    # On Ray a worker's segment starts as the first partition it ran (runtime/segments.py): if that was
    # partition 1, its failing merge happens on the coordinator, with the segment's partitions named.
    with pytest.raises(UDFException, match=r"BadMergeUDF\.merge raised ValueError: deliberate failure in merge "
                                           r"while merging (partition 1 \(frames 12:24\)|"
                                           r"partitions \[(\d+, )*1(, \d+)*\] \(merged on worker)"):
        ctx.run_udf(dataset=ds, udf=BadMergeUDF(bad_start=12))


def test_any_iterable_of_udfs_is_a_list_of_udfs(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=2)
    res = ctx.run_udf(dataset=ds, udf=(u for u in (rt.SumUDF(dtype="int64"), rt.SumSigUDF())))
    assert isinstance(res, list) and len(res) == 2
    assert np.array_equal(res[0]["intensity"].data, data.sum(axis=(0, 1)))
    np.testing.assert_allclose(res[1]["intensity"].data, data.sum(axis=(2, 3)))
