"""Every built-in UDF against a plain numpy reference on the same data.

Data sets: memory, raw and npy files; dtypes uint8, uint16, float32, int32;
with and without an ROI; three tilings (frame-wise, small tiles, whole
partitions), forced by a probe UDF that runs in the same pass; and the
sparse array backends.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import sparse

import raytile as rt
from raytile.common.errors import UDFException
from raytile.udf import (
    UDF, ApplyMasksUDF, AutoUDF, CoMUDF, LogsumUDF, PickUDF, StdDevUDF, SumSigUDF, SumUDF, masks,
)

NAV = (6, 7)
SIG = (16, 12)


def make_data(rng, dtype, nav=NAV, sig=SIG):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (rng.normal(50, 20, size=nav + sig)).astype(dtype)
    hi = min(np.iinfo(dtype).max, 1000)
    return rng.integers(0, hi, size=nav + sig, endpoint=True).astype(dtype)


def load(ctx, fmt, data, tmp_path, num_partitions=3):
    nav, sig = data.shape[:-2], data.shape[-2:]
    if fmt == "memory":
        return ctx.load("memory", data=data, num_partitions=num_partitions)
    if fmt == "raw":
        path = tmp_path / "data.raw"
        data.tofile(path)
        return ctx.load("raw", path=path, nav_shape=nav, sig_shape=sig, dtype=data.dtype,
                        num_partitions=num_partitions)
    path = tmp_path / "data.npy"
    np.save(path, data)
    return ctx.load("npy", path=path, num_partitions=num_partitions)


def make_roi(rng, nav=NAV):
    roi = rng.random(nav) > 0.5
    roi.flat[0] = True
    roi.flat[-1] = False
    return roi


# -- probe UDFs that force a tiling and check it took effect -------------------

class _Probe(UDF):
    """Sums each frame (checked against numpy) and records the largest tile seen."""

    def get_preferred_input_dtype(self):
        return self.USE_NATIVE_DTYPE

    def get_result_buffers(self):
        return {
            "framesum": self.buffer(kind="nav", dtype="float64"),
            "max_tile": self.buffer(kind="single", dtype="int64"),
            "units": self.buffer(kind="single", dtype="int64"),
        }

    def _record(self, data):
        self.results.max_tile[:] = max(int(self.results.max_tile[0]), int(np.prod(data.shape)))
        self.results.units[:] += 1

    def merge(self, dest, src):
        dest.framesum[:] = src.framesum
        dest.max_tile[:] = np.maximum(dest.max_tile, src.max_tile)
        dest.units[:] += src.units


class FrameProbe(_Probe):
    def process_frame(self, frame):
        self._record(frame)
        self.results.framesum[:] += frame.astype(np.float64).sum()


class SmallTileProbe(_Probe):
    # 128 bytes: tiles cut in the signal in every dtype, uint8 included (a 16x12 frame is 192 pixels);
    # the built-ins all read uint8 data as it is
    def get_tiling_preferences(self):
        return {"depth": 3, "total_size": 128}

    def process_tile(self, tile):
        self._record(tile)
        self.results.framesum[:] += tile.astype(np.float64).reshape(tile.shape[0], -1).sum(axis=1)


class PartitionProbe(_Probe):
    def process_partition(self, partition):
        self._record(partition)
        self.results.framesum[:] += partition.astype(np.float64).reshape(partition.shape[0], -1).sum(axis=1)


PROBES = {"frame": FrameProbe, "small": SmallTileProbe, "partition": PartitionProbe}

MASK_FACTORIES = [
    lambda: masks.disk(7, 5, 4, SIG),
    lambda: masks.ring(8, 6, 2, 6, SIG),
    lambda: masks.point(3, 9, SIG),
]


def com_reference(frames, cy, cx, r, ri=0.0):
    """LiberTEM's centre of mass: in the disk ``d <= r``, or the ring ``ri < d <= r`` for ``ri > 0``;
    ``(cy, cx)`` for a frame without intensity there."""
    y, x = np.mgrid[: frames.shape[1], : frames.shape[2]]
    d2 = (y - cy) ** 2 + (x - cx) ** 2
    region = (d2 <= r * r) & ((d2 > ri * ri) if ri > 0 else True)
    tot = (frames * region).sum(axis=(1, 2))
    com = np.stack([(frames * region * y).sum(axis=(1, 2)), (frames * region * x).sum(axis=(1, 2))], 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        com = com / tot[:, None]
    com[tot == 0] = [cy, cx]
    return com


CASES = [
    ("memory", "uint8"), ("raw", "uint16"), ("npy", "float32"), ("memory", "int32"),
    ("raw", "int32"), ("npy", "uint8"),
]


@pytest.mark.parametrize("tiling", ["frame", "small", "partition"])
@pytest.mark.parametrize("use_roi", [False, True], ids=["noroi", "roi"])
@pytest.mark.parametrize("fmt,dtype", CASES, ids=[f"{f}-{d}" for f, d in CASES])
def test_builtins_match_numpy(ctx, rng, tmp_path, fmt, dtype, use_roi, tiling):
    data = make_data(rng, dtype)
    ds = load(ctx, fmt, data, tmp_path)
    roi = make_roi(rng) if use_roi else None
    sel = roi if roi is not None else np.ones(NAV, dtype=bool)
    frames = data[sel].astype(np.float64)  # (n, *sig), nav order
    n = frames.shape[0]

    udfs = [
        PROBES[tiling](), SumUDF(), SumSigUDF(), StdDevUDF(),
        ApplyMasksUDF(mask_factories=MASK_FACTORIES), CoMUDF.with_params(cy=7.0, cx=5.0, r=6.0, ri=1.0),
        PickUDF(),
    ]
    if tiling != "small":  # frame-wise UDFs force whole frames; keep "small" really small
        udfs += [LogsumUDF(), AutoUDF(f=lambda fr: fr.max(axis=0))]
    res = ctx.run_udf(dataset=ds, udf=udfs, roi=roi)
    probe, s, ss, sd, am, com, pick = res[:7]

    # the tiling took effect
    frame_px = math.prod(SIG)
    n_parts = len({p for p in np.flatnonzero(sel.reshape(-1)) // math.ceil(42 / 3)})
    if tiling == "frame":
        assert probe["max_tile"].data[0] == frame_px and probe["units"].data[0] == n
    elif tiling == "small":
        assert probe["max_tile"].data[0] * np.dtype(dtype).itemsize <= 128
        assert probe["units"].data[0] > n
    else:
        assert probe["units"].data[0] == n_parts
        assert probe["max_tile"].data[0] > frame_px or n_parts == n
    np.testing.assert_allclose(probe["framesum"].data[sel], frames.sum(axis=(1, 2)), rtol=1e-10)

    # SumUDF: exact for integers, dtype per np.result_type(dtype, float32)
    assert s["intensity"].data.dtype == np.result_type(np.dtype(dtype), np.float32)
    np.testing.assert_allclose(s["intensity"].data, frames.sum(axis=0), rtol=1e-5)

    # SumSigUDF: nav-shaped, zero and invalid outside the ROI
    np.testing.assert_allclose(ss["intensity"].data[sel], frames.sum(axis=(1, 2)), rtol=1e-5)
    assert np.all(np.isnan(ss["intensity"].data[~sel]))
    assert np.array_equal(ss["intensity"].valid_mask, sel)

    # StdDevUDF
    assert sd["num_frames"].data[0] == n
    np.testing.assert_allclose(sd["sum"].data, frames.sum(axis=0), rtol=1e-10)
    np.testing.assert_allclose(sd["mean"].data, frames.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(sd["var"].data, frames.var(axis=0), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(sd["std"].data, frames.std(axis=0), rtol=1e-8, atol=1e-9)

    # ApplyMasksUDF
    stack = np.stack([f() for f in MASK_FACTORIES])
    ref = np.einsum("nyx,myx->nm", frames, stack)
    assert am["intensity"].data.shape == NAV + (3,)
    np.testing.assert_allclose(am["intensity"].data[sel], ref, rtol=1e-5)

    # CoMUDF
    ref_com = com_reference(frames, 7.0, 5.0, 6.0, 1.0)
    np.testing.assert_allclose(com["raw_com"].data[sel], ref_com, rtol=1e-6)
    np.testing.assert_allclose(com["raw_shifts"].data[sel], ref_com - [7.0, 5.0], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(com["magnitude"].data[sel],
                               np.hypot(ref_com[:, 0] - 7.0, ref_com[:, 1] - 5.0), rtol=1e-6, atol=1e-9)

    # PickUDF: the ROI's frames in nav order, (frames in ROI, *sig) as in LiberTEM; native dtype, exact
    assert pick["intensity"].data.dtype == data.dtype
    assert pick["intensity"].data.shape == (n,) + SIG
    assert np.array_equal(pick["intensity"].data, data[sel])
    assert np.array_equal(pick["intensity"].raw_data, data[sel])
    assert np.asarray(pick["intensity"].valid_mask).all()

    if tiling != "small":
        logsum, auto = res[7:]
        ref_log = np.log(frames - frames.min(axis=(1, 2), keepdims=True) + 1).sum(axis=0)
        np.testing.assert_allclose(logsum["logsum"].data, ref_log, rtol=1e-5)
        assert auto["result"].data.shape == NAV + (SIG[1],)
        np.testing.assert_allclose(auto["result"].data[sel], frames.max(axis=1), rtol=1e-6)


# -- sparse array backends ------------------------------------------------------

SPARSE_BACKENDS = {
    "sparse.COO": sparse.COO,
    "sparse.GCXS": sparse.GCXS,
    "scipy.sparse.csr_matrix": sp.csr_matrix,
    "scipy.sparse.csc_matrix": sp.csc_matrix,
}


class BackendProbe(UDF):
    """Records whether every tile arrived in the expected array type."""

    def __init__(self, backend, **kwargs):
        super().__init__(backend=backend, **kwargs)

    def get_backends(self):
        return (self.params.backend,)

    def get_tiling_preferences(self):
        return {"depth": 1, "total_size": 96 * 4}  # float32: half frames

    def get_result_buffers(self):
        return {"ok": self.buffer(kind="nav", dtype="int64")}

    def process_tile(self, tile):
        self.results.ok[:] += int(isinstance(tile, SPARSE_BACKENDS[self.params.backend]))


@pytest.mark.parametrize("backend", list(SPARSE_BACKENDS))
def test_sparse_backends_match_numpy(ctx, rng, backend):
    data = make_data(rng, "uint16")
    data[data < 700] = 0  # mostly zeros, like counting data
    roi = make_roi(rng)
    frames = data[roi].astype(np.float64)
    ds = ctx.load("memory", data=data, num_partitions=3)
    sparse_mask = sp.csr_matrix(masks.ring(8, 6, 2, 6, SIG))
    coo_mask = sparse.COO.from_numpy(masks.disk(7, 5, 4, SIG))
    udfs = [
        BackendProbe(backend), SumUDF(), SumSigUDF(), StdDevUDF(),
        ApplyMasksUDF(mask_factories=MASK_FACTORIES),
        ApplyMasksUDF(mask_factories=[lambda: sparse_mask, lambda: coo_mask]),
        CoMUDF.with_params(r=5.0), PickUDF(),
    ]
    res = ctx.run_udf(dataset=ds, udf=udfs, roi=roi, backends=[backend])
    probe, s, ss, sd, am, am_sp, com, pick = res
    sig_tiles = int(probe["ok"].data[roi][0])
    assert sig_tiles >= 2 and np.all(probe["ok"].data[roi] == sig_tiles)  # every tile was sparse
    np.testing.assert_allclose(s["intensity"].data, frames.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(ss["intensity"].data[roi], frames.sum(axis=(1, 2)), rtol=1e-6)
    np.testing.assert_allclose(sd["var"].data, frames.var(axis=0), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(sd["mean"].data, frames.mean(axis=0), rtol=1e-10)
    assert sd["num_frames"].data[0] == frames.shape[0]
    stack = np.stack([f() for f in MASK_FACTORIES])
    np.testing.assert_allclose(am["intensity"].data[roi], np.einsum("nyx,myx->nm", frames, stack), rtol=1e-5)
    sp_stack = np.stack([sparse_mask.toarray(), coo_mask.todense()])
    np.testing.assert_allclose(am_sp["intensity"].data[roi], np.einsum("nyx,myx->nm", frames, sp_stack),
                               rtol=1e-5)
    np.testing.assert_allclose(com["raw_com"].data[roi], com_reference(frames, 8.0, 6.0, 5.0), rtol=1e-6)
    assert np.array_equal(pick["intensity"].data, data[roi])


# -- StdDevUDF numerics -----------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stddev_large_offset_is_stable(inline_ctx, rng, dtype):
    data = (1e6 + rng.normal(0, 1, size=(9, 8) + SIG)).astype(dtype)
    ref = data.reshape(-1, *SIG).astype(np.float64)
    ds = inline_ctx.load("memory", data=data, num_partitions=5)
    for udf in (StdDevUDF(), _SmallStdDev()):
        res = inline_ctx.run_udf(dataset=ds, udf=udf)
        np.testing.assert_allclose(res["var"].data, ref.var(axis=0), rtol=1e-6)
        np.testing.assert_allclose(res["mean"].data, ref.mean(axis=0), rtol=1e-12)
    # a naive float32 sum of squares would be far off: make sure the test can tell
    naive = (ref.astype(np.float32) ** 2).mean(axis=0) - ref.astype(np.float32).mean(axis=0) ** 2
    assert not np.allclose(naive, ref.var(axis=0), rtol=1e-2)


class _SmallStdDev(StdDevUDF):
    def get_tiling_preferences(self):
        return {"depth": 2, "total_size": 256}


def test_stddev_merge_combines_partitions_like_numpy(rng):
    from raytile.udf.stddev import merge_moments

    a, b = rng.normal(3e5, 2, size=(7, 4)), rng.normal(3e5 + 1, 5, size=(11, 4))
    m2 = lambda x: ((x - x.mean(axis=0)) ** 2).sum(axis=0)  # noqa: E731
    n, s, q = merge_moments(7, a.sum(0), m2(a), 11, b.sum(0), m2(b))
    both = np.concatenate([a, b])
    assert np.all(n == 18)
    np.testing.assert_allclose(s, both.sum(0), rtol=1e-14)
    np.testing.assert_allclose(q / 18, both.var(0), rtol=1e-9)
    n0, s0, q0 = merge_moments(0, np.zeros(4), np.zeros(4), 11, b.sum(0), m2(b))
    np.testing.assert_allclose(q0, m2(b), rtol=1e-12)



def test_stddev_merge_in_place_gives_merge_moments_values(rng):
    # StdDevUDF.merge of float64 partitions works in place: the same values as merge_moments, to the bit
    # (and not into the read-only arrays that partitions arrive in); complex sums keep merge_moments
    from raytile.udf.base import MergeAttrMapping
    from raytile.udf.stddev import merge_moments

    for dtype in (np.float64, np.complex128):
        a_sum, a_m2 = (rng.normal(3e5, 50, size=(5, 7)) for _ in range(2))
        b_sum, b_m2 = (rng.normal(2e5, 50, size=(5, 7)) for _ in range(2))
        if dtype == np.complex128:
            a_sum, b_sum = a_sum + 1j * b_sum, b_sum - 2j * a_sum
        src_arrays = {"sum": b_sum.astype(dtype), "var": b_m2.copy(), "num_frames": np.array([11])}
        for arr in src_arrays.values():
            arr.flags.writeable = False  # as partition results arrive
        dest = MergeAttrMapping({"sum": a_sum.astype(dtype), "var": a_m2.copy(), "num_frames": np.array([7])})
        StdDevUDF().merge(dest, MergeAttrMapping(src_arrays))
        _, want_sum, want_m2 = merge_moments(7, a_sum.astype(dtype), a_m2, 11, b_sum.astype(dtype), b_m2)
        np.testing.assert_array_equal(dest.sum, want_sum)
        np.testing.assert_array_equal(dest.var, want_m2)
        assert dest.num_frames[0] == 18

class _FrameTileStdDev(StdDevUDF):
    def get_tiling_preferences(self):
        return {"depth": 1}  # tiles of one frame


def _stddev_data(rng, dtype):
    """35 frames (not a multiple of four) of 9x13 pixels (an odd count) that reach the dtype's ends, with
    constant pixels at the top and bottom of the range (variance exactly 0)."""
    nav, sig = (5, 7), (9, 13)
    if np.dtype(dtype).kind == "f":
        data = (1e5 + rng.normal(0, 3, size=nav + sig)).astype(dtype)
        data[..., 0, :4] = data[0, 0, 0, 0]
        return data
    info = np.iinfo(dtype)
    low = info.min if info.min < 0 or info.max <= 255 else info.max - 600  # uint16: near 65535
    data = rng.integers(low, info.max, size=nav + sig, endpoint=True).astype(dtype)
    data[..., 0, :4] = info.max
    data[..., 0, 4:8] = info.min
    data[::2, :, 1, 0] = info.min  # the widest spread there is
    data[1::2, :, 1, 0] = info.max
    return data


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int16", "int32", "float32", "float64"])
@pytest.mark.parametrize("frame_tiles", [False, True])
def test_stddev_equals_numpy_at_the_ends_of_the_dtype(ctx, rng, dtype, frame_tiles):
    # 8- and 16-bit data take exact integer sums (pixel_sums_into), the others float64 moments a tile
    # (pixel_moments_into): both equal numpy's float64 var, with an ROI, over partitions merged on Ray
    data = _stddev_data(rng, dtype)
    roi = rng.random(data.shape[:2]) > 0.3
    frames = data[roi].astype(np.float64)
    ds = ctx.load("memory", data=data, num_partitions=3)
    udf = _FrameTileStdDev() if frame_tiles else StdDevUDF()
    for res, want in ((ctx.run_udf(dataset=ds, udf=udf, roi=roi), frames),
                      (ctx.run_udf(dataset=ds, udf=udf), data.reshape(-1, *data.shape[2:]).astype(np.float64))):
        assert res["num_frames"].data[0] == want.shape[0]
        if np.dtype(dtype).kind == "f":
            np.testing.assert_allclose(res["sum"].data, want.sum(axis=0), rtol=1e-14)
        else:  # integers: exact
            np.testing.assert_array_equal(res["sum"].data, want.sum(axis=0))
        np.testing.assert_allclose(res["mean"].data, want.mean(axis=0), rtol=1e-14)
        atol = 1e-12 if np.dtype(dtype).kind == "f" else 0  # (numpy's var of a constant float is not 0 either)
        np.testing.assert_allclose(res["var"].data, want.var(axis=0), rtol=1e-9, atol=atol)
        np.testing.assert_allclose(res["std"].data, want.std(axis=0), rtol=1e-9, atol=atol ** 0.5)
        np.testing.assert_allclose(res["varsum"].data, want.var(axis=0) * want.shape[0], rtol=1e-9, atol=atol * 50)
        if np.dtype(dtype).kind != "f":  # constant integer pixels: exactly 0
            assert np.all(res["var"].data[0, :8] == 0.0) and np.all(res["std"].data[0, :8] == 0.0)
        assert set(res) == {"var", "std", "mean", "sum", "varsum", "num_frames"}  # private sums are no results


def test_stddev_takes_integer_sums_for_8_and_16_bit_tiles_only(inline_ctx, rng, monkeypatch):
    import raytile.udf.stddev as stddev

    calls = {"int": 0, "float": 0}

    def counting(name, fn):
        def wrapper(*args):
            calls[name] += 1
            return fn(*args)
        return wrapper

    monkeypatch.setattr(stddev, "pixel_sums_into", counting("int", stddev.pixel_sums_into))
    monkeypatch.setattr(stddev, "pixel_moments_into", counting("float", stddev.pixel_moments_into))
    for dtype, path in (("uint8", "int"), ("uint16", "int"), ("int16", "int"), ("int8", "int"),
                        ("uint32", "float"), ("float32", "float")):
        calls.update(int=0, float=0)
        data = _stddev_data(rng, dtype)
        ds = inline_ctx.load("memory", data=data, num_partitions=2)
        res = inline_ctx.run_udf(dataset=ds, udf=StdDevUDF())
        assert calls[path] > 0 and calls["int" if path == "float" else "float"] == 0, (dtype, calls)
        np.testing.assert_allclose(res["var"].data, data.reshape(35, 9, 13).astype(np.float64).var(axis=0),
                                   rtol=1e-9)

# -- ApplyMasksUDF options ---------------------------------------------------------

@pytest.mark.parametrize("use_sparse", [None, True, False])
def test_applymasks_stack_factory_and_sparse(inline_ctx, rng, use_sparse):
    data = make_data(rng, "float32")
    frames = data.reshape(-1, *SIG).astype(np.float64)
    stack = rng.random((4,) + SIG).astype(np.float32)
    stack[stack < 0.6] = 0
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    udfs = [
        ApplyMasksUDF(mask_factories=lambda: stack, mask_count=4, use_sparse=use_sparse),
        ApplyMasksUDF(mask_factories=lambda: sparse.COO.from_numpy(stack), use_sparse=use_sparse),
        ApplyMasksUDF(mask_factories=lambda: sp.csc_matrix(stack.reshape(4, -1)), use_sparse=use_sparse,
                      mask_dtype=np.float64),
    ]
    res = inline_ctx.run_udf(dataset=ds, udf=udfs)
    ref = np.einsum("nyx,myx->nm", frames, stack).reshape(NAV + (4,))
    for r in res:
        np.testing.assert_allclose(r["intensity"].data, ref, rtol=1e-5)
    assert res[2]["intensity"].data.dtype == np.float64
    assert res[0]["intensity"].data.dtype == np.float32


def test_applymasks_bool_masks_and_mask_dtype(inline_ctx, rng):
    data = make_data(rng, "uint8")
    frames = data.reshape(-1, *SIG).astype(np.float64)
    bmask = masks.disk(8, 6, 3, SIG).astype(bool)
    ds = inline_ctx.load("memory", data=data)
    res = inline_ctx.run_udf(dataset=ds, udf=[
        ApplyMasksUDF(mask_factories=[lambda: bmask]),
        ApplyMasksUDF(mask_factories=[lambda: bmask], mask_dtype="float64"),
    ])
    ref = (frames * bmask).sum(axis=(1, 2)).reshape(NAV + (1,))
    np.testing.assert_array_equal(res[0]["intensity"].data, ref)
    assert res[1]["intensity"].data.dtype == np.float64
    np.testing.assert_array_equal(res[1]["intensity"].data, ref)


def test_applymasks_shifts(inline_ctx, rng):
    data = make_data(rng, "float32")
    frames = data.reshape(-1, *SIG).astype(np.float64)
    shifts = rng.integers(-3, 4, size=NAV + (2,))
    roi = make_roi(rng)
    mask = masks.disk(7, 5, 4, SIG)
    ds = inline_ctx.load("memory", data=data, num_partitions=3)
    udf = ApplyMasksUDF(mask_factories=[lambda: mask],
                        shifts=ApplyMasksUDF.aux_data(shifts, kind="nav", extra_shape=(2,), dtype="int64"))
    res = inline_ctx.run_udf(dataset=ds, udf=udf, roi=roi)
    ref = []
    for f, (dy, dx) in zip(frames, shifts.reshape(-1, 2)):
        m = np.zeros(SIG)
        y, x = np.mgrid[: SIG[0], : SIG[1]]
        sy, sx = y - dy, x - dx
        inside = (sy >= 0) & (sy < SIG[0]) & (sx >= 0) & (sx < SIG[1])
        m[inside] = mask[sy[inside], sx[inside]]
        ref.append((f * m).sum())
    ref = np.array(ref).reshape(NAV)
    np.testing.assert_allclose(res["intensity"].data[roi][:, 0], ref[roi], rtol=1e-5)


def test_applymasks_rejects_wrong_mask_shape(inline_ctx, rng):
    ds = inline_ctx.load("memory", data=make_data(rng, "uint8"))
    udf = ApplyMasksUDF(mask_factories=[lambda: np.ones((5, 5), dtype=np.float32)])
    with pytest.raises(UDFException, match=r"ApplyMasksUDF.*\(5, 5\).*\(16, 12\)"):
        inline_ctx.run_udf(dataset=ds, udf=udf)


# -- CoM, Auto, masks helpers -------------------------------------------------------

def test_com_default_centre_and_empty_frames(inline_ctx, rng):
    data = make_data(rng, "float32")
    data[0, 0] = 0  # no intensity: the centre of mass is the centre (zero shift), as in LiberTEM
    frames = data.reshape(-1, *SIG).astype(np.float64)
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    res = inline_ctx.run_udf(dataset=ds, udf=CoMUDF.with_params())
    ref = com_reference(frames, SIG[0] / 2, SIG[1] / 2, np.inf)
    got = res["raw_com"].data.reshape(-1, 2)
    np.testing.assert_array_equal(got[0], [8.0, 6.0])
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    np.testing.assert_allclose(res["raw_shifts"].data.reshape(-1, 2), ref - [8.0, 6.0], rtol=1e-6, atol=1e-12)



@pytest.mark.parametrize("sig, cy, cx, r, ri", [
    ((256, 256), 128.0, 128.0, math.inf, 0.0),  # the whole frame (bench_limits' CoM)
    ((16, 12), 7.0, 5.0, 6.0, None), ((16, 12), 7.5, 5.2, 6.0, 2.5),  # a disk, a ring
    ((1, 1), 0.0, 0.0, 1.0, 0.0), ((9, 3), 4.0, 1.0, 2.0, 1e-12),  # one pixel; ri close to 0 is a disk
])
def test_moment_masks_are_the_region_and_its_coordinates(sig, cy, cx, r, ri):
    from raytile.udf.com_math import moment_masks
    y, x = np.indices(sig, dtype=np.float64)
    d2 = (y - cy) ** 2 + (x - cx) ** 2
    region = (d2 <= r * r) & ((d2 > ri * ri) if ri is not None and ri > 1e-8 else True)
    got = moment_masks(sig, cy, cx, r, ri)
    assert got.dtype == np.float64 and got.shape == (3,) + sig and got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.stack([region, y * region, x * region]).astype(np.float64))


class _EngineOnlyCoM(CoMUDF):
    """A subclass with task data of its own (only the mask engine), as ports of LiberTEM's CoM may have."""

    def get_task_data(self):
        return {"engine": super().get_task_data()["engine"]}


