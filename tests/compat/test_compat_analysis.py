"""LiberTEM's Analysis API on raytile against LiberTEM 0.16 itself, on the same data.

Every ``create_*_analysis`` is run by ``ctx.run`` on raytile (inline and on
Ray) and by LiberTEM's inline Context; the result sets must have the same
keys, titles and descriptions, ``raw_data`` equal to LiberTEM's (NaN where
LiberTEM has NaN, outside a ROI) and pictures of the same shape.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import raytile as rt  # noqa: E402
from raytile.analysis import AnalysisResultSet, IncompatibleDataSet  # noqa: E402

NAV = (6, 7)
SIG = (16, 16)
ROI = np.random.default_rng(3).random(NAV) < 0.5


def _data() -> np.ndarray:
    rng = np.random.default_rng(5)
    data = rng.integers(0, 500, size=NAV + SIG).astype(np.float32)
    data[0, 0] = 0  # an empty frame: its centre of mass is the reference
    data[2, 3, 4, 11] = 30000  # a bright spot off the centre
    return data


DATA = _data()


def _ring_masks() -> list[Callable[[], np.ndarray]]:
    def m0() -> np.ndarray:
        return np.ones(SIG, dtype=np.float32)

    def m1() -> np.ndarray:
        m = np.zeros(SIG, dtype=np.float32)
        m[2:9, 3:5] = 1
        return m

    return [m0, m1]


# name -> (make the analysis from a Context and a data set, whether a nav ROI applies)
CASES: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {
    "sum": (lambda c, ds: c.create_sum_analysis(dataset=ds), True),
    "pick": (lambda c, ds: c.create_pick_analysis(dataset=ds, x=5, y=2), False),
    "mask": (lambda c, ds: c.create_mask_analysis(dataset=ds, factories=_ring_masks()), True),
    "disk": (lambda c, ds: c.create_disk_analysis(dataset=ds, cx=7, cy=8, r=4), True),
    "disk-default": (lambda c, ds: c.create_disk_analysis(dataset=ds), False),
    "ring": (lambda c, ds: c.create_ring_analysis(dataset=ds, cx=8, cy=7.5, ri=2, ro=6), True),
    "ring-default": (lambda c, ds: c.create_ring_analysis(dataset=ds), False),
    "point": (lambda c, ds: c.create_point_analysis(dataset=ds, x=11, y=4), True),
    "com": (lambda c, ds: c.create_com_analysis(dataset=ds, cx=7, cy=8, mask_radius=6), True),
    "com-flip-rot": (lambda c, ds: c.create_com_analysis(dataset=ds, mask_radius=7, flip_y=True,
                                                         scan_rotation=33.0), False),
    "com-annular": (lambda c, ds: c.create_com_analysis(dataset=ds, cx=8, cy=8, mask_radius=7,
                                                        mask_radius_inner=2), True),
    "radial-fourier": (lambda c, ds: c.create_radial_fourier_analysis(dataset=ds, cx=8, cy=8, ri=1, ro=7, n_bins=2,
                                                                      max_order=4), True),
    "radial-fourier-sparse": (lambda c, ds: c.create_radial_fourier_analysis(
        dataset=ds, cx=8, cy=8, ri=1, ro=7, n_bins=3, max_order=2, use_sparse=True), False),
}


@functools.lru_cache(maxsize=None)
def _lt_result(case: str, with_roi: bool) -> Any:
    ctx = lt_api.Context.make_with("inline")
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    make, _ = CASES[case]
    return ctx.run(make(ctx, ds), roi=ROI if with_roi else None)


def _assert_same(got: AnalysisResultSet, want: Any) -> None:
    assert got.keys() == want.keys()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.key, g.title, g.desc) == (w.key, w.title, w.desc)
        g_raw = np.asarray(g.raw_data)
        w_raw = np.asarray(w.raw_data)
        assert g_raw.shape == w_raw.shape, g.key
        if w_raw.dtype.kind in "iu":
            np.testing.assert_array_equal(g_raw, w_raw, err_msg=g.key)
        else:
            np.testing.assert_allclose(g_raw, w_raw, rtol=2e-5, atol=2e-4, equal_nan=True, err_msg=g.key)
        assert g.visualized.shape[:-1] == np.asarray(w.visualized).shape[:-1], g.key
        assert g.visualized.dtype == np.uint8


@pytest.mark.parametrize("case,with_roi", [(c, r) for c in sorted(CASES) for r in (False, True)
                                           if CASES[c][1] or not r])
def test_analysis_equals_libertem(ctx, case, with_roi):
    make, _ = CASES[case]
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    got = ctx.run(make(ctx, ds), roi=ROI if with_roi else None)
    _assert_same(got, _lt_result(case, with_roi))
    if with_roi and case in ("mask", "ring", "com"):
        assert np.all(np.isnan(np.asarray(got[1 if case == "com" else 0].raw_data)[~ROI]))


def test_result_set_access_as_libertem_documents(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA)
    res = inline_ctx.run(inline_ctx.create_mask_analysis(dataset=ds, factories=_ring_masks()))
    assert res.mask_1 is res["mask_1"] is res[1]
    assert [r.title for r in res] == ["mask 0", "mask 1"]
    assert len(res) == 2 and res.keys() == ["mask_0", "mask_1"]
    np.testing.assert_allclose(np.asarray(res.mask_0), DATA.sum(axis=(2, 3)), rtol=1e-5)
    with pytest.raises(AttributeError, match="mask_7.*mask_0, mask_1"):
        res.mask_7


def test_async_path(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA, num_partitions=2)
    analysis = inline_ctx.create_ring_analysis(dataset=ds, cx=8, cy=7.5, ri=2, ro=6)

    async def run() -> Any:
        udf = analysis.get_udf()
        roi = analysis.get_roi()
        udf_results = await inline_ctx.run_udf(dataset=ds, udf=udf, roi=roi, sync=False)
        return analysis.get_udf_results(udf_results, roi, damage=True)

    _assert_same(asyncio.run(run()), _lt_result("ring", False))


def test_bad_shapes_raise_like_libertem(inline_ctx):
    ds3 = inline_ctx.load("memory", data=DATA.reshape((42,) + SIG))
    with pytest.raises(IncompatibleDataSet, match="two navigation dimensions"):
        inline_ctx.create_com_analysis(dataset=ds3)
    ds = inline_ctx.load("memory", data=DATA)
    with pytest.raises(ValueError, match="mask_radius_inner"):
        inline_ctx.create_com_analysis(dataset=ds, mask_radius_inner=2)
    with pytest.raises(ValueError, match="Need x, y and not z"):
        inline_ctx.run(inline_ctx.create_pick_analysis(dataset=ds, x=1))
    with pytest.raises(ValueError, match="takes an Analysis"):
        inline_ctx.run(rt.SumUDF())
