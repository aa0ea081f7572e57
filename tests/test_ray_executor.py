"""The Ray executor: actors, zero-copy memory partitions, UDF errors, dead workers, progress, leaks."""

from __future__ import annotations

import gc
import os
import re
import threading
import time

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import UDFException
from raytile.runtime.progress import ProgressReporter

from _ray_udfs import FailingUDF, InputFlagsUDF, RefOffsetSumUDF, ScaledSumUDF, SlowTileUDF, WriteInputUDF
from _wait import wait_until

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(3).integers(0, 1000, size=(8, 6, 12, 10)).astype(np.uint16)


def test_actors_are_created_once_and_reused(ray_context, data):
    ex = ray_context.executor
    before = [a._actor_id for a in ex.actors]  # waits for the actors the Context started with
    assert ex.num_workers == 2 and ex.max_in_flight == 4 and ex.device_classes == {"cpu"}
    ds = ray_context.load("memory", data=data, num_partitions=4)
    for _ in range(2):
        res = ray_context.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
        assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))
    assert [a._actor_id for a in ex.actors] == before
    assert {w["threads"] for w in ex.workers} == {1}
    assert all(w["pid"] != os.getpid() for w in ex.workers)


def test_memory_partitions_are_zero_copy_and_read_only(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=4)
    gc.collect()  # data sets of earlier tests let go of their shared frames now, not between the two counts
    shared = len(ray_context.executor.shared)
    res = ray_context.run_udf(dataset=ds, udf=InputFlagsUDF())
    assert np.array_equal(res["sum"].data, data.sum(axis=(0, 1)))
    assert not res["writeable"].data.any()          # read-only views ...
    assert not res["owns"].data.any()               # ... of memory no numpy array owns (the object store)
    assert not np.isin(res["pid"].data, [os.getpid()]).any()
    # put once per Context: a second run ships no new objects
    ray_context.run_udf(dataset=ds, udf=InputFlagsUDF())
    assert len(ray_context.executor.shared) == shared


def test_udf_writing_to_its_input_gets_a_clear_error(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=2)
    with pytest.raises(UDFException, match=r"WriteInputUDF.process_tile tried to write to its input"):
        ray_context.run_udf(dataset=ds, udf=WriteInputUDF())


def test_udf_exception_names_udf_partition_and_worker_traceback(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=4)
    with pytest.raises(UDFException) as info:
        ray_context.run_udf(dataset=ds, udf=FailingUDF(bad_frame=30))
    msg = str(info.value)
    assert "FailingUDF.process_frame raised RuntimeError" in msg
    assert "partition 2 (frames 24:36)" in msg
    assert "deliberate failure" in info.value.worker_traceback
    assert "_ray_udfs.py" in info.value.worker_traceback
    # the Context stays usable
    res = ray_context.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))


def test_killed_worker_is_replaced_and_result_equals_clean_run(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=8)
    clean = ray_context.run_udf(dataset=ds, udf=ScaledSumUDF(scale=2.0))["intensity"].data
    ex = ray_context.executor
    victim = ex.actors[0]
    run = ray_context.run_udf_iter(dataset=ds, udf=ScaledSumUDF(scale=2.0, delay=0.15))
    parts = iter(run)
    first = next(parts)
    assert not first.finished
    ray.kill(victim, no_restart=True)
    last = first
    for last in parts:
        pass
    assert last.finished and last.partitions_done == 8
    np.testing.assert_array_equal(last.buffers[0]["intensity"].data, clean)
    np.testing.assert_array_equal(clean, 2.0 * data.sum(axis=(0, 1)))
    # the replacement takes tasks once it is alive
    wait_until(lambda: len(ex.actors) >= 2, timeout=60, what="a replacement actor")
    assert victim._actor_id not in [a._actor_id for a in ex.actors]
    assert len(ex.actors) == 2
    ray.get([a.ping.remote() for a in ex.actors], timeout=60)


class CountingReporter(ProgressReporter):
    def __init__(self):
        self.lock = threading.Lock()
        self.total = None
        self.advances: list[int] = []
        self.partitions: list[int] = []
        self.finished = False

    def start(self, run_id, total_frames, total_partitions):
        self.total = (total_frames, total_partitions)

    def advance(self, run_id, frames):
        with self.lock:
            self.advances.append(frames)

    def partition_done(self, run_id, partitions_done):
        self.partitions.append(partitions_done)

    def finish(self, run_id):
        self.finished = True


def test_per_tile_progress_adds_up(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=2)  # 24 frames per partition
    reporter = CountingReporter()
    res = ray_context.run_udf(dataset=ds, udf=SlowTileUDF(delay=0.03, depth=2), progress=reporter)
    np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(2, 3)))
    assert reporter.total == (48, 2) and reporter.finished
    assert sum(reporter.advances) == 48
    # per tile, not per partition: more progress messages than partitions, each smaller than a partition
    assert len(reporter.advances) > 2 and max(reporter.advances) < 24
    assert reporter.partitions[-1] == 2 and reporter.partitions == sorted(set(reporter.partitions))  # merged near the data: may arrive together


def test_tqdm_progress_bar(ray_context, data, capsys):
    ds = ray_context.load("memory", data=data, num_partitions=2)
    res = ray_context.run_udf(dataset=ds, udf=rt.SumSigUDF(), progress=True)
    np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)
    err = capsys.readouterr().err
    assert re.search(r"100%.*48(\.0)?/48(\.0)?", err), err


