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

import libertem.udf.base as lt_udf  # noqa: E402

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


# --- hdf5: LiberTEM's target_size, DataSet.get_base_shape -------------------------------------------------------


@pytest.fixture(scope="module")
def chunked_h5(tmp_path_factory):
    h5py = pytest.importorskip("h5py")
    path = tmp_path_factory.mktemp("h5") / "chunked.h5"
    data = np.random.default_rng(5).random((6, 8, 16, 16)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, chunks=(1, 2, 16, 16))
    return str(path), data


def test_hdf5_target_size_sizes_partitions(lt_ctx, ctx, chunked_h5):
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF

    path, data = chunked_h5
    frame = 16 * 16 * 4
    lt_ds = lt_ctx.load("hdf5", path=path, ds_path="data", target_size=4 * frame)
    ds = ctx.load("hdf5", path=path, ds_path="data", target_size=4 * frame)
    assert len(list(ds.get_partitions())) == len(list(lt_ds.get_partitions())) == 12  # 48 frames, 4 a partition
    ref = lt_ctx.run_udf(dataset=lt_ds, udf=LtSumSigUDF())
    got = ctx.run_udf(dataset=ds, udf=rt.SumSigUDF())
    np.testing.assert_allclose(got["intensity"].data, ref["intensity"].data, rtol=1e-5)
    np.testing.assert_allclose(got["intensity"].data, data.sum(axis=(2, 3)), rtol=1e-5)


def test_dataset_get_base_shape_is_a_tile_shape_of_the_data_set(lt_ctx, inline_ctx, chunked_h5):
    path, _ = chunked_h5
    lt_base = lt_ctx.load("hdf5", path=path, ds_path="data").get_base_shape(roi=None)
    base = inline_ctx.load("hdf5", path=path, ds_path="data").get_base_shape(roi=None)
    # LiberTEM's is (1, *sig chunks); raytile's tiles hold whole nav chunks (2 frames): same signal extent
    assert len(base) == len(lt_base) == 3
    assert base[1:] == tuple(lt_base[1:]) == (16, 16)
    assert base[0] % lt_base[0] == 0


# --- libertem.utils.generate ----------------------------------------------------------------------------------


def test_utils_generate_gives_libertems_data():
    import libertem.utils.generate as lt_gen

    from raytile.utils import generate as gen

    for kwargs in ({}, dict(fy=64, fx=96, radius=3, all_equal=True), dict(zero=(30, 40), a=(10, 3), margin=8)):
        got, ref = gen.cbed_frame(**kwargs), lt_gen.cbed_frame(**kwargs)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-6)
    amp = np.random.default_rng(1).random((32, 48))
    phi = np.random.default_rng(2).random((32, 48))
    np.testing.assert_allclose(gen.hologram_frame(amp, phi, sampling=4., f_angle=20., gaussian_noise=1.),
                               lt_gen.hologram_frame(amp, phi, sampling=4., f_angle=20., gaussian_noise=1.),
                               rtol=1e-9)
    np.testing.assert_array_equal(gen.gradient_data((3, 4), (5, 6)), lt_gen.gradient_data((3, 4), (5, 6)))
    np.testing.assert_array_equal(gen.exclude_pixels((32, 32), 7, rng=np.random.default_rng(9)),
                                  lt_gen.exclude_pixels((32, 32), 7, rng=np.random.default_rng(9)))
    assert gen.exclude_pixels((8, 8), 0) is None and lt_gen.exclude_pixels((8, 8), 0) is None


# --- detector.correct: a list of excluded pixels is (ndim, n) ----------------------------------------------


def test_correct_reads_a_list_of_excluded_pixels_as_libertem():
    from libertem.io.corrections.detector import correct as lt_correct

    from raytile.io.corrections.detector import correct

    rng = np.random.default_rng(4)
    frames = rng.random((3, 16, 16)).astype(np.float32)
    dark, gain = rng.random((16, 16)) - 0.5, rng.random((16, 16)) + 1
    exclude = [(2, 9), (5, 11)]  # two pixels: (2, 5) and (9, 11)
    ref = lt_correct(frames, dark_image=dark, gain_map=gain, excluded_pixels=np.array(exclude))
    got = correct(frames, dark_image=dark, gain_map=gain, excluded_pixels=exclude)
    np.testing.assert_allclose(got, ref, rtol=1e-5)


# --- InvalidMaskError, and LiberTEM's buffer helpers ----------------------------------------------------------


class _CustomMask:
    def __init__(self, mask):
        super().__init__(mask=mask)

    def get_result_buffers(self):
        return {"custom": self.buffer(kind="single", dtype="float32", extra_shape=(8, 8, 3))}

    def get_results(self):
        return {"custom": self.with_mask(np.zeros((8, 8, 3), dtype="float32"), mask=self.params.mask)}

    def process_frame(self, frame):
        pass

    def merge(self, dest, src):
        pass


class LtCustomMaskUDF(_CustomMask, lt_udf.UDF):
    pass


class RtCustomMaskUDF(_CustomMask, rt.UDF):
    pass


