"""`Context(coordinator="actor")`: runs coordinated by an actor on the cluster.

Results are compared with numpy on the same data; viewers in this process
and in other processes (``Context.attach``), a detached run that outlives
its driver, a driver that dies (its actor ends itself), a worker killed
mid-run, progress, and bad input.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import anyio
import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import ConfigValidationError, ExecutorError, RunEnded, UDFRunCancelled
from raytile.runtime.progress import ProgressReporter

from _ray_udfs import RingUDF, ScaledSumUDF, ring_mask
from _wait import wait_until

pytestmark = pytest.mark.ray

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def actx(ray_context):
    """An actor-coordinated Context on the session's cluster (its own 2 workers)."""
    ctx = rt.Context(coordinator="actor", cpus=2)
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(5).integers(0, 1000, size=(8, 6, 12, 12)).astype(np.uint16)


@pytest.fixture(scope="module")
def raw_path(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("actor") / "data.raw"
    data.tofile(path)
    return str(path)


def _coordinator_names() -> set[str]:
    import ray

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "raytile" and a["name"].startswith("raytile-coordinator-")}


def test_runs_match_numpy_on_memory_and_raw_data(actx, data, raw_path):
    assert actx.coordinator == "actor"
    with pytest.raises(ExecutorError, match="coordinator actor"):
        actx.executor
    roi = np.zeros(data.shape[:2], dtype=bool)
    roi[1:6, 2:5] = True
    for ds in (actx.load("memory", data=data, num_partitions=4),
               actx.load("raw", path=raw_path, nav_shape=data.shape[:2], sig_shape=data.shape[2:],
                         dtype="uint16", num_partitions=5)):
        res = actx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()])
        np.testing.assert_allclose(res[0]["intensity"].data, data.sum(axis=(0, 1)))
        np.testing.assert_allclose(res[1]["intensity"].data, data.sum(axis=(2, 3)))
        masked = actx.run_udf(dataset=ds, udf=rt.SumUDF(), roi=roi)
        np.testing.assert_allclose(masked["intensity"].data, data[roi].sum(axis=0))
        run = actx.run_udf_iter(dataset=ds, udf=rt.SumSigUDF())
        parts = list(run)
        assert parts[-1].finished and all(not p.finished for p in parts[:-1])
        np.testing.assert_allclose(parts[-1].buffers[0]["intensity"].data, data.sum(axis=(2, 3)))
        assert run.stats["results"] >= 1 and run.stats["bytes"] > 0


def test_async_iteration(actx, data):
    ds = actx.load("memory", data=data, num_partitions=4)

    async def main():
        last = None
        async for part in actx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), sync=False):
            last = part
        return last, await actx.run_udf(dataset=ds, udf=rt.SumSigUDF(), sync=False)

    last, sums = anyio.run(main)
    np.testing.assert_allclose(last.buffers[0]["intensity"].data, data.sum(axis=(0, 1)))
    np.testing.assert_allclose(sums["intensity"].data, data.sum(axis=(2, 3)))


def test_patch_with_recompute_equals_a_fresh_run(actx, data):
    ds = actx.load("memory", data=data, num_partitions=8)
    run = actx.run_udf_iter(dataset=ds, udf=RingUDF(ri=1.0, ro=3.0, delay=0.05))
    final = None
    for i, part in enumerate(run):
        if i == 0:
            run.update_parameters([{"ro": 6.0}], recompute=True)
        final = part
    assert final is not None and set(final.param_versions.values()) == {1}
    f = data.reshape(-1, *data.shape[2:]).astype(np.float64)
    np.testing.assert_allclose(final.buffers[0]["intensity"].data.reshape(-1),
                               (f * ring_mask(data.shape[2:], 1.0, 6.0)).sum(axis=(1, 2)))


def test_late_recompute_patch_computes_again(actx, data):
    """Patched from the loop on the final snapshot (which comes with the run's end from the actor): the
    run computes again and ends with a fresh run's result; a patch after the end raises RunEnded."""
    ds = actx.load("memory", data=data, num_partitions=4)
    run = actx.run_udf_iter(dataset=ds, udf=RingUDF(ri=1.0, ro=3.0))
    finals = []
    for part in run:
        if part.finished:
            finals.append(part)
            if len(finals) == 1:
                run.update_parameters([{"ro": 6.0}], recompute=True)
    assert len(finals) == 2, "the run did not compute again"
    assert finals[-1].param_versions == {i: 1 for i in range(4)}
    f = data.reshape(-1, *data.shape[2:]).astype(np.float64)
    for final, ro in zip(finals, (3.0, 6.0)):
        np.testing.assert_allclose(final.buffers[0]["intensity"].data.reshape(-1),
                                   (f * ring_mask(data.shape[2:], 1.0, ro)).sum(axis=(1, 2)))
    with pytest.raises(RunEnded, match="has ended"):
        run.update_parameters([{"ro": 2.0}], recompute=True)