def test_file_data_set_is_read_by_workers(ray_context, data, tmp_path):
    p = tmp_path / "d.raw"
    data.tofile(p)
    ds = ray_context.load("raw", path=p, nav_shape=(8, 6), sig_shape=(12, 10), dtype="uint16", num_partitions=3)
    res = ray_context.run_udf(dataset=ds, udf=[rt.SumUDF(dtype="int64"), rt.SumSigUDF()])
    assert np.array_equal(res[0]["intensity"].data, data.sum(axis=(0, 1)))
    np.testing.assert_allclose(res[1]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)


def test_close_kills_actors(ray_context, data):
    from ray.util.state import list_actors  # noqa: F401  (state API present)

    ctx = rt.Context(executor="ray", cpus=1)  # joins the session's Ray, shares its CPUs
    ex = ctx.executor
    assert ex.num_workers == 1
    ds = ctx.load("memory", data=data, num_partitions=2)
    res = ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))
    actors = ex.actors
    ctx.close()

    def dead(a) -> bool:
        try:
            ray.get(a.ping.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return True
        return False

    wait_until(lambda: all(dead(a) for a in actors), timeout=30, interval=0.1,
               what="every actor ended by Context.close()")


def test_task_is_resubmitted_when_its_worker_lacks_a_cached_value(ray_context, data, monkeypatch):
    """Tasks carry memory frames' refs only the first time an actor needs them (raytile.actors.cache).

    If the driver's ledger lists a value the worker does not hold (it evicted
    it, or the task that carried it was cancelled while queued), the task comes
    back unrun and is submitted again with the value; the result is unchanged.
    """
    from raytile.runtime.executor import TaskNotRun

    fresh = data + 1  # new arrays: no worker has their frames yet
    ex = ray_context.executor
    ds = ray_context.load("memory", data=fresh, num_partitions=4)
    keys = [ex.shared.ref(id(ds), p.idx).hex() for p in ds.get_partitions()]
    for slot in ex.pool.slots:  # the ledgers claim every worker holds every partition
        for key in keys:
            slot.ledgers["data"].ship(key)
    unrun = []
    result = ex.result

    def counting_result(handle):
        try:
            return result(handle)
        except TaskNotRun:
            unrun.append(handle.task.idx)
            raise

    monkeypatch.setattr(ex, "result", counting_result)
    res = ray_context.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, fresh.sum(axis=(0, 1)))
    assert sorted(set(unrun)) == [0, 1, 2, 3]


def test_udf_parameters_holding_an_object_ref(ray_context, data):
    """Parameters and tasks pickle outside Ray where they can; an object ref in them goes through Ray."""
    from raytile.actors.cache import pack

    offset = ray.put(np.full(data.shape[2:], 7.0))
    assert pack({"offset": offset}) is None
    ds = ray_context.load("memory", data=data, num_partitions=4)
    res = ray_context.run_udf(dataset=ds, udf=RefOffsetSumUDF(offset_ref=offset))
    np.testing.assert_array_equal(res["intensity"].data, data.sum(axis=(0, 1)) + 7.0 * 48)


def test_a_ray_raytile_starts_sends_results_up_to_1_mib_inside_the_reply(ray_context):
    """The session's Ray is started by raytile (make_local): a 900 KB reply (a partition's result
    buffers) is not put into the object store, a 2 MiB one is (Ray's default puts anything over 100 KB)."""
    from raytile.actors.ray_start import NEW_INSTANCE_CONFIG

    assert NEW_INSTANCE_CONFIG["max_direct_call_object_size"] == 1024 * 1024

    @ray.remote(num_cpus=0)
    def frame(nbytes: int) -> np.ndarray:
        return np.ones(nbytes, np.uint8)

    refs = {n: frame.remote(n) for n in (900_000, 2 * 1024 * 1024)}
    assert [ray.get(r).sum() for r in refs.values()] == list(refs)
    where = ray.experimental.get_object_locations(list(refs.values()))
    assert where[refs[900_000]]["node_ids"] == []
    assert len(where[refs[2 * 1024 * 1024]]["node_ids"]) == 1


def test_workers_that_fail_to_start_fail_the_first_run_with_their_error(ray_context, data, monkeypatch):
    """The Context returns before its workers started (issue 35): a worker that cannot start must still
    reach the user, at the first run, with its own error, and the pool must not start it again and again."""
    import raytile.actors.pool as pool_module
    from raytile.actors.executor import RayExecutor
    from raytile.common.errors import ExecutorError

    class BrokenWorker:  # defined here: Ray ships it by value
        def __init__(self, *args, **kwargs):
            raise RuntimeError("the detector library is missing")

        def ping(self):
            return {}

    monkeypatch.setattr(pool_module, "_RemoteWorker", ray.remote(BrokenWorker))
    ex = RayExecutor(cpus=2, cpu_share=0.0, start_timeout=60)  # 0: beside the session's workers
    try:
        assert ex.num_workers == 2 and not ex.pool.ready  # returned at once: the actors are starting
        broken = rt.Context(executor=ex)
        t0 = time.monotonic()
        with pytest.raises(ExecutorError, match="failed to start") as info:
            broken.run_udf(dataset=broken.load("memory", data=data, num_partitions=2), udf=rt.SumUDF())
        assert "the detector library is missing" in str(info.value)
        assert time.monotonic() - t0 < 60  # the run did not wait for its starvation limit
        time.sleep(2.5)  # two refreshes of the pool: it starts no replacement for a pool that never started
        assert ex.pool.slots == [] and ex.pool.startup_error is not None
        with pytest.raises(ExecutorError, match="the detector library is missing"):
            ex.workers
    finally:
        ex.close()
    # the session's own Context is untouched
    res = ray_context.run_udf(dataset=ray_context.load("memory", data=data), udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))
