"""LiberTEM's FFT, FEM, crystallinity and clustering analyses and its GMS live plot, at LiberTEM's paths,
against LiberTEM 0.16 itself on the same data.

``libertem.analysis.{rawfft,sumfft,apply_fft_mask,fem,clust}`` port to
``raytile.analysis.*``: each analysis is built by its class (LiberTEM has no
``create_*_analysis`` for them), run by ``ctx.run`` on raytile (inline and on
Ray) and by LiberTEM's inline Context, and the result sets must agree: keys,
titles, descriptions, ``raw_data`` shape, dtype and values, picture shape.
LiberTEM's ``ctx.run`` cannot run ``ClusterAnalysis`` (its ``get_udf`` is
None): its labels come from LiberTEM's ``controller`` on an
``AsyncAdapter``-wrapped inline executor.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from typing import Any, Callable
from unittest import mock

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")
pytest.importorskip("sklearn", reason="ClusterAnalysis needs scikit-learn (the analysis extra)")
pytest.importorskip("skimage", reason="ClusterAnalysis needs scikit-image (the analysis extra)")

import libertem.analysis as lt_analysis  # noqa: E402
from libertem.executor.base import AsyncAdapter as LTAsyncAdapter  # noqa: E402
from libertem.executor.inline import InlineJobExecutor as LTInlineJobExecutor  # noqa: E402

import raytile as rt  # noqa: E402
import raytile.analysis as rt_analysis  # noqa: E402
from raytile.analysis.results import AnalysisResultSet  # noqa: E402
from raytile.common.errors import ConfigValidationError, UDFRunCancelled  # noqa: E402
from raytile.executor.base import AsyncAdapter  # noqa: E402

NAV = (6, 7)
SIG = (16, 16)
ROI = np.random.default_rng(3).random(NAV) < 0.5


def _data() -> np.ndarray:
    rng = np.random.default_rng(11)
    data = rng.integers(0, 50, size=NAV + SIG).astype(np.float32)
    data[..., 8, 8] += 700  # a zero-order peak in every frame
    data[:3, :, 3, 3] += 400  # "crystalline" frames: peaks the others lack
    data[:3, :, 13, 13] += 400
    data[3:, :4, 8, 2] += 150  # weaker ones
    data[3:, :4, 8, 14] += 150
    return data


DATA = _data()
COMPLEX = (DATA + 1j * DATA[::-1]).astype(np.complex64)

# name -> (the analysis' class name, its parameters, whether a nav ROI applies)
CASES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "fem": ("FEMAnalysis", {"cx": 8, "cy": 7, "ri": 2, "ro": 6}, True),
    "apply-fft-mask": ("ApplyFFTMask", {"rad_in": 1, "rad_out": 6, "real_centerx": 8, "real_centery": 8,
                                        "real_rad": 2}, True),
    "sumfft": ("SumfftAnalysis", {}, True),
    "sumfft-masked": ("SumfftAnalysis", {"real_rad": 2, "real_centerx": 8, "real_centery": 7}, False),
    "sumfft-param-roi": ("SumfftAnalysis", {"roi": {"shape": "rect", "x": 1, "y": 1, "width": 3, "height": 2}},
                         False),
    "pickfft": ("PickFFTFrameAnalysis", {"x": 5, "y": 2}, False),
    "pickfft-masked": ("PickFFTFrameAnalysis", {"x": 1, "y": 4, "real_rad": 2, "real_centerx": 8,
                                                "real_centery": 8}, False),
    "sd": ("SDAnalysis", {}, True),
    "sumsig": ("SumSigAnalysis", {}, False),
}
CLUSTER_PARAMS = {"n_peaks": 12, "n_clust": 3, "cy": 8, "cx": 8, "ri": 2, "ro": 8, "delta": 0.05, "min_dist": 1}


@functools.lru_cache(maxsize=None)
def _lt_result(case: str, with_roi: bool, complex_data: bool = False) -> Any:
    ctx = lt_api.Context.make_with("inline")
    ds = ctx.load("memory", data=COMPLEX if complex_data else DATA, num_partitions=3)
    cls_name, params, _ = CASES[case]
    return ctx.run(getattr(lt_analysis, cls_name)(dataset=ds, parameters=dict(params)),
                   roi=ROI if with_roi else None)


def _assert_same(got: AnalysisResultSet, want: Any) -> None:
    assert isinstance(got, AnalysisResultSet)
    assert got.keys() == want.keys()
    for g, w in zip(got, want):
        assert (g.key, g.title, g.desc) == (w.key, w.title, w.desc)
        g_raw, w_raw = np.asarray(g.raw_data), np.asarray(w.raw_data)
        assert (g_raw.shape, g_raw.dtype) == (w_raw.shape, w_raw.dtype), g.key
        if w_raw.dtype.kind in "iu":
            np.testing.assert_array_equal(g_raw, w_raw, err_msg=g.key)
        else:
            np.testing.assert_allclose(g_raw, w_raw, rtol=2e-5, atol=2e-3, equal_nan=True, err_msg=g.key)
        assert g.visualized.shape[:-1] == np.asarray(w.visualized).shape[:-1], g.key
        assert g.visualized.dtype == np.uint8


@pytest.mark.parametrize("case,with_roi", [(c, r) for c in sorted(CASES) for r in (False, True)
                                           if CASES[c][2] or not r])
def test_analysis_equals_libertem(ctx, case, with_roi):
    cls_name, params, _ = CASES[case]
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    got = ctx.run(getattr(rt_analysis, cls_name)(dataset=ds, parameters=dict(params)), roi=ROI if with_roi else None)
    _assert_same(got, _lt_result(case, with_roi))


def test_pickfft_equals_numpy_and_libertem_on_complex_data(inline_ctx):
    """A complex frame is not transformed (LiberTEM's behaviour): the complex keys of the frame itself."""
    ds = inline_ctx.load("memory", data=COMPLEX, num_partitions=3)
    got = inline_ctx.run(rt_analysis.PickFFTFrameAnalysis(dataset=ds, parameters={"x": 5, "y": 2}))
    _assert_same(got, _lt_result("pickfft", False, complex_data=True))
    np.testing.assert_array_equal(got.intensity_complex.raw_data, COMPLEX[2, 5])


def test_pickfft_equals_numpy(inline_ctx):
    ds = inline_ctx.load("memory", data=DATA, num_partitions=2)
    got = inline_ctx.run(rt_analysis.PickFFTFrameAnalysis(dataset=ds, parameters={"x": 5, "y": 2}))
    np.testing.assert_allclose(got.intensity.raw_data, np.fft.fftshift(np.abs(np.fft.fft2(DATA[2, 5]))), rtol=1e-6)


def _lt_cluster_labels(params: dict) -> np.ndarray:
    lt_ds = lt_api.Context.make_with("inline").load("memory", data=DATA, num_partitions=3)
    sent: list[Any] = []

    async def send_results(results: Any, finished: bool) -> None:
        sent.append((results, finished))

    analysis = lt_analysis.ClusterAnalysis(dataset=lt_ds, parameters=dict(params))
    asyncio.run(analysis.controller(cancel_id="c", executor=LTAsyncAdapter(wrapped=LTInlineJobExecutor()),
                                    job_is_cancelled=lambda: False, send_results=send_results))
    (results, finished), = sent
    assert finished and results.keys() == ["intensity"]
    return np.asarray(results.intensity.raw_data)


def _lt_cluster_labels_by_steps(params: dict) -> np.ndarray:
    """LiberTEM's labels from its own steps run by hand (its controller fails without the ring: it hands
    ``peak_local_max`` a memoryview)."""
    from libertem.analysis.getroi import get_roi
    from libertem.udf.stddev import StdDevUDF

    ctx = lt_api.Context.make_with("inline")
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    analysis = lt_analysis.ClusterAnalysis(dataset=ds, parameters=dict(params))
    sd = ctx.run_udf(dataset=ds, udf=StdDevUDF(), roi=get_roi(params, ds.shape.nav))
    res = ctx.run_udf(dataset=ds, udf=analysis.get_cluster_udf(sd))
    return np.asarray(analysis.get_udf_results(res, None, damage=True).intensity.raw_data)


@pytest.mark.parametrize("params,reference", [
    (CLUSTER_PARAMS, _lt_cluster_labels),
    (dict(CLUSTER_PARAMS, roi={"shape": "disk", "cx": 3, "cy": 2, "r": 2}), _lt_cluster_labels),  # sd over a ROI
    (dict(CLUSTER_PARAMS, ri=None, n_clust=4), _lt_cluster_labels_by_steps),  # no ring: peaks anywhere
])
def test_cluster_run_equals_libertem(ctx, params, reference):
    want = reference(params)
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    got = ctx.run(rt_analysis.ClusterAnalysis(dataset=ds, parameters=dict(params)))
    assert got.keys() == ["intensity"]
    res = got.intensity
    assert (res.title, res.desc) == ("intensity", "Labels for the clustering")
    assert res.raw_data.shape == NAV and res.raw_data.dtype == want.dtype
    np.testing.assert_array_equal(res.raw_data, want)
    assert len(np.unique(want)) == params["n_clust"]
    assert res.visualized.shape[:2] == NAV


def test_cluster_controller_as_libertem_test_drives_it(inline_ctx):
    """LiberTEM's web GUI path: ``controller`` with an ``AsyncAdapter``-wrapped inline executor."""
    ds = inline_ctx.load("memory", data=DATA, num_partitions=3)
    sent: list[Any] = []

    async def send_results(results: Any, finished: bool) -> None:
        sent.append((results, finished))

    analysis = rt_analysis.ClusterAnalysis(dataset=ds, parameters=dict(CLUSTER_PARAMS))
    asyncio.run(analysis.controller(cancel_id="c", executor=AsyncAdapter(wrapped=inline_ctx.executor),
                                    job_is_cancelled=lambda: False, send_results=send_results))
    (results, finished), = sent
    assert finished
    np.testing.assert_array_equal(results.intensity.raw_data, _lt_cluster_labels(CLUSTER_PARAMS))

    with pytest.raises(UDFRunCancelled, match="cancelled after the standard deviation run"):
        asyncio.run(analysis.controller(cancel_id="c", executor=AsyncAdapter(wrapped=inline_ctx),
                                        job_is_cancelled=lambda: True, send_results=send_results))
    assert len(sent) == 1


def test_cluster_cluster_udf_reads_the_peaks_libertem_reads(inline_ctx):
    """The feature vectors: the mask stack of ``get_cluster_udf`` equals LiberTEM's, peak for peak."""
    ds = inline_ctx.load("memory", data=DATA)
    lt_ds = lt_api.Context.make_with("inline").load("memory", data=DATA)
    sd = {"std": DATA.reshape((-1,) + SIG).std(axis=0)}
    got = rt_analysis.ClusterAnalysis(dataset=ds, parameters=dict(CLUSTER_PARAMS)).get_cluster_udf(sd)
    want = lt_analysis.ClusterAnalysis(dataset=lt_ds, parameters=dict(CLUSTER_PARAMS)).get_cluster_udf(sd)
    got_stack, want_stack = got.params.mask_factories(), want.params.mask_factories()
    np.testing.assert_array_equal(got_stack.todense(), want_stack.todense())
    assert got.params.mask_count == want.params.mask_count and got.params.use_sparse is True


def test_bad_input_raises(inline_ctx):
    with pytest.raises(ConfigValidationError, match="wrapped=.*got list"):
        AsyncAdapter(wrapped=[])
    ds = inline_ctx.load("memory", data=DATA)
    analysis = rt_analysis.ClusterAnalysis(dataset=ds, parameters=dict(CLUSTER_PARAMS))

    async def send_results(results: Any, finished: bool) -> None:
        pass

    with pytest.raises(ValueError, match="executor=object cannot run UDFs"):
        asyncio.run(analysis.controller(cancel_id="c", executor=object(), job_is_cancelled=lambda: False,
                                        send_results=send_results))


def _dm_module() -> mock.MagicMock:
    """A stand-in for GMS's ``DigitalMicrograph``: images whose ``GetNumArray`` is a real array."""
    dm = mock.MagicMock()

    def create_image(data: np.ndarray) -> mock.MagicMock:
        image = mock.MagicMock()
        image.GetNumArray.return_value = np.array(data, copy=True)
        return image

    dm.CreateImage.side_effect = create_image
    return dm


def _gms_run(make_ctx: Callable[[], Any], plot_module: Any, udf_module: Any, monkeypatch: Any) -> Any:
    monkeypatch.setitem(sys.modules, "DigitalMicrograph", _dm_module())
    ctx = make_ctx()
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    udf = udf_module.SumUDF()
    plot = plot_module.GMSLive2DPlot(dataset=ds, udf=udf)
    plot.display()
    ctx.run_udf(dataset=ds, udf=udf, plots=[plot])
    return plot


@pytest.mark.filterwarnings("ignore:Warning. 'partition' will ignore the 'mask':UserWarning")  # LiberTEM's limits
def test_gms_plot_shows_what_libertem_shows(monkeypatch):
    import libertem.udf.sum as lt_sum
    import libertem.viz.gms as lt_gms

    import raytile.udf.sum as rt_sum
    import raytile.viz.gms as rt_gms

    want = _gms_run(lambda: lt_api.Context.make_with("inline"), lt_gms, lt_sum, monkeypatch)
    got = _gms_run(lambda: rt.Context(executor="inline"), rt_gms, rt_sum, monkeypatch)
    got_img, want_img = got.image.GetNumArray(), want.image.GetNumArray()
    np.testing.assert_allclose(got_img, want_img, rtol=1e-6)
    np.testing.assert_allclose(got_img, DATA.sum(axis=(0, 1)), rtol=1e-6)
    got.image.SetName.assert_called_once_with(want.image.SetName.call_args.args[0])
    got.disp.SetDoAutoSurvey.assert_called_once_with(False)
    np.testing.assert_allclose(got.disp.SetContrastLimits.call_args.args,
                               want.disp.SetContrastLimits.call_args.args, rtol=1e-5)
    got.image.UpdateImage.assert_called()


def test_gms_plot_not_displayed_warns(monkeypatch, inline_ctx):
    import raytile.udf.sum as rt_sum
    import raytile.viz.gms as rt_gms

    monkeypatch.setitem(sys.modules, "DigitalMicrograph", _dm_module())
    ds = inline_ctx.load("memory", data=DATA)
    udf = rt_sum.SumUDF()
    plot = rt_gms.GMSLive2DPlot(dataset=ds, udf=udf)
    with pytest.warns(UserWarning, match="^Plot is not displayed, not plotting"):
        inline_ctx.run_udf(dataset=ds, udf=udf, plots=[plot])
    plot.image.UpdateImage.assert_not_called()


def test_analysis_registry_as_libertem():
    """``id_=`` registers an analysis (a ported subclass declares it), the built-ins under LiberTEM's names."""
    from libertem.analysis.base import Analysis as LTAnalysis

    from raytile.analysis.base import Analysis, BaseAnalysis

    assert {k: v.__name__ for k, v in Analysis.registry.items()} == {
        k: v.__name__ for k, v in LTAnalysis.registry.items()}
    assert Analysis.get_analysis_by_type("FEM") is rt_analysis.FEMAnalysis

    class MyAnalysis(BaseAnalysis, id_="H15A_TEST_ANALYSIS"):
        pass

    try:
        assert Analysis.get_analysis_by_type("H15A_TEST_ANALYSIS") is MyAnalysis
        assert MyAnalysis.TYPE == LTAnalysis.TYPE == "UDF"
    finally:
        del Analysis.registry["H15A_TEST_ANALYSIS"]
    with pytest.raises(KeyError):
        Analysis.get_analysis_by_type("H15A_TEST_ANALYSIS")