def test_com_kernels_and_mask_engine_agree(inline_ctx, rng):
    data = make_data(rng, "uint16")
    frames = data.reshape(-1, *SIG).astype(np.float64)
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    ref = com_reference(frames, 7.0, 5.0, 6.0, 1.0)
    for cls in (CoMUDF, _EngineOnlyCoM):
        udf = cls.with_params(cy=7.0, cx=5.0, r=6.0, ri=1.0)
        res = inline_ctx.run_udf(dataset=ds, udf=udf)
        np.testing.assert_allclose(res["raw_com"].data.reshape(-1, 2), ref, rtol=1e-6)


def test_com_needs_2d_signal(inline_ctx, rng):
    ds = inline_ctx.load("memory", data=rng.random((4, 5, 16)).astype(np.float32), sig_dims=1)
    with pytest.raises(UDFException, match="CoMUDF needs a 2D signal"):
        inline_ctx.run_udf(dataset=ds, udf=CoMUDF.with_params())


def test_auto_udf_scalar_and_dtype(inline_ctx, rng):
    data = make_data(rng, "uint16")
    ds = inline_ctx.load("memory", data=data, num_partitions=2)
    res = inline_ctx.run_udf(dataset=ds, udf=[
        AutoUDF(f=lambda fr: fr.sum()),
        AutoUDF(f=lambda fr: np.argmax(fr), input_dtype=UDF.USE_NATIVE_DTYPE),
    ])
    assert res[0]["result"].data.shape == NAV
    np.testing.assert_allclose(res[0]["result"].data, data.astype(np.float64).sum(axis=(2, 3)), rtol=1e-6)
    np.testing.assert_array_equal(res[1]["result"].data, data.reshape(NAV + (-1,)).argmax(axis=-1))