def test_progress_reaches_every_frame(actx, data):
    class Record(ProgressReporter):
        def __init__(self):
            self.total, self.frames, self.finished = None, 0, False

        def start(self, run_id, total_frames, total_partitions):
            self.total = total_frames

        def advance(self, run_id, frames):
            self.frames += frames

        def finish(self, run_id):
            self.finished = True

    rec = Record()
    ds = actx.load("memory", data=data, num_partitions=4)
    res = actx.run_udf(dataset=ds, udf=ScaledSumUDF(delay=0.05), progress=rec)
    np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(0, 1)))
    assert rec.total == rec.frames == 48 and rec.finished


def test_several_viewers_in_one_process(actx, data):
    ds = actx.load("memory", data=data, num_partitions=8)
    run = actx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(scale=2.0, delay=0.15))
    viewer = actx.attach(run.run_id)
    quitter = actx.attach(run.run_id)
    seen = {}

    def watch():
        seen["viewer"] = list(viewer)[-1]

    t = threading.Thread(target=watch)
    t.start()
    for _ in quitter:
        break  # a viewer that leaves does not cancel the run
    owner = list(run)
    t.join(30)
    expected = 2.0 * data.sum(axis=(0, 1))
    np.testing.assert_allclose(owner[-1].buffers[0]["intensity"].data, expected)
    np.testing.assert_allclose(seen["viewer"].buffers[0]["intensity"].data, expected)
    assert seen["viewer"].finished


def test_runs_lists_a_live_run_in_the_api_and_the_cli(actx, data, capsys):
    from raytile.cli import main

    ds = actx.load("memory", data=data, num_partitions=8)
    run = actx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(delay=0.3))
    listed = {r["run_id"]: r for r in actx.runs()}
    assert run.run_id in listed
    assert listed[run.run_id]["udfs"] == ["ScaledSumUDF"] and not listed[run.run_id]["detached"]
    assert main(["runs"]) == 0
    assert run.run_id in capsys.readouterr().out
    final = list(run)[-1]
    np.testing.assert_allclose(final.buffers[0]["intensity"].data, data.sum(axis=(0, 1)))


def test_a_viewer_can_cancel_the_run_for_everyone(actx, data):
    ds = actx.load("memory", data=data, num_partitions=8)
    run = actx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(delay=0.3))
    actx.attach(run.run_id).cancel()
    with pytest.raises(UDFRunCancelled):
        for _ in run:
            pass
    res = actx.run_udf(dataset=ds, udf=rt.SumUDF())  # the workers are free again
    np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(0, 1)))


def test_worker_killed_mid_run_gives_the_exact_result(actx, data):
    ds = actx.load("memory", data=data, num_partitions=8)
    run = actx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(delay=0.2))
    pid = actx.workers[0]["pid"]
    final = None
    for i, part in enumerate(run):
        if i == 0:
            os.kill(pid, signal.SIGKILL)
        final = part
    np.testing.assert_allclose(final.buffers[0]["intensity"].data, data.sum(axis=(0, 1)))
    # the pool replaced it; a new actor process starts at Ray's niceness 15: slow on a busy machine
    wait_until(lambda: len(actx.workers) >= 2, timeout=90, interval=0.2, what="a replacement worker")
    assert pid not in {w["pid"] for w in actx.workers} and len(actx.workers) == 2


def test_a_killed_coordinator_actor_fails_its_runs_clearly_and_is_replaced(ray_context, data):
    import ray

    from raytile.common.errors import CoordinatorDied

    with rt.Context(coordinator="actor", cpus=2) as ctx:
        ds = ctx.load("memory", data=data, num_partitions=8)
        run = ctx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(delay=0.3))
        first = ctx._host.actor
        with pytest.raises(CoordinatorDied, match="died"):
            for i, _ in enumerate(run):
                if i == 0:
                    ray.kill(first, no_restart=True)
        res = ctx.run_udf(dataset=ds, udf=rt.SumUDF())  # a new actor, the memory data shared with it again
        np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(0, 1)))
        assert ctx._host.actor is not first


