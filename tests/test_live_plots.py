"""Live plots (``run_udf(..., plots=...)``): LiberTEM's forms, titles, ROI masking, throttling, warnings.

Rendered headless with matplotlib's Agg back-end; the plotted data are
compared with numpy on the same data.
"""

from __future__ import annotations

import asyncio
import pickle
import warnings

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import raytile as rt  # noqa: E402
from _ray_udfs import RingUDF  # noqa: E402
from raytile.viz.live import Dummy2DPlot, color_limits  # noqa: E402
from raytile.viz.mpl import MPLLive2DPlot  # noqa: E402

NAV = (6, 8)
SIG = (16, 12)
DATA = np.random.default_rng(6).random(NAV + SIG).astype(np.float32)
ROI = np.random.default_rng(8).random(NAV) < 0.5


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_plots_true_one_plot_per_2d_channel_with_final_data_masked_outside_roi(ctx):
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()], roi=ROI, plots=True)
    figures = {plt.figure(n).axes[0].get_title(): plt.figure(n) for n in plt.get_fignums()}
    assert sorted(figures) == ["SumSigUDF: intensity", "SumUDF: intensity"]
    shown = figures["SumSigUDF: intensity"].axes[0].images[0].get_array()
    assert np.array_equal(np.ma.getmaskarray(shown), ~ROI)
    np.testing.assert_allclose(shown.compressed(), DATA[ROI].sum(axis=(1, 2)), rtol=1e-5)
    frame = figures["SumUDF: intensity"].axes[0].images[0].get_array()
    np.testing.assert_allclose(np.ma.getdata(frame), DATA[ROI].sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(res[1]["intensity"].data[ROI], DATA[ROI].sum(axis=(1, 2)), rtol=1e-5)
    for fig in figures.values():
        fig.canvas.draw()  # renders headless


def test_channel_lists_and_plot_objects(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA, num_partitions=3)
    udf = rt.SumSigUDF()
    inline_ctx.run_udf(dataset=ds, udf=udf, plots=[[("intensity", np.sqrt)]])
    (title,) = [plt.figure(n).axes[0].get_title() for n in plt.get_fignums()]
    assert title == "SumSigUDF: sqrt(intensity)"

    def doubled(udf_results, damage):
        return udf_results["intensity"].data * 2, damage

    plot = Dummy2DPlot(ds, udf, channel=doubled)
    inline_ctx.run_udf(dataset=ds, udf=udf, plots=[plot])
    assert plot.title == "SumSigUDF: doubled" and plot.updates >= 1
    np.testing.assert_allclose(plot.data, DATA.sum(axis=(2, 3)) * 2, rtol=1e-5)
    with pytest.raises(ValueError, match="channel nope not found or not plottable"):
        MPLLive2DPlot(ds, udf, channel="nope")


def test_plot_class_and_run_udf_iter_and_async(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA, num_partitions=3)
    ctx = rt.Context.make_with("inline", plot_class=Dummy2DPlot)
    assert ctx.plot_class is Dummy2DPlot and inline_ctx.plot_class is MPLLive2DPlot
    udf = rt.SumSigUDF()
    run = ctx.run_udf_iter(dataset=ds, udf=udf, plots=True)
    parts = list(run)
    (plot,) = run.plots
    assert isinstance(plot, Dummy2DPlot) and plot.updates >= 1
    np.testing.assert_allclose(plot.data, parts[-1].buffers[0]["intensity"].data, rtol=1e-6)

    async def go():
        res = await ctx.run_udf(dataset=ds, udf=udf, plots=True, sync=False)
        run = ctx.run_udf_iter(dataset=ds, udf=udf, plots=True, sync=False)
        async for _ in run:
            pass
        return res, run.plots[0]

    res, plot = asyncio.run(go())
    np.testing.assert_allclose(plot.data, DATA.sum(axis=(2, 3)), rtol=1e-5)
    np.testing.assert_allclose(res["intensity"].data, DATA.sum(axis=(2, 3)), rtol=1e-5)


def test_udf_without_2d_channel_warns_naming_it(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inline_ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.NoOpUDF()], plots=True)
    assert any("No plottable channels found for UDF #1: NoOpUDF" in str(w.message) for w in caught)


