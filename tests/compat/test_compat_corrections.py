"""``CorrectionSet`` against LiberTEM's ``libertem.corrections.CorrectionSet`` on the same data.

A user's script changes ``from libertem.corrections import CorrectionSet``
to ``from raytile.corrections import CorrectionSet``: the same constructor
arguments (``excluded_pixels`` as a ``sparse.COO``, a bool or "roi-like"
mask; ``allow_empty``) give the same corrected frames and the same getters.
raytile also takes excluded pixels as coordinates; LiberTEM gets the
``sparse.COO`` of the same pixels. Both run with their inline executor.
"""

from __future__ import annotations

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")
lt_corr = pytest.importorskip("libertem.corrections")
lt_detector = pytest.importorskip("libertem.io.corrections.detector")

import sparse  # noqa: E402

import raytile as rt  # noqa: E402
from raytile.common.errors import ConfigValidationError, DataSetException, RepairValueError  # noqa: E402
from raytile.compat import load_ported  # noqa: E402
from raytile.corrections import CorrectionSet  # noqa: E402

NAV = (4, 6)
SIG = (16, 16)
PARTS = 3
ROI = np.random.default_rng(3).random(NAV) < 0.5

# next to each other, on the frame's edges and corner, on both sides of 4-row and 8-row tile cuts
EXCLUDED = [(3, 5), (4, 0), (7, 11), (8, 11), (12, 6), (0, 0), (15, 11), (5, 5), (5, 6), (3, 15)]

# A UDF that returns every corrected frame, assembled from sig-sliced tiles (4 rows of float32 if the
# data set allows): it sees what the corrections did to each tile.
FRAMES_UDF = '''
from libertem.udf import UDF


class FramesUDF(UDF):
    def get_result_buffers(self):
        return {"frames": self.buffer(kind="nav", extra_shape=tuple(self.meta.dataset_shape.sig),
                                      dtype=self.meta.input_dtype)}

    def get_tiling_preferences(self):
        return {"depth": 2, "total_size": 4 * self.meta.dataset_shape.sig[1] * 4}

    def process_tile(self, tile):
        self.results.frames[(slice(None),) + self.meta.slice.get(sig_only=True)] = tile
'''


def _data() -> np.ndarray:
    return np.random.default_rng(17).integers(0, 4000, size=NAV + SIG).astype(np.uint16)


def _dark_gain() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(23)
    return rng.random(SIG) * 20, 0.5 + rng.random(SIG)


def _coo(pixels) -> sparse.COO:
    return sparse.COO(coords=np.array(pixels).T, data=1, shape=SIG)


def _mask(pixels, dtype=bool) -> np.ndarray:
    m = np.zeros(SIG, dtype=dtype)
    m[tuple(np.array(pixels).T)] = 1
    return m


# name -> (raytile's excluded_pixels, LiberTEM's excluded_pixels)
FORMS = {
    "sparse.COO": (lambda px: _coo(px), lambda px: _coo(px)),
    "bool mask": (lambda px: _mask(px), lambda px: _mask(px)),
    "roi-like uint8": (lambda px: _mask(px, np.uint8), lambda px: _mask(px, np.uint8)),
    "pixel list": (lambda px: list(px), lambda px: _coo(px)),
    "np.nonzero": (lambda px: np.nonzero(_mask(px)), lambda px: _coo(px)),
    "argwhere array": (lambda px: np.argwhere(_mask(px)), lambda px: _coo(px)),
}


@pytest.fixture(scope="module")
def lt_ctx():
    ctx = lt_api.Context.make_with("inline")
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def rt_ctx():
    ctx = rt.Context(executor="inline")
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def raw_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("corr") / "data.raw"
    _data().tofile(path)
    return str(path)


@pytest.fixture(scope="module")
def udfs():
    ns: dict = {}
    exec(compile(FRAMES_UDF, "FramesUDF", "exec"), ns)  # noqa: S102 - LiberTEM's original
    return ns["FramesUDF"], load_ported(FRAMES_UDF, "ported_frames_udf").FramesUDF


def _load(ctx, kind: str, raw_path: str):
    if kind == "memory":
        return ctx.load("memory", data=_data(), num_partitions=PARTS)
    return ctx.load("raw", path=raw_path, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=PARTS)


def _run_both(lt_ctx, rt_ctx, udfs, raw_path, rt_corr, lt_corr_set, kind: str, roi):
    lt_udf, rt_udf = udfs
    want = lt_ctx.run_udf(dataset=_load(lt_ctx, kind, raw_path), udf=lt_udf(), corrections=lt_corr_set, roi=roi)
    got = rt_ctx.run_udf(dataset=_load(rt_ctx, kind, raw_path), udf=rt_udf(), corrections=rt_corr, roi=roi)
    return np.asarray(got["frames"].data), np.asarray(want["frames"].data)


