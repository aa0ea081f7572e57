"""Live parameter patching: versions per partition, recompute=True equals a fresh run, also for a
patch that comes after the last merge, and a patch after the run's end raises RunEnded."""

from __future__ import annotations

import numpy as np
import pytest

from raytile.common.errors import RunEnded, UDFException

from _ray_udfs import RingUDF, ScaledSumUDF, ring_mask


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(9).integers(0, 500, size=(8, 6, 12, 12)).astype(np.uint16)


def _ring_reference(data, ro):
    f = data.reshape(-1, *data.shape[2:]).astype(np.float64)
    return (f * ring_mask(data.shape[2:], 1.0, ro)).sum(axis=(1, 2))


def test_patch_halfway_versions_per_partition(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=8)
    run = ctx.run_udf_iter(dataset=ds, udf=RingUDF(ri=1.0, ro=3.0, delay=0.1))
    parts = []
    for part in run:
        parts.append(part)
        if len(parts) == 1:
            run.update_parameters([{"ro": 5.0}])
    final = parts[-1]
    assert final.finished and len(final.param_versions) == 8
    versions = final.param_versions
    assert set(versions.values()) == {0, 1}
    assert set(parts[0].param_versions.values()) == {0}  # merged before the patch
    # each partition's values are those of the radius its version had
    refs = {0: _ring_reference(data, 3.0), 1: _ring_reference(data, 5.0)}
    got = final.buffers[0]["intensity"].data.reshape(-1)
    for p in ds.get_partitions():
        sl = slice(p.start, p.stop)
        np.testing.assert_allclose(got[sl], refs[versions[p.idx]][sl])


def test_patch_with_recompute_equals_fresh_run(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=8)
    run = ctx.run_udf_iter(dataset=ds, udf=[RingUDF(ri=1.0, ro=3.0, delay=0.05), ScaledSumUDF(scale=1.0)])
    final = None
    for i, part in enumerate(run):
        if i == 0:  # mid-run: partials are few when workers merge near the data
            assert not part.finished
            run.update_parameters([{"ro": 6.0}, {"scale": 0.5}], recompute=True)
        final = part
    assert final.finished and set(final.param_versions.values()) == {1}
    fresh = ctx.run_udf(dataset=ds, udf=[RingUDF(ri=1.0, ro=6.0), ScaledSumUDF(scale=0.5)])
    np.testing.assert_array_equal(final.buffers[0]["intensity"].data, fresh[0]["intensity"].data)
    np.testing.assert_array_equal(final.buffers[1]["intensity"].data, fresh[1]["intensity"].data)
    np.testing.assert_allclose(fresh[0]["intensity"].data.reshape(-1), _ring_reference(data, 6.0))
    np.testing.assert_allclose(fresh[1]["intensity"].data, 0.5 * data.sum(axis=(0, 1)))


def test_bad_patch_is_rejected_in_the_caller(ctx, data):
    ds = ctx.load("memory", data=data, num_partitions=2)
    run = ctx.run_udf_iter(dataset=ds, udf=RingUDF(ri=1.0, ro=4.0))
    with pytest.raises(UDFException, match="1 dicts"):
        run.update_parameters([{}, {}])
    res = run.result()
    np.testing.assert_allclose(res.buffers[0]["intensity"].data.reshape(-1), _ring_reference(data, 4.0))


def test_late_recompute_patch_computes_again(ctx, data):
    """Patched from the loop on the final snapshot: every partition is merged, the end is not read yet.
    The run computes again and ends with a fresh run's result; a patch after the end raises."""
    ds = ctx.load("memory", data=data, num_partitions=4)
    run = ctx.run_udf_iter(dataset=ds, udf=RingUDF(ri=1.0, ro=3.0))
    parts = []
    for part in run:
        parts.append(part)
        if part.finished and len([p for p in parts if p.finished]) == 1:
            np.testing.assert_allclose(part.buffers[0]["intensity"].data.reshape(-1), _ring_reference(data, 3.0))
            with pytest.raises(UDFException, match="1 dicts"):  # a bad late patch changes nothing
                run.update_parameters([{}, {}], recompute=True)
            run.update_parameters([{"ro": 6.0}], recompute=True)
    final = parts[-1]
    assert sum(p.finished for p in parts) == 2, "the run did not compute again"
    assert final.finished and final.param_versions == {i: 1 for i in range(4)}
    np.testing.assert_allclose(final.buffers[0]["intensity"].data.reshape(-1), _ring_reference(data, 6.0))
    with pytest.raises(RunEnded, match="has ended"):
        run.update_parameters([{"ro": 2.0}], recompute=True)
    run._coordinator.join(10.0)
    assert run.done


def test_libertem_name_update_parameters_experimental_sync_and_async(inline_ctx, data):
    """LiberTEM's ``update_parameters_experimental``: a plain call on a sync run, awaited on an async one
    (``sync=False``); the partitions after the patch use the new radius (version 1), as with
    ``update_parameters``."""
    import asyncio

    ds = inline_ctx.load("memory", data=data, num_partitions=8)
    refs = {0: _ring_reference(data, 3.0), 1: _ring_reference(data, 5.0)}

    def check(final):
        assert final.finished and set(final.param_versions.values()) == {0, 1}
        got = final.buffers[0]["intensity"].data.reshape(-1)
        for p in ds.get_partitions():
            sl = slice(p.start, p.stop)
            np.testing.assert_allclose(got[sl], refs[final.param_versions[p.idx]][sl])

    run = inline_ctx.run_udf_iter(dataset=ds, udf=RingUDF(ri=1.0, ro=3.0, delay=0.05))
    for i, part in enumerate(run):
        if i == 0:
            assert run.update_parameters_experimental([{"ro": 5.0}]) is None
    check(part)

    async def consume():
        arun = inline_ctx.run_udf_iter(dataset=ds, udf=RingUDF(ri=1.0, ro=3.0, delay=0.05), sync=False)
        last = None
        async for apart in arun:
            if last is None:
                await arun.update_parameters_experimental([{"ro": 5.0}])
            last = apart
        return last

    check(asyncio.run(consume()))
