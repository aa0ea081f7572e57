"""Merging near the data: workers merge the partitions they ran (runtime/segments.py) and the
coordinator receives O(workers) results instead of one per partition, with exact results."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.runtime.part_runner import run_partition
from raytile.runtime.plan import make_plan
from raytile.runtime.results import ResultAccumulator
from raytile.runtime.segments import SegmentMerger

from _ray_udfs import ScaledSumUDF


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(21).integers(0, 1000, size=(8, 12, 10, 10)).astype(np.uint16)


def _udfs():
    ring = rt.ApplyMasksUDF(mask_factories=[lambda: rt.udf.masks.ring(5, 5, 1, 4, (10, 10))])
    return [rt.SumUDF(), rt.SumSigUDF(), rt.StdDevUDF(), ring]


def _accumulate(plan, results) -> list:
    acc = ResultAccumulator([u.copy() for u in plan.udfs], plan.params.dataset_shape, plan.params.roi,
                            plan.metas(), plan.partition_offsets, plan.total_partitions)
    for r in results:
        acc.merge(r)
    return [{k: v.data for k, v in bufs.items()} for bufs in acc.snapshot(finished=True).buffers]


@pytest.mark.parametrize("with_roi", [False, True])
def test_segments_merge_to_the_same_result_as_partitions(inline_ctx, data, with_roi):
    """Partitions merged into segments (some contiguous, some not) give the coordinator's result exactly."""
    roi = None
    if with_roi:
        roi = np.zeros(data.shape[:2], bool)
        roi[1:6, 2:9] = True
        roi[7, :] = True
    ds = inline_ctx.load("memory", data=data, num_partitions=8)
    plan = make_plan(ds, _udfs(), roi=roi)
    parts = {t.idx: run_partition(t, plan.params) for t in plan.tasks}
    direct = _accumulate(plan, parts.values())
    # two "workers": one ran 0-2 and 6, the other 3-5 and 7 (two segments each)
    segments = []
    for mine in ([0, 1, 2, 6], [3, 4, 5, 7]):
        merger = SegmentMerger(plan.params)
        for t in plan.tasks:
            if t.idx in mine:
                merger.add(parts[t.idx], t.partition.roi_offset(plan.params.roi))
        assert len(merger) == len([t for t in plan.tasks if t.idx in mine])
        segments += [s.as_result("w") for s in merger.take()]
    # without ROI: 0-2, 6 | 3-5, 7; with it partitions 0 and 6 are empty and 5, 7 touch: 1-2 | 3-5+7
    assert len(segments) == (2 if with_roi else 4) and len(merger) == 0
    merged = _accumulate(plan, segments)
    for d, m in zip(direct, merged):
        assert d.keys() == m.keys()
        for name in d:
            np.testing.assert_allclose(m[name], d[name], rtol=1e-6, err_msg=name)
    frames = data.reshape(-1, 10, 10).astype(np.float64)
    if roi is not None:
        frames = frames[roi.reshape(-1)]
    np.testing.assert_allclose(merged[0]["intensity"], frames.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(merged[2]["var"], frames.var(axis=0), rtol=1e-5)


@pytest.mark.parametrize("with_roi", [False, True])
def test_without_nav_buffers_a_worker_holds_one_segment_with_gaps(inline_ctx, data, with_roi):
    """Sig-sized results merge whatever partitions a worker ran into one segment: one result per worker."""
    roi = None
    if with_roi:
        roi = np.zeros(data.shape[:2], bool)
        roi[1:6, 2:9] = True
    ds = inline_ctx.load("memory", data=data, num_partitions=8)
    udfs = [rt.SumUDF(), rt.StdDevUDF()]
    plan = make_plan(ds, udfs, roi=roi)
    parts = {t.idx: run_partition(t, plan.params) for t in plan.tasks}
    segments = []
    for mine in ([0, 2, 5], [1, 3, 4, 6, 7]):
        merger = SegmentMerger(plan.params)
        for t in plan.tasks:
            if t.idx in mine:
                merger.add(parts[t.idx], t.partition.roi_offset(plan.params.roi))
        held = merger.take()
        assert len(held) == 1 and sorted(held[0].covers) == [t.idx for t in plan.tasks if t.idx in mine]
        segments.append(held[0].as_result("w"))
    direct = _accumulate(plan, parts.values())
    merged = _accumulate(plan, segments)
    frames = data.reshape(-1, 10, 10).astype(np.float64)
    if roi is not None:
        frames = frames[roi.reshape(-1)]
    np.testing.assert_allclose(merged[0]["intensity"], frames.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(merged[1]["var"], frames.var(axis=0), rtol=1e-5)
    for d, m in zip(direct, merged):
        for name in d:
            np.testing.assert_allclose(m[name], d[name], rtol=1e-6, err_msg=name)


@pytest.mark.ray
def test_coordinator_receives_few_merged_results_and_exact_values(ray_context, data, monkeypatch):
    ex = ray_context.executor
    assert ex.merge_interval_s is not None  # on by default
    received = []
    result = ex.result

    def counting(handle):
        out = result(handle)
        received.extend(out)
        return out

    monkeypatch.setattr(ex, "result", counting)
    ds = ray_context.load("memory", data=data, num_partitions=24)
    res = ray_context.run_udf(dataset=ds, udf=_udfs())
    frames = data.reshape(-1, 10, 10).astype(np.float64)
    np.testing.assert_allclose(res[0]["intensity"].data, frames.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(res[1]["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-6)
    np.testing.assert_allclose(res[2]["var"].data, frames.var(axis=0), rtol=1e-5)
    covered = sorted(i for r in received for i in r.partitions)
    assert covered == list(range(24))  # every partition merged exactly once
    assert len(received) < 24 / 2, f"{len(received)} results for 24 partitions"


@pytest.mark.ray
def test_partials_and_versions_stay_exact_with_merging(ray_context, data):
    ds = ray_context.load("memory", data=data, num_partitions=16)
    run = ray_context.run_udf_iter(dataset=ds, udf=ScaledSumUDF(scale=1.0, delay=0.05))
    parts = []
    for part in run:
        parts.append(part)
        if len(parts) == 1:
            run.update_parameters([{"scale": 2.0}], recompute=True)
    final = parts[-1]
    assert final.finished and set(final.param_versions.values()) == {1} and len(final.param_versions) == 16
    np.testing.assert_allclose(final.buffers[0]["intensity"].data, 2.0 * data.sum(axis=(0, 1)))
    for p in parts:  # damage always matches the partitions listed as merged
        assert p.damage.data.sum() == 6 * len(p.param_versions)
