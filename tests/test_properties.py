"""Property test: Sum, SumSig and StdDev equal numpy for any shape, partitioning, tiling and ROI."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raytile.udf import StdDevUDF, SumSigUDF, SumUDF


def _with_prefs(cls, prefs):
    return type(f"Tiled{cls.__name__}", (cls,), {"get_tiling_preferences": lambda self: dict(prefs)})


@st.composite
def cases(draw):
    nav = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=2)))
    sig = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=2)))
    dtype = draw(st.sampled_from(["uint8", "uint16", "int32", "float32", "float64"]))
    n = int(np.prod(nav))
    num_partitions = draw(st.integers(1, n + 1))
    prefs = draw(st.one_of(
        st.just({}),
        st.fixed_dictionaries({"depth": st.integers(1, 8)}),
        st.fixed_dictionaries({"depth": st.integers(1, 8), "total_size": st.integers(1, 2048)}),
        st.fixed_dictionaries({"total_size": st.sampled_from([-2, -1, 16, 100])}),
    ))
    roi = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    seed = draw(st.integers(0, 2**32 - 1))
    return nav, sig, dtype, num_partitions, prefs, roi, seed


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_reductions_match_numpy(inline_ctx, case):
    nav, sig, dtype, num_partitions, prefs, roi, seed = case
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        data = rng.normal(100, 30, size=nav + sig).astype(dtype)
    else:
        data = rng.integers(0, 200, size=nav + sig).astype(dtype)
    roi_arr = None if roi is None else np.array(roi, dtype=bool).reshape(nav)
    sel = np.ones(nav, dtype=bool) if roi_arr is None else roi_arr
    frames = data[sel].astype(np.float64).reshape((-1,) + sig)

    ds = inline_ctx.load("memory", data=data, sig_dims=len(sig), num_partitions=num_partitions)
    udfs = [_with_prefs(SumUDF, prefs)(), _with_prefs(SumSigUDF, prefs)(), _with_prefs(StdDevUDF, prefs)()]
    s, ss, sd = inline_ctx.run_udf(dataset=ds, udf=udfs, roi=roi_arr)

    np.testing.assert_allclose(s["intensity"].data, frames.sum(axis=0), rtol=1e-5, atol=1e-6)
    sumsig = ss["intensity"].data
    assert sumsig.shape == nav
    np.testing.assert_allclose(sumsig[sel], frames.reshape(len(frames), int(np.prod(sig))).sum(axis=1), rtol=1e-5)
    assert np.all(np.isnan(sumsig[~sel]))
    assert int(sd["num_frames"].data[0]) == len(frames)
    if len(frames):
        np.testing.assert_allclose(sd["var"].data, frames.var(axis=0), rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(sd["mean"].data, frames.mean(axis=0), rtol=1e-10, atol=1e-10)