@pytest.mark.parametrize("mask", [
    np.zeros((8, 8), dtype=bool),         # does not broadcast to (8, 8, 3)
    np.zeros((1, 1, 1, 1), dtype=bool),   # too many axes
    np.zeros((8, 8, 3), dtype=np.uint8),  # not bool
])
def test_a_valid_mask_that_does_not_fit_raises_invalid_mask_error(lt_ctx, ctx, mask):
    from libertem.common.buffers import InvalidMaskError as LtInvalidMaskError

    from raytile.common.buffers import InvalidMaskError

    data = np.zeros((4, 4, 8, 8), dtype=np.float32)
    with pytest.raises(LtInvalidMaskError):
        for part in lt_ctx.run_udf_iter(dataset=lt_ctx.load("memory", data=data), udf=LtCustomMaskUDF(mask=mask)):
            part.buffers
    with pytest.raises(InvalidMaskError):
        for part in ctx.run_udf_iter(dataset=ctx.load("memory", data=data), udf=RtCustomMaskUDF(mask=mask)):
            part.buffers
    good = np.ones((8, 8, 1), dtype=bool)
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data), udf=LtCustomMaskUDF(mask=good))
    got = ctx.run_udf(dataset=ctx.load("memory", data=data), udf=RtCustomMaskUDF(mask=good))
    np.testing.assert_array_equal(np.broadcast_to(got["custom"].valid_mask, (8, 8, 3)), ref["custom"].valid_mask)


def test_buffer_helpers_at_libertems_path_agree_with_libertems():
    from libertem.common import buffers as lt_buffers

    from raytile.common import buffers

    rng = np.random.default_rng(11)
    for _ in range(50):
        a = (rng.random((6, 7, 5)) > 0.3).astype(np.float32)
        for axis in range(3):
            assert buffers.get_inner_slice(a, axis) == lt_buffers.get_inner_slice(a, axis)
        assert buffers.get_bbox(a) == lt_buffers.get_bbox(a)
        assert buffers.get_bbox(a[..., 0]) == lt_buffers.get_bbox(a[..., 0])
        assert buffers.get_bbox_slice(a[..., 0]) == lt_buffers.get_bbox_slice(a[..., 0])


@pytest.fixture(scope="module", params=["contiguous", "chunked"])
def h5_16_frames(tmp_path_factory, request):
    h5py = pytest.importorskip("h5py")
    path = tmp_path_factory.mktemp("h5nav") / f"{request.param}.h5"
    data = np.random.default_rng(6).random((4, 4, 8, 8)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, chunks=(1, 2, 8, 8) if request.param == "chunked" else None)
    return str(path), data


@pytest.mark.parametrize("nav_shape, sync_offset", [((3, 3), 0), ((5, 5), 0), ((3, 7), -4), ((2, 2), 5)])
def test_hdf5_nav_shape_other_than_the_files(lt_ctx, ctx, h5_16_frames, nav_shape, sync_offset):
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF

    path, _ = h5_16_frames
    load = dict(path=path, ds_path="data", nav_shape=nav_shape, sync_offset=sync_offset)
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("hdf5", **load), udf=LtSumSigUDF())
    got = ctx.run_udf(dataset=ctx.load("hdf5", **load), udf=rt.SumSigUDF())
    np.testing.assert_allclose(got["intensity"].data, ref["intensity"].data, rtol=1e-5)


def test_memory_without_data_raises_dataset_exception(lt_ctx, inline_ctx):
    from libertem.io.dataset.base import DataSetException as LtDataSetException

    with pytest.raises(LtDataSetException):
        lt_ctx.load("memory", tileshape=(5, 6, 7))
    with pytest.raises(rt.common.errors.DataSetException, match="give data"):
        inline_ctx.load("memory", tileshape=(5, 6, 7))


def test_hdf5_diagnostics_and_2d_refusal(lt_ctx, inline_ctx, chunked_h5, tmp_path):
    h5py = pytest.importorskip("h5py")
    from libertem.io.dataset.base import DataSetException as LtDataSetException

    path, _ = chunked_h5
    lt_names = {d["name"] for d in lt_ctx.load("hdf5", path=path, ds_path="data").diagnostics}
    names = {d["name"] for d in inline_ctx.load("hdf5", path=path, ds_path="data").diagnostics}
    assert {"chunks"} <= lt_names & names
    flat = tmp_path / "2d.h5"
    with h5py.File(flat, "w") as f:
        f.create_dataset("data", data=np.zeros((16, 16), dtype=np.float32))
    with pytest.raises(LtDataSetException, match="2D HDF5 files are currently not supported"):
        lt_ctx.load("hdf5", path=str(flat), ds_path="data")
    with pytest.raises(rt.common.errors.DataSetException, match="2D HDF5 files are currently not supported"):
        inline_ctx.load("hdf5", path=str(flat), ds_path="data")


def test_partial_damage_raw_data_and_array_as_libertem(lt_ctx, ctx):
    from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF

    data = np.random.default_rng(12).random((8, 8, 4, 4)).astype(np.float32)
    roi = np.zeros((8, 8), dtype=bool)
    roi[2:6, 1:7] = True
    ref = list(lt_ctx.run_udf_iter(dataset=lt_ctx.load("memory", data=data, num_partitions=4),
                                   udf=LtSumSigUDF(), roi=roi))[-1]
    got = list(ctx.run_udf_iter(dataset=ctx.load("memory", data=data, num_partitions=4),
                                udf=rt.SumSigUDF(), roi=roi))[-1]
    np.testing.assert_array_equal(got.damage.raw_data, ref.damage.raw_data)
    np.testing.assert_array_equal(np.asarray(got.damage), np.asarray(ref.damage))
    assert np.allclose(got.buffers[0]["intensity"].valid_mask, got.damage)
