"""Async iteration and awaiting runs, under asyncio and trio; concurrent runs on one Context."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import trio

import raytile as rt

from _ray_udfs import RingUDF, ScaledSumUDF, ring_mask


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(5).integers(0, 500, size=(6, 8, 10, 12)).astype(np.uint16)


async def _collect(ctx, ds, udf):
    parts = []
    run = ctx.run_udf_iter(dataset=ds, udf=udf, sync=False)
    async for part in run:
        parts.append(part)
    return parts, run.coalesced


def _check_stream(stream, data):
    """Partials are cumulative and latest-wins: each one delivered or folded into a later one."""
    parts, coalesced = stream
    assert parts and parts[-1].finished and parts[-1].partitions_done == parts[-1].partitions_total
    done = [p.partitions_done for p in parts]
    assert done == sorted(set(done))
    assert len(parts) + coalesced == parts[-1].partitions_total
    for p in parts:
        assert p.damage.data.sum() == p.partitions_done * data.shape[0] * data.shape[1] // p.partitions_total
    np.testing.assert_allclose(parts[-1].buffers[0]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)


@pytest.mark.asyncio
async def test_async_for_under_asyncio(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=4)
    _check_stream(await _collect(ctx, ds, rt.SumSigUDF()), data)
    res = await ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"), sync=False)
    assert np.array_equal(res["intensity"].data, data.sum(axis=(0, 1)))


def test_async_for_under_trio(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=4)

    async def main():
        parts = await _collect(ctx, ds, rt.SumSigUDF())
        res = await ctx.run_udf(dataset=ds, udf=[rt.SumUDF(dtype="int64"), rt.SumSigUDF()], sync=False)
        return parts, res

    parts, res = trio.run(main)
    _check_stream(parts, data)
    assert np.array_equal(res[0]["intensity"].data, data.sum(axis=(0, 1)))


def _references(data):
    f = data.reshape(-1, *data.shape[2:]).astype(np.float64)
    return {
        "sum": data.sum(axis=(0, 1)),
        "sumsig": data.sum(axis=(2, 3)),
        "scaled": 3.0 * f.sum(axis=0),
        "ring": (f * ring_mask(data.shape[2:], 1.0, 4.0)).sum(axis=(1, 2)).reshape(data.shape[:2]),
    }


async def _four_runs(ctx, ds, gather):
    udfs = {"sum": rt.SumUDF(dtype="int64"), "sumsig": rt.SumSigUDF(), "scaled": ScaledSumUDF(scale=3.0, delay=0.02),
            "ring": RingUDF(ri=1.0, ro=4.0, delay=0.02)}
    runs = [ctx.run_udf(dataset=ds, udf=u, sync=False) for u in udfs.values()]
    return dict(zip(udfs, await gather(*runs)))


def _check_four(results, data):
    ref = _references(data)
    assert np.array_equal(results["sum"]["intensity"].data, ref["sum"])
    np.testing.assert_allclose(results["sumsig"]["intensity"].data, ref["sumsig"], rtol=1e-5)
    np.testing.assert_allclose(results["scaled"]["intensity"].data, ref["scaled"])
    np.testing.assert_allclose(results["ring"]["intensity"].data, ref["ring"])


@pytest.mark.ray
@pytest.mark.asyncio
async def test_four_concurrent_runs_asyncio(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=6)
    _check_four(await _four_runs(ray_context, ds, asyncio.gather), data)


@pytest.mark.ray
def test_four_concurrent_runs_trio(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=6)

    async def gather(*aws):
        out = [None] * len(aws)

        async def one(i, aw):
            out[i] = await aw

        async with trio.open_nursery() as n:
            for i, aw in enumerate(aws):
                n.start_soon(one, i, aw)
        return out

    _check_four(trio.run(_four_runs, ray_context, ds, gather), data)
