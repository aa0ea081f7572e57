"""``libertem.viz`` at its ported path (issue 36): LiberTEM's colours of vector fields and its ``plots=`` forms.

Each case compares with LiberTEM 0.16's own result on the same input: the
colour wheel (``rgb_from_2dvector``, ``libertem_cyclic``) byte for byte, a
CoM analysis' colour picture, and the calls a plot object that is not a
``Live2DPlot`` (a mock) gets.
"""

from __future__ import annotations

import warnings
from unittest.mock import Mock

import numpy as np
import pytest

lt_viz = pytest.importorskip("libertem.viz.base", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.api as lt_api  # noqa: E402

import raytile as rt  # noqa: E402
from raytile.udf.sum import SumUDF  # noqa: E402


def _lt_rgb(y, x, vmax=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LiberTEM's uint8 cast of NaN warns
        return lt_viz.rgb_from_2dvector(y=y, x=x, vmax=vmax)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e5])
@pytest.mark.parametrize("vmax", ["auto", "half", "twice"])
def test_rgb_from_2dvector_equals_libertems(scale, vmax):
    from raytile.viz import rgb_from_2dvector

    rng = np.random.default_rng(7)
    y, x = rng.normal(size=(2, 120, 130)) * scale
    longest = float(np.hypot(y, x).max())
    limit = {"auto": None, "half": longest / 2, "twice": 2 * longest}[vmax]
    got, ref = rgb_from_2dvector(y=y, x=x, vmax=limit), _lt_rgb(y, x, limit)
    assert got.dtype == ref.dtype == np.uint8 and got.shape == ref.shape == (120, 130, 3)
    np.testing.assert_array_equal(got, ref)


def test_rgb_from_2dvector_equals_libertems_on_a_grid_ints_float32_and_the_axes():
    from raytile.viz import rgb_from_2dvector

    grid = np.linspace(-3, 3, 121)
    yy, xx = np.meshgrid(grid, grid)
    np.testing.assert_array_equal(rgb_from_2dvector(yy, xx), _lt_rgb(yy, xx))
    f32 = (yy.astype(np.float32), xx.astype(np.float32))
    np.testing.assert_array_equal(rgb_from_2dvector(*f32), _lt_rgb(*f32))
    ints = (np.arange(-5, 6)[:, None] * np.ones(11, int), np.arange(-5, 6)[None, :] * np.ones((11, 1), int))
    np.testing.assert_array_equal(rgb_from_2dvector(*ints), _lt_rgb(*ints))
    for y, x in [(0, 0), (0.0, 0.0), (-0.0, -0.0), (1, 0), (0, 1), (-1, 0), (0, -1), (0.0, 1e-300)]:
        np.testing.assert_array_equal(rgb_from_2dvector(y, x), _lt_rgb(y, x), err_msg=f"y={y}, x={x}")
    # LiberTEM's test_rgb_from_vector: +x red, +y green, -y purple (blue over green), -x cyan (blue over red)
    assert np.argmax(rgb_from_2dvector(0, 1)) == 0 and np.argmax(rgb_from_2dvector(1, 0)) == 1
    assert np.argmax(rgb_from_2dvector(-1, 0)) == 2 and np.argmin(rgb_from_2dvector(-1, 0)) == 1


def test_rgb_from_2dvector_of_nan_is_black_and_the_rest_as_libertems():
    from raytile.viz import rgb_from_2dvector

    rng = np.random.default_rng(3)
    y, x = rng.normal(size=(2, 6, 7))
    y[2, 3], x[4, 1] = np.nan, np.inf
    got, ref = rgb_from_2dvector(y, x), _lt_rgb(y, x)
    bad = np.isnan(np.hypot(y, x))  # an infinite one is a full-length direction, as in LiberTEM
    assert (got[bad] == 0).all()
    np.testing.assert_array_equal(got[~bad], ref[~bad])


