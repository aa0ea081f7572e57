"""Soak: 300 runs on one Context leave the driver and the cluster as they were after warm-up."""

from __future__ import annotations

import gc
from collections import Counter
import os
import re
import threading
import time

import anyio
import numpy as np
import pytest

import raytile as rt
from raytile.runtime.progress import ProgressReporter

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

RUNS = 300
WARM_UP = 60


class _Frames(ProgressReporter):
    def __init__(self):
        self.frames = 0

    def advance(self, run_id, frames):
        self.frames += frames


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        kb = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return kb / 1024


def _plasma_objects() -> tuple[int, int]:
    """(MiB, objects) in the object store of the cluster, as `ray memory --stats-only` reports them."""
    from ray._private.internal_api import memory_summary

    text = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    m = re.search(r"Plasma memory usage (\d+) MiB, (\d+) objects", text)
    assert m, text
    return int(m.group(1)), int(m.group(2))


#: Threads of the gRPC client that reads the object store stats (the measurement's own, not the runs').
_MEASUREMENT_THREADS = ("grpc_", "event_engine")


def _os_threads() -> list[str]:
    """Names of this process's OS threads (Ray's C++ threads included), less the measurement's."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile (ENOENT or ESRCH)
            continue
        if not name.startswith(_MEASUREMENT_THREADS):
            names.append(name)
    return sorted(names)


def _alive_actors() -> frozenset[tuple[str, str]]:
    """(actor id, class name) of every live actor in the cluster.

    The cluster is the test session's: an actor another test left to stop itself may end during the
    soak, so the check is that no actor the runs started is still alive, not that the count is equal.
    """
    table = ray._private.state.state.actor_table(None)
    return frozenset(
        (actor_id, a.get("ActorClassName", "?")) for actor_id, a in table.items() if a["State"] == "ALIVE"
    )


def _open_fds() -> dict[int, str]:
    """This process's open file descriptors and what each points to."""
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (or the listing's own descriptor)
            continue
    return fds


def _vitals() -> dict:
    time.sleep(1.0)  # short-lived threads (callbacks, idle worker threads) end
    gc.collect()
    mib, objects = _plasma_objects()
    return {
        "rss_mib": _rss_mib(),
        "fds": _open_fds(),
        "threads": threading.active_count(),
        "os_threads": _os_threads(),
        "actors": _alive_actors(),
        "plasma_mib": mib,
        "plasma_objects": objects,
    }


def _one_run(ctx, i: int, rng) -> None:
    data = rng.integers(0, 100, size=(4, 4, 16, 16)).astype(np.float32)  # a new data set each run
    ds = ctx.load("memory", data=data, num_partitions=2)
    kind = i % 4
    if kind == 0:
        res = ctx.run_udf(dataset=ds, udf=rt.SumUDF())
        np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(0, 1)), rtol=1e-5)
    elif kind == 1:
        parts = list(ctx.run_udf_iter(dataset=ds, udf=rt.SumSigUDF()))
        np.testing.assert_allclose(parts[-1].buffers[0]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)
    elif kind == 2:
        async def main():
            return await ctx.run_udf(dataset=ds, udf=rt.SumUDF(), sync=False)

        res = anyio.run(main)
        np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(0, 1)), rtol=1e-5)
    else:
        reporter = _Frames()
        ctx.run_udf(dataset=ds, udf=rt.SumSigUDF(), progress=reporter)
        assert reporter.frames == 16


def test_300_runs_leave_driver_and_cluster_flat(ray_context):
    rng = np.random.default_rng(0)
    for i in range(WARM_UP):
        _one_run(ray_context, i, rng)
    _vitals()  # the first look opens gRPC channels (and their threads) for the object store stats
    before = _vitals()
    for i in range(WARM_UP, RUNS):
        _one_run(ray_context, i, rng)
    ray_context.load("memory", data=np.zeros((1, 1, 2, 2)))  # the workers forget what was released
    after = _vitals()
    os_threads = (before.pop("os_threads"), after.pop("os_threads"))
    actors = (before.pop("actors"), after.pop("actors"))
    fds = (before.pop("fds"), after.pop("fds"))
    growth = {k: after[k] - before[k] for k in before}
    assert growth["rss_mib"] < 40, (before, after)
    opened = {fd: target for fd, target in fds[1].items() if fds[0].get(fd) != target}
    if len(opened) > 2:
        # a few descriptors opened once by something else (another test's background thread, a gRPC
        # channel) are no leak; a leak grows with the runs: run as many again, and none may be added
        for i in range(WARM_UP, RUNS):
            _one_run(ray_context, i, rng)
        ray_context.load("memory", data=np.zeros((1, 1, 2, 2)))
        again = _vitals()["fds"]
        added = {fd: target for fd, target in again.items() if fds[1].get(fd) != target}
        assert len(added) <= 2, f"descriptors opened during the runs and still open: {opened}, then {added}"
    new_threads = Counter(os_threads[1]) - Counter(os_threads[0])
    assert growth["threads"] <= 1 and sum(new_threads.values()) <= 1, new_threads
    assert not actors[1] - actors[0], f"actors started by the runs still alive: {sorted(actors[1] - actors[0])}"
    assert growth["plasma_mib"] <= 2 and growth["plasma_objects"] <= 8, (before, after)