def test_matplotlib_redraws_at_most_every_min_delta(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA)
    udf = rt.SumSigUDF()
    plot = Dummy2DPlot(ds, udf, min_delta=3600)
    results = inline_ctx.run_udf_iter(dataset=ds, udf=udf)
    last = list(results)[-1]
    plot.shown()
    assert plot.new_data(last.buffers[0], last.damage.data) is False  # throttled
    assert plot.new_data(last.buffers[0], last.damage.data, force=True) is True
    assert MPLLive2DPlot(ds, udf).min_delta == 0.5  # 2 Hz, as LiberTEM's


def test_colour_scale_ignores_a_dead_pixel():
    frame = np.random.default_rng(0).integers(0, 50, size=(64, 64)).astype(np.float64)
    frame[10, 10] = 2**32 - 1  # DECTRIS marks a dead pixel with the dtype's maximum
    vmin, vmax = color_limits(frame, np.ones(frame.shape, dtype=bool))
    assert vmax == frame[frame < 2**32 - 1].max() and vmin == frame.min()


def test_bqplot_plot_follows_the_data(inline_ctx):
    pytest.importorskip("bqplot")
    from raytile.viz.bqp import BQLive2DPlot

    ds = inline_ctx.load("memory", data=DATA, num_partitions=2)
    udf = rt.SumSigUDF()
    plot = BQLive2DPlot(ds, udf)
    assert plot.min_delta == pytest.approx(1 / 60)
    inline_ctx.run_udf(dataset=ds, udf=udf, roi=ROI, plots=[plot])
    want = DATA.sum(axis=(2, 3))
    np.testing.assert_allclose(np.asarray(plot.image.color)[ROI], want[ROI], rtol=1e-5)
    assert plot.scale.min == pytest.approx(want[ROI].min(), rel=1e-5)
    assert plot.scale.max == pytest.approx(want[ROI].max(), rel=1e-5)


def test_colour_scale_quantiles_equal_numpys():
    from raytile.viz.scale import tail_quantiles

    rng = np.random.default_rng(3)
    arrays = [rng.random(65536), rng.integers(0, 7, 20000).astype(np.float64), rng.normal(size=4097) * 1e3,
              np.sort(rng.integers(-50, 50, 100001).astype(np.float64))[::-1].copy(), rng.random(5), np.ones(1)]
    for values in arrays:
        for q in (0.001, 0.0001, 0.01, 0.3, 0.0):
            assert tail_quantiles(values, q) == tuple(np.quantile(values, (q, 1 - q))), (values.size, q)


def test_bad_plots_argument_starts_no_run(inline_ctx, monkeypatch):
    ds = inline_ctx.load("memory", data=DATA)
    udf = rt.SumSigUDF()

    def no_run(*args, **kwargs):
        raise AssertionError("a run was started for a plots argument that cannot work")

    monkeypatch.setattr(inline_ctx, "_start", no_run)
    with pytest.raises(ValueError, match="plots has 2 channel lists for 1 UDFs"):
        inline_ctx.run_udf(dataset=ds, udf=udf, plots=[["intensity"], ["intensity"]])
    with pytest.raises(TypeError, match="plots must be True"):
        inline_ctx.run_udf(dataset=ds, udf=udf, plots=[object()])
    with pytest.raises(ValueError, match="is not one of this run's UDFs"):
        inline_ctx.run_udf(dataset=ds, udf=udf, plots=[Dummy2DPlot(ds, rt.SumSigUDF())])