def test_libertem_cyclic_equals_libertems_at_its_ported_paths():
    from raytile import viz
    from raytile.viz.base import libertem_cyclic

    assert viz.libertem_cyclic is libertem_cyclic and libertem_cyclic.name == lt_viz.libertem_cyclic.name
    at = np.linspace(0, 1, 2001)
    np.testing.assert_array_equal(libertem_cyclic(at, bytes=True), lt_viz.libertem_cyclic(at, bytes=True))
    np.testing.assert_allclose(libertem_cyclic(at), lt_viz.libertem_cyclic(at), rtol=0, atol=1e-12)


def test_com_analysis_field_picture_equals_libertems(inline_ctx):
    rng = np.random.default_rng(11)
    data = rng.random((6, 7, 16, 16)).astype(np.float32)
    data[..., 5:9, 9:12] += 20  # a bright spot: shifts of different directions and lengths
    lt_ctx = lt_api.Context.make_with("inline")
    ref = lt_ctx.run(lt_ctx.create_com_analysis(dataset=lt_ctx.load("memory", data=data), cx=7.5, cy=7.5))
    got = inline_ctx.run(inline_ctx.create_com_analysis(dataset=inline_ctx.load("memory", data=data), cx=7.5,
                                                        cy=7.5))
    np.testing.assert_allclose(got.field.raw_data[0], ref.field.raw_data[0], rtol=1e-5)
    picture, lt_picture = np.asarray(got.field.visualized), np.asarray(ref.field.visualized)
    assert picture.shape == lt_picture.shape == (6, 7, 3)
    # equal up to a byte where the CoM's last float bits differ (raytile sums in float64)
    assert np.abs(picture.astype(int) - lt_picture).max() <= 1


def _plot_mock(udf):
    plot = Mock()
    plot.get_udf.return_value = udf
    return plot


def test_plots_take_any_object_with_get_udf_and_new_data_as_libertem_does(inline_ctx):
    data = np.random.default_rng(5).random((8, 8, 4, 4)).astype(np.float32)
    lt_ctx = lt_api.Context.make_with("inline")
    from libertem.udf.sum import SumUDF as LtSumUDF

    lt_udf = LtSumUDF()
    lt_plot = _plot_mock(lt_udf)
    lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data, num_partitions=4), udf=lt_udf, plots=[lt_plot])

    udf = SumUDF()
    plot = _plot_mock(udf)
    result = inline_ctx.run_udf(dataset=inline_ctx.load("memory", data=data, num_partitions=4), udf=udf,
                                plots=[plot])
    np.testing.assert_allclose(result["intensity"].data, data.sum(axis=(0, 1)), rtol=1e-5)
    # LiberTEM: one call a partition, then the final data forced (5 calls for 4 partitions). raytile hands a
    # plot the newest partial result (latest wins: how many depends on timing), then, as LiberTEM, the last
    # result once more, forced
    lt_force = [c.kwargs.get("force") for c in lt_plot.new_data.mock_calls]
    force = [c.kwargs.get("force") for c in plot.new_data.mock_calls]
    assert lt_force == [False] * 4 + [True]
    assert 2 <= len(force) <= len(lt_force) and force == [False] * (len(force) - 1) + [True]
    (last, last_damage), (final, final_damage) = (c.args for c in plot.new_data.mock_calls[-2:])
    np.testing.assert_allclose(final["intensity"].data, result["intensity"].data)
    np.testing.assert_array_equal(last["intensity"].data, final["intensity"].data)
    assert np.asarray(final_damage).all() and np.asarray(last_damage).all()


def test_plots_still_refuse_what_is_no_plot(inline_ctx):
    ds = inline_ctx.load("memory", data=np.zeros((2, 2, 4, 4), np.float32))
    with pytest.raises(TypeError, match="plots must be"):
        inline_ctx.run_udf(dataset=ds, udf=SumUDF(), plots=[object()])
    with pytest.raises(TypeError, match="plots must be"):
        rt.Context.make_with("inline").run_udf(dataset=ds, udf=SumUDF(), plots=[3])
