"""LiberTEM's built-in UDFs that raytile adds for compatibility, each against an independent numpy reference.

SignalMaxUDF, RecordUDF, FEMUDF, CrystallinityUDF (and CoMUDF's LiberTEM
parameters and results further down): memory data sets with several
partitions, with and without an ROI, whole frames and small signal tiles,
on the inline executor; one pass of all of them on Ray.
"""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import UDFException
from raytile.udf import UDF, CoMUDF, CrystallinityUDF, FEMUDF, RecordUDF, SignalMaxUDF
from raytile.udf import ApplyMasksUDF
from raytile.udf.com import (
    CoMParams, RegressionOptions, apply_correction, center_shifts, com_masks_factory, coordinate_check,
    guess_corrections,
)

NAV = (5, 6)
SIG = (16, 12)


def make_data(rng, dtype, nav=NAV, sig=SIG, offset=50.0):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.normal(offset, 20, size=nav + sig).astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return rng.integers(lo, hi, size=nav + sig, endpoint=True).astype(dtype)


def make_roi(rng, nav=NAV):
    roi = rng.random(nav) > 0.5
    roi.flat[0] = True
    roi.flat[-1] = False
    return roi


class SmallTiles(UDF):
    """Asks for small tiles (a few frames, part of the signal) and records the largest signal part seen."""

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def get_tiling_preferences(self):
        return {"depth": 2, "total_size": 64}

    def get_result_buffers(self):
        return {"sig_px": self.buffer(kind="single", dtype="int64")}

    def process_tile(self, tile):
        self.results.sig_px[:] = max(int(self.results.sig_px[0]), int(np.prod(tile.shape[1:])))

    def merge(self, dest, src):
        dest.sig_px[:] = np.maximum(dest.sig_px, src.sig_px)


def run(ctx, data, udfs, roi=None, small=False, num_partitions=3):
    ds = ctx.load("memory", data=data, num_partitions=num_partitions)
    probe = [SmallTiles()] if small else []
    res = ctx.run_udf(dataset=ds, udf=probe + list(udfs), roi=roi)
    if small:
        assert int(res[0]["sig_px"].data[0]) < int(np.prod(data.shape[-2:])), "tiles did not split the signal"
        res = res[1:]
    return res


def selected(data, roi):
    """The frames in the ROI (all frames without one), in nav order: ``(n, *sig)``."""
    return data.reshape((-1,) + data.shape[-2:]) if roi is None else data[roi]


def nav_values(result, roi):
    """A nav result's values at the ROI positions (all positions without one), flat."""
    data = np.asarray(result.data)
    return data.reshape(-1) if roi is None else data[roi]


def ring_reference(sig, cy, cx, r_in, r_out):
    y, x = np.mgrid[: sig[0], : sig[1]]
    d2 = (y - cy) ** 2 + (x - cx) ** 2
    return (d2 > r_in ** 2) & (d2 <= r_out ** 2)


# -- SignalMaxUDF ------------------------------------------------------------------------------