def test_a_plot_that_cannot_be_made_cancels_its_run(inline_ctx, monkeypatch):
    from raytile.common.errors import UDFRunCancelled

    ds = inline_ctx.load("memory", data=DATA, num_partitions=3)
    started = []
    start = inline_ctx._start

    def spy(*args, **kwargs):
        started.append(start(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(inline_ctx, "_start", spy)
    with pytest.raises(ValueError, match="channel nope not found"):
        inline_ctx.run_udf(dataset=ds, udf=rt.SumSigUDF(), plots=[["nope"]])
    (run,) = started  # the run started before its plots were made, and was cancelled when one failed
    with pytest.raises(UDFRunCancelled):
        list(run)


def _pixels(fig):
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def test_headless_figure_made_when_drawn_renders_as_one_made_at_once(inline_ctx, monkeypatch):
    """On Agg the plot's Axes and image wait for the first draw or read; what is drawn is what a figure
    made at once (on an interactive back-end, whose updates go to the image at once) shows."""
    import raytile.viz.mpl as mpl

    ds = inline_ctx.load("memory", data=DATA, num_partitions=3)
    udf = rt.SumSigUDF()
    headless = MPLLive2DPlot(ds, udf, roi=ROI, min_delta=0)
    headless.display()  # plot objects are displayed by their maker, as in LiberTEM
    inline_ctx.run_udf(dataset=ds, udf=udf, roi=ROI, plots=[headless])
    assert plt.fignum_exists(headless.fig.number)  # listed by pyplot (Jupyter shows it at the cell's end)
    assert MPLLive2DPlot.shows_partial_results() is False

    monkeypatch.setattr(mpl, "_interactive", lambda: True)  # as with Qt or ipympl: no canvas needed to test
    assert MPLLive2DPlot.shows_partial_results() is True
    at_once = MPLLive2DPlot(ds, udf, roi=ROI, min_delta=0)
    at_once.display()
    assert len(at_once.fig.axes) == 1 and at_once.im_obj.get_array().mask.all()  # made, nothing merged yet
    res = inline_ctx.run_udf(dataset=ds, udf=udf, roi=ROI, plots=[at_once])
    monkeypatch.undo()

    for plot in (headless, at_once):
        (axes,) = plot.fig.axes
        assert axes is plot.axes and axes.get_title() == "SumSigUDF: intensity"
        shown = axes.images[0].get_array()
        assert np.array_equal(np.ma.getmaskarray(shown), ~ROI)
        np.testing.assert_allclose(shown.compressed(), res["intensity"].data[ROI], rtol=1e-6)
    assert headless.im_obj.get_clim() == at_once.im_obj.get_clim()
    assert np.array_equal(_pixels(headless.fig), _pixels(at_once.fig))


def test_headless_figure_follows_run_udf_iter_when_drawn_and_pickles(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA, num_partitions=3)
    udf = rt.SumSigUDF()
    plot = MPLLive2DPlot(ds, udf, min_delta=0)
    plot.display()
    run = inline_ctx.run_udf_iter(dataset=ds, udf=udf, plots=[plot])
    seen = 0
    for part in run:
        merged = np.asarray(part.buffers[0]["intensity"].valid_mask, dtype=bool)
        shown = plot.fig.axes[0].images[0].get_array()  # refreshed from the latest partial result when read
        assert np.array_equal(~np.ma.getmaskarray(shown), merged)
        np.testing.assert_allclose(shown.compressed(), DATA.sum(axis=(2, 3))[merged], rtol=1e-5)
        seen += 1
    assert seen >= 1 and plot.updates == seen
    copy = pickle.loads(pickle.dumps(plot.fig))
    assert copy.axes[0].get_title() == "SumSigUDF: intensity"
    np.testing.assert_allclose(copy.axes[0].images[0].get_array(), DATA.sum(axis=(2, 3)), rtol=1e-5)


def test_run_udf_makes_partial_results_only_for_plots_that_show_them(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA, num_partitions=3)
    want = DATA.sum(axis=(2, 3))
    udf = RingUDF(ri=-1.0, ro=100.0, delay=0.05)  # the whole frame: each partition takes 50 ms
    live = Dummy2DPlot(ds, udf, min_delta=0)
    inline_ctx.run_udf(dataset=ds, udf=udf, plots=[live])
    assert live.updates >= 2  # partial results, then the final data
    np.testing.assert_allclose(live.data, want, rtol=1e-5)

    headless = MPLLive2DPlot(ds, udf, min_delta=0)  # Agg: nothing is seen before the end
    headless.display()
    inline_ctx.run_udf(dataset=ds, udf=udf, plots=[headless])
    assert headless.updates == 1  # the final data alone: no partial result was made
    np.testing.assert_allclose(headless.im_obj.get_array(), want, rtol=1e-5)