def _assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, what
    # LiberTEM subtracts and multiplies in the dark/gain frames' float64, raytile in float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-4, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("kind", ["memory", "raw"])
def test_corrected_frames_match_libertem(form, kind, lt_ctx, rt_ctx, udfs, raw_path):
    dark, gain = _dark_gain()
    rt_form, lt_form = FORMS[form]
    for with_roi in (False, True):
        roi = ROI if with_roi else None
        got, want = _run_both(
            lt_ctx, rt_ctx, udfs, raw_path,
            CorrectionSet(dark=dark, gain=gain, excluded_pixels=rt_form(EXCLUDED)),
            lt_corr.CorrectionSet(dark=dark, gain=gain, excluded_pixels=lt_form(EXCLUDED)), kind, roi)
        _assert_same(got, want, f"{form} {kind} roi={with_roi}")
        # excluded pixels only: the patch alone; and the repaired values are not the raw ones
        got, want = _run_both(lt_ctx, rt_ctx, udfs, raw_path, CorrectionSet(excluded_pixels=rt_form(EXCLUDED)),
                              lt_corr.CorrectionSet(excluded_pixels=lt_form(EXCLUDED)), kind, roi)
        _assert_same(got, want, f"{form} only {kind} roi={with_roi}")
    raw = _data().astype(np.float32)
    assert not np.allclose(got[:, :, 3, 5], raw[:, :, 3, 5])


@pytest.mark.parametrize("kind", ["memory", "raw"])
def test_dark_gain_and_empty_exclusions_match_libertem(kind, lt_ctx, rt_ctx, udfs, raw_path):
    dark, gain = _dark_gain()
    cases = [
        ("dark", dict(dark=dark), dict(dark=dark)),
        ("gain", dict(gain=gain), dict(gain=gain)),
        # no pixel excluded: still a correction (float32 input), as in LiberTEM
        ("empty COO", dict(excluded_pixels=_coo(np.zeros((0, 2), int))),
         dict(excluded_pixels=_coo(np.zeros((0, 2), int)))),
        ("all-False mask", dict(excluded_pixels=np.zeros(SIG, bool)), dict(excluded_pixels=np.zeros(SIG, bool))),
    ]
    for name, rt_kw, lt_kw in cases:
        got, want = _run_both(lt_ctx, rt_ctx, udfs, raw_path, CorrectionSet(**rt_kw), lt_corr.CorrectionSet(**lt_kw),
                              kind, None)
        _assert_same(got, want, f"{name} {kind}")


# (10, 10) is inside a fully excluded 3x3 block, (0, 15) a corner whose three neighbours are excluded:
# neither has a neighbour to be repaired from.
UNREPAIRABLE = [(y, x) for y in (9, 10, 11) for x in (9, 10, 11)] + [(0, 15), (0, 14), (1, 14), (1, 15)]


@pytest.mark.parametrize("form", list(FORMS))
def test_allow_empty_matches_libertem(form, lt_ctx, rt_ctx, udfs, raw_path):
    rt_form, lt_form = FORMS[form]
    # the default, allow_empty=False: LiberTEM refuses in the constructor
    with pytest.raises(lt_detector.RepairValueError):
        lt_corr.CorrectionSet(excluded_pixels=lt_form(UNREPAIRABLE))
    with pytest.raises(RepairValueError, match=r"\(0, 15\), \(10, 10\) have no.*allow_empty=True") as caught:
        # raytile too, or (pixel coordinates: the signal shape is not known yet) when the run starts
        cs = CorrectionSet(excluded_pixels=rt_form(UNREPAIRABLE))
        rt_ctx.run_udf(dataset=_load(rt_ctx, "memory", raw_path), udf=udfs[1](), corrections=cs)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ConfigValidationError)
    # allow_empty=True: those pixels keep their (dark/gain-corrected) values, the others are patched
    dark, gain = _dark_gain()
    for kind in ("memory", "raw"):
        got, want = _run_both(
            lt_ctx, rt_ctx, udfs, raw_path,
            CorrectionSet(dark=dark, gain=gain, excluded_pixels=rt_form(UNREPAIRABLE), allow_empty=True),
            lt_corr.CorrectionSet(dark=dark, gain=gain, excluded_pixels=lt_form(UNREPAIRABLE), allow_empty=True),
            kind, None)
        _assert_same(got, want, f"allow_empty {form} {kind}")
    expected = (_data().astype(np.float64)[:, :, 10, 10] - dark[10, 10]) * gain[10, 10]
    np.testing.assert_allclose(got[:, :, 10, 10], expected, rtol=1e-6)


def test_allow_empty_default_is_libertems():
    import inspect

    lt_default = inspect.signature(lt_corr.CorrectionSet).parameters["allow_empty"].default
    assert inspect.signature(CorrectionSet).parameters["allow_empty"].default is lt_default is False
    assert CorrectionSet().allow_empty is False


