"""Ray's GCS keeps no task events per partition (issue 37, item 5): a service that runs for days
must not grow its GCS by ~3.7 KB a partition task.

Read from the GCS itself (its ``GetTaskEvents`` RPC, what ``ray list tasks`` reads): the tasks it
holds events of, all of them and those of raytile's per-partition and per-poll actor methods.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import raytile as rt

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

#: raytile's actor methods called per partition, tile report or result poll.
PER_PARTITION = ("WorkerActor.run_task", "WorkerActor.flush_run", "ProgressActor.add", "ProgressActor.take",
                 "CoordinatorActor.next", "CoordinatorActor.feed")
RUNS, PARTITIONS = 6, 32


def _task_events(name: str | None = None) -> tuple[int, int]:
    """(tasks the GCS holds events of, of those the ones named ``name``; all when None)."""
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = init_grpc_channel(ray.get_runtime_context().gcs_address, asynchronous=False)
    try:
        stub = gcs_service_pb2_grpc.TaskInfoGcsServiceStub(channel)
        request = gcs_service_pb2.GetTaskEventsRequest(limit=100_000)
        if name is not None:
            flt = gcs_service_pb2.GetTaskEventsRequest.Filters.TaskNameFilter(task_name=name)
            request.filters.task_name_filters.append(flt)
        reply = stub.GetTaskEvents(request, timeout=30)
        return reply.num_total_stored, len(reply.events_by_task)
    finally:
        channel.close()


def _settled_total() -> int:
    """The GCS's task count once the workers' pending reports (sent each second) are in."""
    time.sleep(2.5)
    return _task_events()[0]


def _run_many(ctx, progress: bool) -> None:
    data = np.arange(PARTITIONS * 4 * 4 * 4, dtype=np.float32).reshape(PARTITIONS, 4, 4, 4)
    ds = ctx.load("memory", data=data, num_partitions=PARTITIONS)
    for _ in range(RUNS):
        res = ctx.run_udf(dataset=ds, udf=rt.SumUDF(), progress=progress)
        np.testing.assert_array_equal(res["intensity"].data, data.sum(axis=(0, 1)))


@pytest.mark.parametrize("coordinator", ["driver", "actor"])
def test_runs_leave_no_task_events_per_partition(ray_context, coordinator):
    ctx = ray_context if coordinator == "driver" else rt.Context(coordinator="actor", cpus=2)
    try:
        _run_many(ctx, progress=False)  # warm: workers started, data shared
        before = _settled_total()
        _run_many(ctx, progress=coordinator == "driver")
        after = _settled_total()
    finally:
        if ctx is not ray_context:
            ctx.close()
    for name in PER_PARTITION:
        assert _task_events(name)[1] == 0, f"the GCS keeps task events of {name}"
    # a few calls a run at most (the coordinator actor's start, status, leave...), never one a partition
    assert after - before < RUNS * PARTITIONS // 4, (before, after)


def test_the_gcs_keeps_a_bounded_number_of_tasks(ray_context):
    """On a Ray raytile started, the GCS keeps the events of 1,000 tasks at most (Ray: 100,000)."""
    from ray._raylet import Config

    from raytile.actors.ray_start import NEW_INSTANCE_CONFIG

    assert Config.task_events_max_num_task_in_gcs() == NEW_INSTANCE_CONFIG["task_events_max_num_task_in_gcs"]
    assert NEW_INSTANCE_CONFIG["task_events_max_num_task_in_gcs"] <= 1_000
