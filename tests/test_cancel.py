"""Cancellation: run.cancel(), leaving the loop, cancelling the consumer; the Context stays usable."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest
import trio

import raytile as rt
from raytile.common.errors import UDFRunCancelled

from _ray_udfs import LoggingTileUDF


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(11).integers(0, 500, size=(8, 8, 6, 6)).astype(np.uint16)


def _lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _assert_work_stopped(log, total_tiles):
    """No tile is processed any more, and far fewer than all were."""
    time.sleep(0.3)
    settled = _lines(log)
    time.sleep(0.4)
    assert _lines(log) == settled, "workers kept processing tiles after cancellation"
    assert settled < total_tiles // 2


def _assert_usable(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=4)
    res = ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
    assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))


def test_run_cancel_raises_in_consumer(ctx, data, tmp_path):
    log = tmp_path / "tiles.log"
    ds = ctx.load("memory", data=data, num_partitions=8)  # 8 tiles per partition, 64 in all
    run = ctx.run_udf_iter(dataset=ds, udf=LoggingTileUDF(delay=0.05, depth=1, log=str(log)))
    seen = []
    with pytest.raises(UDFRunCancelled):
        for part in run:
            seen.append(part)
            run.cancel()
    assert len(seen) == 1
    _assert_work_stopped(log, 64)
    _assert_usable(ctx, data)


def test_breaking_out_of_async_for_stops_the_run(ctx, data, tmp_path):
    log = tmp_path / "tiles.log"
    ds = ctx.load("memory", data=data, num_partitions=8)

    async def main():
        run = ctx.run_udf_iter(dataset=ds, udf=LoggingTileUDF(delay=0.05, depth=1, log=str(log)), sync=False)
        async for _ in run:
            break
        await anyio.sleep(0.05)  # the async generator is finalised on the event loop
        return run

    run = anyio.run(main)
    run._coordinator.join(timeout=10)
    assert run._coordinator.cancelled
    _assert_work_stopped(log, 64)
    _assert_usable(ctx, data)


def test_cancelling_the_consumer_task_stops_the_run(ctx, data, tmp_path):
    log = tmp_path / "tiles.log"
    ds = ctx.load("memory", data=data, num_partitions=8)
    runs = []

    async def consume():
        run = ctx.run_udf_iter(dataset=ds, udf=LoggingTileUDF(delay=0.05, depth=1, log=str(log)), sync=False)
        runs.append(run)
        async for _ in run:
            pass

    async def main():
        with trio.move_on_after(0.5) as scope:
            await consume()
        return scope.cancelled_caught

    assert trio.run(main)
    runs[0]._coordinator.join(timeout=10)
    assert runs[0]._coordinator.cancelled
    _assert_work_stopped(log, 64)
    _assert_usable(ctx, data)