def test_auto_udf_probe_failure_is_named(inline_ctx, rng):
    ds = inline_ctx.load("memory", data=make_data(rng, "uint8"))

    def needs_nonzero(frame):
        if not frame.any():
            raise ZeroDivisionError("empty frame")
        return frame.sum()

    with pytest.raises(UDFException, match="AutoUDF: f raised ZeroDivisionError on a zero frame"):
        inline_ctx.run_udf(dataset=ds, udf=AutoUDF(f=needs_nonzero))


def test_mask_helpers():
    shape = (9, 11)
    y, x = np.indices(shape)
    d = np.hypot(y - 4.0, x - 6.5)
    dsk = masks.disk(4.0, 6.5, 3.2, shape)
    assert dsk.dtype == np.float32 and dsk.shape == shape
    np.testing.assert_array_equal(dsk, (d <= 3.2).astype(np.float32))
    rng_ = masks.ring(4.0, 6.5, 1.5, 3.2, shape)
    np.testing.assert_array_equal(rng_, ((d <= 3.2) & (d > 1.5)).astype(np.float32))
    np.testing.assert_array_equal(rng_ + masks.disk(4.0, 6.5, 1.5, shape), dsk)
    pt = masks.point(2, 3, shape)
    assert pt.dtype == np.float32 and pt.sum() == 1 and pt[2, 3] == 1
    with pytest.raises(ValueError, match="outside"):
        masks.point(20, 3, shape)
    with pytest.raises(ValueError, match="ri <= ro"):
        masks.ring(1, 1, 5, 2, shape)