@pytest.mark.parametrize("small", [False, True], ids=["frames", "small-tiles"])
@pytest.mark.parametrize("use_roi", [False, True], ids=["noroi", "roi"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32"])
def test_signal_max_matches_numpy(inline_ctx, rng, dtype, use_roi, small):
    data = make_data(rng, dtype)
    roi = make_roi(rng) if use_roi else None
    (res,) = run(inline_ctx, data, [SignalMaxUDF()], roi=roi, small=small)
    got = res["intensity"].data
    assert got.shape == SIG and got.dtype == data.dtype
    np.testing.assert_array_equal(got, selected(data, roi).max(axis=0))


def test_signal_max_of_negative_data_and_single_partition(inline_ctx, rng):
    data = -np.abs(make_data(rng, "float64")) - 1.0  # all negative: a zero start would win
    for parts in (1, 4):
        (res,) = run(inline_ctx, data, [SignalMaxUDF()], num_partitions=parts)
        np.testing.assert_array_equal(res["intensity"].data, data.reshape(-1, *SIG).max(axis=0))
    assert (res["intensity"].data < 0).all()


# -- FEMUDF ------------------------------------------------------------------------------------

def fem_reference(frames, center, rad_in, rad_out):
    ring = ring_reference(frames.shape[1:], center[0], center[1], rad_in, rad_out)
    return np.array([np.std(f.astype(np.float64)[ring]) for f in frames])


@pytest.mark.parametrize("small", [False, True], ids=["frames", "small-tiles"])
@pytest.mark.parametrize("use_roi", [False, True], ids=["noroi", "roi"])
def test_fem_matches_numpy(inline_ctx, rng, use_roi, small):
    data = make_data(rng, "uint16")
    roi = make_roi(rng) if use_roi else None
    center, rad_in, rad_out = (5, 7.5), 2, 5.5  # off-centre, so that swapping y and x would show
    (res,) = run(inline_ctx, data, [FEMUDF(center=center, rad_in=rad_in, rad_out=rad_out)], roi=roi, small=small)
    got = res["intensity"]
    assert got.data.shape == NAV and got.data.dtype == np.float32
    ref = fem_reference(selected(data, roi), center, rad_in, rad_out)
    np.testing.assert_allclose(nav_values(got, roi), ref, rtol=1e-5)
    if roi is not None:
        assert np.isnan(got.data[~roi]).all()
        np.testing.assert_array_equal(got.valid_mask, roi)


def test_fem_keeps_precision_with_a_large_offset(inline_ctx, rng):
    data = make_data(rng, "float64", offset=1e7) * 0 + 1e7 + rng.normal(0, 1e-3, size=NAV + SIG)
    udf = FEMUDF(center=(8, 6), rad_in=0, rad_out=20)  # the whole frame but its centre pixel (d > 0)
    (res,) = run(inline_ctx, data, [udf], small=True)
    ring = np.ones(SIG, dtype=bool)
    ring[8, 6] = False
    ref = np.array([f[ring].std() for f in data.reshape(-1, *SIG)])
    np.testing.assert_allclose(res["intensity"].data.reshape(-1), ref, rtol=1e-4)


def test_fem_empty_ring_is_nan_and_2d_signal_needed(inline_ctx, rng):
    data = make_data(rng, "float32")
    (res,) = run(inline_ctx, data, [FEMUDF(center=(8, 6), rad_in=50, rad_out=60)])
    assert np.isnan(res["intensity"].data).all()
    ds = inline_ctx.load("memory", data=rng.random((4, 5, 16)).astype(np.float32), sig_dims=1)
    with pytest.raises(UDFException, match="FEMUDF needs a 2D signal"):
        inline_ctx.run_udf(dataset=ds, udf=FEMUDF(center=(1, 1), rad_in=0, rad_out=2))


# -- CrystallinityUDF --------------------------------------------------------------------------

def crystallinity_reference(frames, rad_in, rad_out, real_center=None, real_rad=None):
    n, h, w = frames.shape
    frames = frames.astype(np.float64)
    if real_center is not None and real_rad is not None:
        y, x = np.mgrid[:h, :w]
        keep = (y - real_center[0]) ** 2 + (x - real_center[1]) ** 2 > real_rad ** 2
        frames = frames * keep
    # distance of every rfft2 output bin from zero frequency, in frequency-index units
    ky = np.fft.fftfreq(h) * h
    kx = np.fft.rfftfreq(w) * w
    k2 = ky[:, None] ** 2 + kx[None, :] ** 2
    ring = (k2 > rad_in ** 2) & (k2 <= rad_out ** 2)
    spectra = np.abs(np.fft.rfft2(frames, axes=(1, 2)))
    return (spectra * ring).sum(axis=(1, 2))


@pytest.mark.parametrize("real", [False, True], ids=["plain", "real-mask"])
@pytest.mark.parametrize("use_roi", [False, True], ids=["noroi", "roi"])
def test_crystallinity_matches_numpy(inline_ctx, rng, use_roi, real):
    data = make_data(rng, "float32")
    roi = make_roi(rng) if use_roi else None
    kw = {"real_center": (6, 4.5), "real_rad": 3} if real else {"real_center": None, "real_rad": None}
    udf = CrystallinityUDF(rad_in=1.5, rad_out=4, **kw)
    (res,) = run(inline_ctx, data, [udf], roi=roi)
    got = res["intensity"]
    assert got.data.shape == NAV and got.data.dtype == np.float32
    ref = crystallinity_reference(selected(data, roi), 1.5, 4, kw["real_center"], kw["real_rad"])
    np.testing.assert_allclose(nav_values(got, roi), ref, rtol=1e-5)
    if roi is not None:
        assert np.isnan(got.data[~roi]).all()


def test_crystallinity_real_mask_changes_result(inline_ctx, rng):
    data = make_data(rng, "float32")
    plain, masked = run(inline_ctx, data, [
        CrystallinityUDF(rad_in=0, rad_out=3, real_center=None, real_rad=2),  # one missing: no mask
        CrystallinityUDF(rad_in=0, rad_out=3, real_center=(8, 6), real_rad=2),
    ])
    ref = crystallinity_reference(data.reshape(-1, *SIG), 0, 3)
    np.testing.assert_allclose(plain["intensity"].data.reshape(-1), ref, rtol=1e-5)
    assert not np.allclose(masked["intensity"].data, plain["intensity"].data)


# -- RecordUDF ---------------------------------------------------------------------------------

@pytest.mark.parametrize("small", [False, True], ids=["frames", "small-tiles"])
@pytest.mark.parametrize("use_roi", [False, True], ids=["noroi", "roi"])
@pytest.mark.parametrize("dtype", ["uint16", "float32"])
def test_record_writes_the_data_set(inline_ctx, rng, tmp_path, dtype, use_roi, small):
    data = make_data(rng, dtype)
    roi = make_roi(rng) if use_roi else None
    path = tmp_path / "rec.npy"
    res = run(inline_ctx, data, [RecordUDF(filename=path)], roi=roi, small=small)
    assert dict(res[0]) == {}  # no result buffers
    got = np.load(path)
    assert got.dtype == data.dtype
    if roi is None:
        assert got.shape == data.shape
        np.testing.assert_array_equal(got, data)
    else:
        assert got.shape == (int(roi.sum()),) + SIG
        np.testing.assert_array_equal(got, data[roi])


def test_record_replaces_a_stale_file_and_resolves_relative_paths(inline_ctx, rng, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "rec.npy", np.ones((3, 3), dtype=np.int8))  # wrong shape and dtype
    udf = RecordUDF("rec.npy")
    assert udf.params.filename == str(tmp_path / "rec.npy")
    data = make_data(rng, "int16")
    run(inline_ctx, data, [udf])
    np.testing.assert_array_equal(np.load(tmp_path / "rec.npy"), data)
    # a second run over other data reuses the file (same layout) and rewrites every frame
    data2 = make_data(rng, "int16")
    run(inline_ctx, data2, [RecordUDF("rec.npy", _is_master=True)])
    np.testing.assert_array_equal(np.load(tmp_path / "rec.npy"), data2)


def test_record_partition_copies_keep_the_parameters(tmp_path):
    udf = RecordUDF(tmp_path / "x.npy")
    part = udf.copy_for_partition(0, 3, None)
    assert type(part) is RecordUDF and part.params.filename == udf.params.filename


# -- CoMUDF: LiberTEM's parameters and results ------------------------------------------------

def com_reference(data, roi=None, cy=None, cx=None, r=np.inf, ri=0.0, scan_rotation=0.0, flip_y=False,
                  regression=-1):
    """LiberTEM's CoM results on the full nav grid, written out with plain numpy (2D nav, 2D sig)."""
    nav, sig = data.shape[:2], data.shape[2:]
    cy = sig[0] // 2 if cy is None else cy
    cx = sig[1] // 2 if cx is None else cx
    frames = data.astype(np.float64)
    y, x = np.mgrid[: sig[0], : sig[1]]
    d2 = (y - cy) ** 2 + (x - cx) ** 2
    region = (d2 <= r * r) & ((d2 > ri * ri) if ri > 0 else True)  # the ring leaves out d == ri
    tot = (frames * region).sum(axis=(2, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        com_y = (frames * region * y).sum(axis=(2, 3)) / tot
        com_x = (frames * region * x).sum(axis=(2, 3)) / tot
    com_y[tot == 0], com_x[tot == 0] = cy, cx  # empty frames: at the centre, zero shift
    sy, sx = com_y - cy, com_x - cx
    fy0 = -sy if flip_y else sy
    a = np.deg2rad(scan_rotation)
    fy = np.cos(a) * fy0 + np.sin(a) * sx
    fx = -np.sin(a) * fy0 + np.cos(a) * sx
    sel = np.ones(nav, dtype=bool) if roi is None else roi
    iy, ix = np.nonzero(sel)
    reg = np.zeros((3, 2))
    if isinstance(regression, np.ndarray):
        reg = regression
    elif regression == 0:
        reg[0] = [fy[sel].mean(), fx[sel].mean()]
    elif regression == 1:
        design = np.stack([np.ones(len(iy)), iy, ix], axis=1)
        reg = np.linalg.lstsq(design, np.stack([fy[sel], fx[sel]], axis=1), rcond=None)[0]
    gy, gx = np.mgrid[: nav[0], : nav[1]]
    fy = fy - (reg[0, 0] + gy * reg[1, 0] + gx * reg[2, 0])
    fx = fx - (reg[0, 1] + gy * reg[1, 1] + gx * reg[2, 1])
    Fy, Fx = np.where(sel, fy, np.nan), np.where(sel, fx, np.nan)  # no field outside the ROI
    return {
        "raw_com": np.stack([com_y, com_x], -1), "raw_shifts": np.stack([sy, sx], -1),
        "field": np.stack([fy, fx], -1), "field_y": fy, "field_x": fx, "magnitude": np.hypot(fy, fx),
        "divergence": np.gradient(Fy, axis=0) + np.gradient(Fx, axis=1),
        "curl": np.gradient(Fy, axis=1) - np.gradient(Fx, axis=0), "regression": reg,
    }


def check_com(res, ref, roi):
    sel = np.ones(NAV, dtype=bool) if roi is None else roi
    for name in ("raw_com", "raw_shifts", "field", "field_y", "field_x", "magnitude", "divergence", "curl"):
        got = res[name].data
        assert got.shape == ref[name].shape, name
        np.testing.assert_allclose(got[sel], ref[name][sel], rtol=1e-7, atol=1e-9, err_msg=name)
        if roi is not None:
            assert np.isnan(got[~roi]).all(), name
    assert res["regression"].data.shape == (3, 2)
    np.testing.assert_allclose(res["regression"].data, ref["regression"], rtol=1e-7, atol=1e-9)


COM_CASES = [
    dict(),
    dict(cy=7.0, cx=5.5, r=6.0, ri=1.5),
    dict(scan_rotation=30.0),
    dict(cy=8.5, cx=5.0, r=7.0, flip_y=True, scan_rotation=-75.0, regression=0),
    dict(flip_y=True, regression=1),
    dict(r=6.0, scan_rotation=190.0, regression=RegressionOptions.SUBTRACT_LINEAR),
]


@pytest.mark.parametrize("use_roi", [False, True], ids=["noroi", "roi"])
@pytest.mark.parametrize("params", COM_CASES, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "default"
                                                   for c in COM_CASES])
def test_com_libertem_params_match_numpy(inline_ctx, rng, params, use_roi):
    data = make_data(rng, "uint16") + 1  # every frame has intensity
    roi = make_roi(rng) if use_roi else None
    (res,) = run(inline_ctx, data, [CoMUDF.with_params(**params)], roi=roi)
    check_com(res, com_reference(data, roi, **params), roi)


def test_com_small_tiles_and_regression_array(inline_ctx, rng):
    data = make_data(rng, "float32", offset=100)
    reg = np.array([[0.3, -0.2], [0.05, 0.01], [-0.02, 0.04]])
    params = dict(cy=7.0, cx=6.0, r=8.0, scan_rotation=12.0, regression=reg)
    (res,) = run(inline_ctx, data, [CoMUDF.with_params(**params)], small=True)
    check_com(res, com_reference(data, **params), None)


def test_com_rotation_and_flip_directions(inline_ctx, rng):
    data = make_data(rng, "float32", offset=100)
    quarter, flipped = run(inline_ctx, data, [CoMUDF.with_params(scan_rotation=90.0),
                                               CoMUDF.with_params(flip_y=True)])
    shifts = quarter["raw_shifts"].data
    np.testing.assert_allclose(quarter["field_y"].data, shifts[..., 1], atol=1e-12)
    np.testing.assert_allclose(quarter["field_x"].data, -shifts[..., 0], atol=1e-12)
    np.testing.assert_allclose(flipped["field"].data, shifts * [-1, 1], atol=1e-12)
    np.testing.assert_allclose(quarter["magnitude"].data, np.hypot(shifts[..., 0], shifts[..., 1]), rtol=1e-12)


def test_com_params_object_copies_and_patches(inline_ctx, rng):
    data = make_data(rng, "uint16") + 1
    cp = CoMParams(cy=7.0, cx=5.0, r=6.0, scan_rotation=20.0, flip_y=True, regression=0)
    a, b = CoMUDF(cp), CoMUDF(com_params=cp)
    ra, rb, rc = run(inline_ctx, data, [a, b, CoMUDF.with_params(**cp._asdict())])
    for name in ("field", "divergence", "curl", "regression"):
        np.testing.assert_array_equal(ra[name].data, rc[name].data)
        np.testing.assert_array_equal(rb[name].data, rc[name].data)
    part = a.copy_for_partition(0, 3, None)
    assert part.params.scan_rotation == 20.0 and part.params.flip_y is True and part.params.regression == 0
    a.update_parameters({"com_params": CoMParams(r=3.0)})
    assert a.params.r == 3.0 and a.params.scan_rotation == 0.0
    a.update_parameters({"r": 4.0})
    assert a.params.r == 4.0
    with pytest.raises(UDFException, match="com_params must be a CoMParams"):
        CoMUDF(7.0)


def test_com_parameter_errors(inline_ctx, rng):
    with pytest.raises(ValueError, match="Inner radius must be less than outer radius"):
        CoMUDF.with_params(r=2.0, ri=2.0)
    data = make_data(rng, "uint16") + 1
    ds = inline_ctx.load("memory", data=data)
    with pytest.raises(UDFException, match="unrecognized regression option 2"):
        inline_ctx.run_udf(dataset=ds, udf=CoMUDF.with_params(regression=2))
    with pytest.raises(UDFException, match="not shaped"):
        inline_ctx.run_udf(dataset=ds, udf=CoMUDF.with_params(regression=np.zeros((2, 2))))


def test_com_empty_frames_and_1d_scans_refused(inline_ctx, rng):
    data = make_data(rng, "float32", offset=100)
    data[2, 3] = 0  # no intensity: zero shift, part of the fit and of the neighbours' differences (LiberTEM)
    (res,) = run(inline_ctx, data, [CoMUDF.with_params(regression=1)])
    cy, cx = SIG[0] // 2, SIG[1] // 2
    np.testing.assert_array_equal(res["raw_com"].data[2, 3], [cy, cx])
    np.testing.assert_array_equal(res["raw_shifts"].data[2, 3], [0.0, 0.0])
    ref = com_reference(data, regression=1)
    check_com(res, ref, None)
    reg = res["regression"].data
    np.testing.assert_allclose(res["field"].data[2, 3], -(reg[0] + 2 * reg[1] + 3 * reg[2]), rtol=1e-7, atol=1e-12)

    # a 1D scan is refused with a ValueError, as LiberTEM's CoMUDF refuses it (tests/compat/test_lt_behaviours.py)
    line = data.reshape(30, *SIG)
    for regression in (0, 1):
        with pytest.raises(ValueError, match=r"CoMUDF needs a 2D nav shape .* got nav shape \(30,\)"):
            run(inline_ctx, line, [CoMUDF.with_params(regression=regression, scan_rotation=45.0)])


def atomic_field(shape=(24, 26), spacing=6.0, width=1.5):
    """A curl-free field pulling towards a lattice of 'atoms': the gradient of a sum of Gaussians."""
    y, x = np.mgrid[: shape[0], : shape[1]].astype(np.float64)
    phi = np.zeros(shape)
    for ay in np.arange(3.0, shape[0], spacing):
        for ax in np.arange(2.0, shape[1], spacing):
            phi += np.exp(-((y - ay) ** 2 + (x - ax) ** 2) / (2 * width ** 2))
    return np.gradient(phi, axis=0), np.gradient(phi, axis=1)


@pytest.mark.parametrize("angle,flip", [(0, False), (37, True), (-120, False), (150, True), (180, False)])
def test_guess_corrections_recovers_rotation_and_flip(angle, flip):
    fy, fx = atomic_field()
    # what a detector rotated (and flipped) against the scan would measure, around centre (7.5, 9.0)
    my, mx = apply_correction(fy, fx, scan_rotation=angle, flip_y=flip, forward=False)
    guess = guess_corrections(my + 7.5, mx + 9.0)
    assert guess.flip_y == flip
    assert guess.scan_rotation == angle
    sel = (slice(0, -1), slice(0, -1))
    assert guess.cy == pytest.approx(np.mean(my[sel] + 7.5)) and guess.cx == pytest.approx(np.mean(mx[sel] + 9.0))
    straight, flipped = coordinate_check(my, mx)
    best = flipped if flip else straight
    # brute force: the RMS curl at the found angle, computed directly
    cy_, cx_ = apply_correction(my, mx, scan_rotation=angle % 360, flip_y=flip)
    curl = np.gradient(cy_, axis=1) - np.gradient(cx_, axis=0)
    assert best[angle % 360] == pytest.approx(np.sqrt(np.mean(curl[sel] ** 2)), abs=1e-12)
    assert best[angle % 360] < 1e-9 < best[(angle + 90) % 360]


def test_center_shifts_and_com_masks_factory(inline_ctx, rng):
    y, x = center_shifts(np.array([[2.0, 0.0]]), np.array([[6.0, 5.0]]), np.array([[2.0, 5.0]]), 1.0, 0.5)
    np.testing.assert_array_equal(y, [[2.0, 0.0]])
    np.testing.assert_array_equal(x, [[0.5, 0.0]])
    data = make_data(rng, "uint16") + 1
    factories = com_masks_factory(detector_y=SIG[0], detector_x=SIG[1], cy=7.0, cx=5.0, r=5.0)
    am, com = run(inline_ctx, data, [ApplyMasksUDF(mask_factories=factories),
                                     CoMUDF.with_params(cy=7.0, cx=5.0, r=5.0)])
    sums = am["intensity"].data
    np.testing.assert_allclose(sums[..., 1:] / sums[..., :1], com["raw_com"].data, rtol=1e-6)


def test_raw_file_data_set_with_roi(inline_ctx, rng, tmp_path):
    data = make_data(rng, "uint16")
    raw = tmp_path / "scan.raw"
    data.tofile(raw)
    ds = inline_ctx.load("raw", path=raw, nav_shape=NAV, sig_shape=SIG, dtype="uint16", num_partitions=4)
    roi = make_roi(rng)
    out = tmp_path / "rec.npy"
    mx, fem, _, com = inline_ctx.run_udf(dataset=ds, roi=roi, udf=[
        SignalMaxUDF(), FEMUDF(center=(8, 6), rad_in=1, rad_out=5), RecordUDF(out), CoMUDF.with_params(regression=0),
    ])
    frames = data[roi]
    np.testing.assert_array_equal(mx["intensity"].data, frames.max(axis=0))
    np.testing.assert_allclose(fem["intensity"].data[roi], fem_reference(frames, (8, 6), 1, 5), rtol=1e-5)
    np.testing.assert_array_equal(np.load(out), frames)
    check_com(com, com_reference(data, roi, regression=0), roi)


# -- all of them on Ray ------------------------------------------------------------------------

def test_compat_builtins_on_ray(ray_context, rng, tmp_path):
    data = make_data(rng, "float32")
    roi = make_roi(rng)
    path = tmp_path / "ray.npy"
    ds = ray_context.load("memory", data=data, num_partitions=3)
    com_params = dict(cy=7.0, cx=5.5, r=7.0, scan_rotation=-30.0, flip_y=True, regression=1)
    mx, fem, cr, _, com = ray_context.run_udf(dataset=ds, roi=roi, udf=[
        SignalMaxUDF(), FEMUDF(center=(5, 7.5), rad_in=2, rad_out=5.5),
        CrystallinityUDF(rad_in=1.5, rad_out=4, real_center=(6, 4.5), real_rad=3), RecordUDF(path),
        CoMUDF.with_params(**com_params),
    ])
    frames = data[roi]
    np.testing.assert_array_equal(mx["intensity"].data, frames.max(axis=0))
    np.testing.assert_allclose(fem["intensity"].data[roi], fem_reference(frames, (5, 7.5), 2, 5.5), rtol=1e-5)
    np.testing.assert_allclose(cr["intensity"].data[roi],
                               crystallinity_reference(frames, 1.5, 4, (6, 4.5), 3), rtol=1e-5)
    np.testing.assert_array_equal(np.load(path), frames)
    check_com(com, com_reference(data, roi, **com_params), roi)


def test_exported():
    for name in ("SignalMaxUDF", "RecordUDF", "FEMUDF", "CrystallinityUDF", "CoMUDF"):
        assert issubclass(getattr(rt.udf, name), UDF)
        assert name in rt.udf.__all__
