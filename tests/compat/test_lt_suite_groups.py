"""Behaviours LiberTEM 0.16's own test suite relies on (the failure groups of tools/libertem_suite.py), each
against LiberTEM's own result on the same data.

Every case runs the same call with LiberTEM's inline Context and with raytile
(inline, and on Ray where workers are involved) and compares the results, or
the exception type where LiberTEM refuses the input.
"""

from __future__ import annotations

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import raytile as rt  # noqa: E402


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


# --- memory data sets whose nav/sig shape regroups, crops or pads the data ----------------------------------------

PRIME = np.random.default_rng(7).random((5, 3, 7, 4)).astype(np.float32)  # 15 frames of 7 x 4


@pytest.mark.parametrize("nav_shape, sig_shape, sync_offset, sig_dims", [
    ((2, 3), None, 0, None),          # fewer nav positions than frames: the first 6
    ((4, 5), None, 2, None),          # more positions than frames, shifted: zeros past the end
    ((17,), (28,), -3, 1),            # frames regrouped to one axis, zeros inserted at the start
    (None, (28,), 4, None),           # sig_shape of the frames' size, nav from the data
    ((3, 7), (4,), 5, None),          # a 1D signal of the last axis
])
def test_memory_nav_and_sig_shape_as_libertem_reads_them(lt_ctx, ctx, nav_shape, sig_shape, sync_offset, sig_dims):
    from libertem.udf.stddev import StdDevUDF as LtStdDevUDF
    from libertem.udf.sum import SumUDF as LtSumUDF
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF

    load = dict(data=PRIME, nav_shape=nav_shape, sig_shape=sig_shape, sync_offset=sync_offset, sig_dims=sig_dims,
                num_partitions=2)
    lt_ds, ds = lt_ctx.load("memory", **load), ctx.load("memory", **load)
    assert tuple(ds.shape) == tuple(lt_ds.shape)
    assert ds.shape.sig.dims == lt_ds.shape.sig.dims
    ref = lt_ctx.run_udf(dataset=lt_ds, udf=[LtSumSigUDF(), LtSumUDF(), LtStdDevUDF()])
    got = ctx.run_udf(dataset=ds, udf=[rt.SumSigUDF(), rt.SumUDF(), rt.StdDevUDF()])
    np.testing.assert_allclose(got[0]["intensity"].data, ref[0]["intensity"].data, rtol=1e-5)
    np.testing.assert_allclose(got[1]["intensity"].data, ref[1]["intensity"].data, rtol=1e-5)
    if int(ref[2]["num_frames"].data[0]) == ds.shape.nav.size:
        # LiberTEM leaves nav positions without a frame out of the run; raytile reads zeros there
        # (docs/porting.md), which counts in StdDevUDF: compared where every position has its frame
        for key in ("sum", "var", "mean"):
            np.testing.assert_allclose(got[2][key].data, ref[2][key].data, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kwargs", [
    dict(sig_shape=(7, 4), sig_dims=1),   # sig_shape and sig_dims disagree
    dict(sig_shape=(11,)),                # 15 * 28 values are no whole number of 11-pixel frames
])
def test_memory_shapes_libertem_refuses_raise_value_error(lt_ctx, inline_ctx, kwargs):
    with pytest.raises(ValueError):
        lt_ctx.load("memory", data=PRIME, **kwargs)
    with pytest.raises(ValueError) as err:
        inline_ctx.load("memory", data=PRIME, **kwargs)
    assert isinstance(err.value, rt.common.errors.DataSetException)
