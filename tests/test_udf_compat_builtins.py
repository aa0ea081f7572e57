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
from raytile.udf import UDF, CrystallinityUDF, FEMUDF, RecordUDF, SignalMaxUDF

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


# -- all of them on Ray ------------------------------------------------------------------------

def test_compat_builtins_on_ray(ray_context, rng, tmp_path):
    data = make_data(rng, "float32")
    roi = make_roi(rng)
    path = tmp_path / "ray.npy"
    ds = ray_context.load("memory", data=data, num_partitions=3)
    mx, fem, cr, _ = ray_context.run_udf(dataset=ds, roi=roi, udf=[
        SignalMaxUDF(), FEMUDF(center=(5, 7.5), rad_in=2, rad_out=5.5),
        CrystallinityUDF(rad_in=1.5, rad_out=4, real_center=(6, 4.5), real_rad=3), RecordUDF(path),
    ])
    frames = data[roi]
    np.testing.assert_array_equal(mx["intensity"].data, frames.max(axis=0))
    np.testing.assert_allclose(fem["intensity"].data[roi], fem_reference(frames, (5, 7.5), 2, 5.5), rtol=1e-5)
    np.testing.assert_allclose(cr["intensity"].data[roi],
                               crystallinity_reference(frames, 1.5, 4, (6, 4.5), 3), rtol=1e-5)
    np.testing.assert_array_equal(np.load(path), frames)


def test_exported():
    for name in ("SignalMaxUDF", "RecordUDF", "FEMUDF", "CrystallinityUDF"):
        assert issubclass(getattr(rt.udf, name), UDF)
        assert name in rt.udf.__all__