def test_memory_frames_are_released_with_the_dataset(actx, data):
    import gc

    import ray

    host = actx._host

    def shared() -> int:
        return ray.get(host.actor.describe.remote())["shared_datasets"]

    gc.collect()  # data sets of earlier tests
    time.sleep(0.5)
    before = shared()
    ds = actx.load("memory", data=data.copy(), num_partitions=2)
    assert shared() == before + 1
    del ds
    gc.collect()
    wait_until(lambda: shared() == before, timeout=10, interval=0.1, what="the shared frames released")
    assert shared() == before


def _run_driver(script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    import ray

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (TESTS_DIR, os.environ.get("PYTHONPATH")) if p),
               RAY_ADDRESS=ray.get_runtime_context().gcs_address)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_detached_run_outlives_its_driver_and_another_process_attaches(actx, data, raw_path):
    proc = _run_driver(f"""
        import os, numpy as np, ray, raytile as rt
        from _ray_udfs import ScaledSumUDF
        ray.init(address="auto", runtime_env={{"env_vars": {{"PYTHONPATH": os.environ["PYTHONPATH"]}}}})
        ctx = rt.Context(coordinator="actor", cpus=2)
        ds = ctx.load("raw", path={raw_path!r}, nav_shape={data.shape[:2]}, sig_shape={data.shape[2:]},
                      dtype="uint16", num_partitions=8)
        run = ctx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(scale=3.0, delay=0.4), detached=True)
        print("RUN", run.run_id, flush=True)
        ctx.close()  # leaves the detached run going; the process exits now
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = proc.stdout.split("RUN ")[1].split()[0]
    viewer = actx.attach(run_id)
    last = list(viewer)[-1]
    assert last.finished
    np.testing.assert_allclose(last.buffers[0]["intensity"].data, 3.0 * data.sum(axis=(0, 1)))
    again = list(actx.attach(run_id))  # the result is kept for later viewers
    np.testing.assert_allclose(again[-1].buffers[0]["intensity"].data, 3.0 * data.sum(axis=(0, 1)))
    import ray

    from raytile.actors.actor_host import find_run

    ray.kill(find_run(run_id))  # instead of waiting DETACHED_KEEP_S


def test_driver_that_dies_leaves_no_coordinator_behind(actx, data):
    before = _coordinator_names()
    proc = _run_driver(f"""
        import os, numpy as np, ray, raytile as rt
        from _ray_udfs import ScaledSumUDF
        ray.init(address="auto", runtime_env={{"env_vars": {{"PYTHONPATH": os.environ["PYTHONPATH"]}}}})
        ctx = rt.Context(coordinator="actor", cpus=2)
        ds = ctx.load("memory", data=np.ones({data.shape}, dtype="float32"), num_partitions=8)
        run = ctx.run_udf_iter(dataset=ds, udf=ScaledSumUDF(delay=2.0))
        next(iter(run))
        print("RUN", run.run_id, flush=True)
        os._exit(0)  # no close, no cleanup
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = proc.stdout.split("RUN ")[1].split()[0]
    wait_until(lambda: not (_coordinator_names() - before), timeout=60, interval=0.5,
               what="the dead driver's coordinator actor gone")
    assert not (_coordinator_names() - before), "the dead driver's coordinator actor is still there"
    with pytest.raises(ExecutorError, match="no run"):
        actx.attach(run_id)


def test_bad_input_is_named(actx, inline_ctx, ray_context, data):
    with pytest.raises(ConfigValidationError, match="coordinator"):
        rt.Context(coordinator="cluster")
    with pytest.raises(ConfigValidationError, match="executor='ray'"):
        rt.Context(executor="inline", coordinator="actor")
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    with pytest.raises(ConfigValidationError, match="detached=True"):
        inline_ctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), detached=True)
    with pytest.raises(ConfigValidationError, match="detached must be"):
        inline_ctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), detached="yes")
    with pytest.raises(ExecutorError, match="coordinator='actor'"):
        ray_context.attach("0" * 32)
    assert ray_context.runs() == [] and inline_ctx.runs() == []  # driver-coordinated runs are not reachable
    with pytest.raises(ExecutorError, match="no run"):
        actx.attach("0" * 32)
    with pytest.raises(ExecutorError, match="run_id must be"):
        actx.attach(None)