def test_builtins_exported():
    for name in ("SumUDF", "SumSigUDF", "StdDevUDF", "LogsumUDF", "ApplyMasksUDF", "CoMUDF", "PickUDF",
                 "AutoUDF", "NoOpUDF"):
        assert getattr(rt.udf, name) is getattr(rt, name)
        assert issubclass(getattr(rt.udf, name), UDF)


@pytest.mark.parametrize("make", [
    lambda **kw: rt.udf.SumUDF(**kw),
    lambda **kw: rt.udf.SumSigUDF(**kw),
    lambda **kw: rt.udf.StdDevUDF(**kw),
    lambda **kw: rt.udf.LogsumUDF(**kw),
    lambda **kw: rt.udf.PickUDF(**kw),
    lambda **kw: rt.udf.NoOpUDF(**kw),
    lambda **kw: rt.udf.SignalMaxUDF(**kw),
    lambda **kw: rt.udf.CoMUDF(**kw),
    lambda **kw: rt.udf.AutoUDF(f=np.sum, **kw),
    lambda **kw: rt.udf.ApplyMasksUDF(mask_factories=[lambda: np.ones((4, 4))], **kw),
    lambda **kw: rt.udf.FEMUDF(center=(2, 2), rad_in=1, rad_out=2, **kw),
    lambda **kw: rt.udf.CrystallinityUDF(rad_in=1, rad_out=2, **kw),
], ids=["sum", "sumsig", "stddev", "logsum", "pick", "noop", "signalmax", "com", "auto", "masks", "fem",
        "crystallinity"])
def test_builtin_udf_rejects_unknown_parameter(make):
    # SumUDF(dtyp="float64") used to be accepted and ignored; LiberTEM's constructors raise TypeError
    with pytest.raises(TypeError, match="dtyp"):
        make(dtyp="float64")
    udf = make()  # the known parameters still work, and a partition's copy is built from them
    assert type(udf.copy_for_partition(0, 1, None)) is type(udf)


def test_sum_udf_dtype_is_used(inline_ctx):
    data = np.full((3, 4, 4), 2**31 - 1, np.int64)
    ds = inline_ctx.load("memory", data=data)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="float64"))["intensity"].data
    assert res.dtype == np.float64
    np.testing.assert_array_equal(res, data.sum(axis=0).astype(np.float64))