@pytest.mark.parametrize("form", list(FORMS))
def test_getters_match_libertem(form):
    dark, gain = _dark_gain()
    rt_form, lt_form = FORMS[form]
    rt_cs = CorrectionSet(dark=dark, gain=gain, excluded_pixels=rt_form(EXCLUDED))
    lt_cs = lt_corr.CorrectionSet(dark=dark, gain=gain, excluded_pixels=lt_form(EXCLUDED))
    assert rt_cs.get_dark_frame() is dark and lt_cs.get_dark_frame() is dark
    assert rt_cs.get_gain_map() is gain and lt_cs.get_gain_map() is gain
    got, want = rt_cs.get_excluded_pixels(), lt_cs.get_excluded_pixels()
    assert isinstance(got, sparse.COO) and isinstance(want, sparse.COO)
    assert got.shape == want.shape == SIG
    np.testing.assert_array_equal(got.todense() != 0, want.todense() != 0)
    if form in ("sparse.COO", "bool mask", "roi-like uint8"):  # LiberTEM's own forms: the same COO
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.coords, want.coords)
        np.testing.assert_array_equal(got.data, want.data)
    assert rt_cs.have_corrections() and lt_cs.have_corrections()


def test_getters_without_corrections_and_a_given_coo():
    rt_cs, lt_cs = CorrectionSet(), lt_corr.CorrectionSet()
    for cs in (rt_cs, lt_cs):
        assert cs.get_dark_frame() is None and cs.get_gain_map() is None and cs.get_excluded_pixels() is None
        assert not cs.have_corrections()
    coo = _coo(EXCLUDED)
    assert CorrectionSet(excluded_pixels=coo).get_excluded_pixels() is coo
    assert lt_corr.CorrectionSet(excluded_pixels=coo).get_excluded_pixels() is coo


def test_coordinates_need_the_signal_shape_for_get_excluded_pixels():
    cs = CorrectionSet(excluded_pixels=EXCLUDED)
    with pytest.raises(DataSetException, match="signal shape is not known yet"):
        cs.get_excluded_pixels()
    cs.check(SIG)
    np.testing.assert_array_equal(cs.get_excluded_pixels().todense(), _mask(EXCLUDED))
    # dark or gain fix the signal shape
    got = CorrectionSet(gain=np.ones(SIG), excluded_pixels=EXCLUDED).get_excluded_pixels()
    assert got.dtype == bool and got.shape == SIG and got.nnz == len(EXCLUDED)
    # two pixels in 2D: a list of (y, x) pixels, not one row per dimension
    two = CorrectionSet(excluded_pixels=[(5, 5), (10, 3)], gain=np.ones(SIG)).get_excluded_pixels()
    assert sorted(map(tuple, two.coords.T.tolist())) == [(5, 5), (10, 3)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(allow_empty="yes"), "allow_empty must be a bool, got allow_empty='yes'"),
    (dict(excluded_pixels="corner"), "excluded_pixels must be a sparse.COO.*got excluded_pixels='corner'"),
    (dict(excluded_pixels=[(1.5, 2.0)]), r"integer pixel coordinates.*excluded_pixels=\[\(1.5, 2.0\)\]"),
    (dict(excluded_pixels=[(1, 2), (3,)]), r"ragged: excluded_pixels=\[\(1, 2\), \(3,\)\]"),
    (dict(excluded_pixels=[(-1, 2)]), r"negative coordinate: excluded_pixels=\[\(-1, 2\)\]"),
    (dict(excluded_pixels=np.zeros(SIG, np.float32)), "excluded_pixels=array of shape .16, 16. and dtype float32"),
    (dict(dark=np.array([["a", "b"]])), "dark must be a real numeric array, got dark=array"),
    (dict(gain=sparse.COO.from_numpy(np.ones(SIG))), "gain must be a dense array"),
])
def test_bad_parameters_raise_config_validation_error(kwargs, match):
    with pytest.raises(ConfigValidationError, match=match):
        CorrectionSet(**kwargs)


def test_shapes_that_do_not_fit_the_data_set(rt_ctx, udfs, raw_path):
    ds = _load(rt_ctx, "memory", raw_path)
    bad = [
        (CorrectionSet(dark=np.zeros((8, 8))), "dark frame has shape \\(8, 8\\)"),
        (CorrectionSet(excluded_pixels=sparse.COO(coords=[[1], [1]], data=1, shape=(8, 8))),
         "excluded_pixels has shape \\(8, 8\\), the signal shape is \\(16, 16\\)"),
        (CorrectionSet(excluded_pixels=[(20, 1)]), "out of range in dim 0 \\(size 16\\): 20..20"),
        (CorrectionSet(excluded_pixels=[(1, 2, 3)]), "coordinates have 3 dims, the signal has 2"),
    ]
    for cs, match in bad:
        with pytest.raises(DataSetException, match=match):
            rt_ctx.run_udf(dataset=ds, udf=udfs[1](), corrections=cs)
