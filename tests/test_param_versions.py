"""`ParamVersions`: a live patch is checked, applied and numbered in one place (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest

from raytile.common.errors import ConfigValidationError, UDFException
from raytile.runtime.param_versions import ParamVersions
from raytile.runtime.plan import make_plan

from _ray_udfs import ScaledSumUDF


@pytest.fixture
def plan(inline_ctx):
    ds = inline_ctx.load("memory", data=np.ones((4, 4, 3, 3), dtype=np.float32), num_partitions=2)
    return make_plan(ds, [ScaledSumUDF(scale=2.0), ScaledSumUDF(scale=3.0)])


def test_versions_are_numbered_and_build_on_each_other(plan):
    versions = ParamVersions(plan.params)
    first = versions.patch([{"scale": 5.0}, {}])
    second = versions.patch([{}, {"scale": 7.0}], recompute=True)
    assert (first.number, second.number) == (1, 2) and second.recompute and not first.recompute
    assert [u.params.scale for u in second.params.udfs] == [5.0, 7.0]  # the first patch is kept
    assert second.params.version == 2 and versions.current is second.params
    assert [u.params.scale for u in plan.params.udfs] == [2.0, 3.0]  # the planned version is left alone
    assert [v.number for v in versions.take_new()] == [1, 2] and versions.take_new() == []


def test_bad_patches_raise_in_the_caller_and_make_no_version(plan):
    versions = ParamVersions(plan.params)
    with pytest.raises(UDFException, match="needs 2 dicts"):
        versions.patch([{"scale": 1.0}])
    with pytest.raises(UDFException, match="no parameters"):
        versions.patch([{"radius": 1.0}, {}])
    with pytest.raises(ConfigValidationError, match="stream"):
        ParamVersions(plan.params, stream=True).patch([{}, {}], recompute=True)
    assert versions.take_new() == [] and versions.current is plan.params
