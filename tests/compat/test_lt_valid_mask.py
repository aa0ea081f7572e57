"""Valid masks of results as LiberTEM's tests/udf/test_valid_mask.py reads them, against LiberTEM's own result
on the same data: ``BufferWrapper.make_default_mask``, a result's ``valid_slice_bounding`` and
``raw_masked_data`` (ROI-compressed, with the valid mask over the ROI's positions)."""

from __future__ import annotations

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.udf.base as lt_udf  # noqa: E402

import raytile as rt  # noqa: E402


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


@pytest.mark.parametrize("kind", ["nav", "sig", "single"])
@pytest.mark.parametrize("with_roi", [False, True])
def test_make_default_mask_as_libertem(kind, with_roi):
    from libertem.common.buffers import BufferWrapper as LtBufferWrapper
    from libertem.common.shape import Shape as LtShape

    from raytile.common.buffers import BufferWrapper
    from raytile.common.shape import Shape

    roi = np.array([True, False, True, True]) if with_roi else None
    valid_nav = np.array([1, 0, 1], dtype=bool) if with_roi else np.array([1, 1, 0, 1], dtype=bool)
    ref = LtBufferWrapper(kind=kind, extra_shape=(1, 2), dtype="float32").make_default_mask(
        valid_nav_mask=valid_nav, dataset_shape=LtShape((4, 1, 6, 5), sig_dims=2), roi=roi)
    got = BufferWrapper(kind=kind, extra_shape=(1, 2), dtype="float32").make_default_mask(
        valid_nav_mask=valid_nav, dataset_shape=Shape((4, 1, 6, 5), sig_dims=2), roi=roi)
    assert got.dtype == ref.dtype == bool
    np.testing.assert_array_equal(got, ref)


class _HalfValid:
    """A nav result valid on even positions only, a sig result valid in its right half, one without a mask."""

    def get_result_buffers(self):
        return {"nav_part": self.buffer(kind="nav", dtype=np.float32, extra_shape=(2,)),
                "sig_half": self.buffer(kind="sig", dtype=np.float32),
                "plain": self.buffer(kind="nav", dtype=np.float32)}

    def process_frame(self, frame):
        self.results.nav_part[:] = (frame.sum(), frame.max())
        self.results.sig_half[:] += frame
        self.results.plain[:] = frame.mean()

    def merge(self, dest, src):
        dest.nav_part[:] = src.nav_part
        dest.sig_half[:] += src.sig_half
        dest.plain[:] = src.plain

    def get_results(self):
        n = self.results.get_buffer("nav_part").raw_data.shape[0]  # ROI-compressed
        nav_mask = np.zeros((n, 2), dtype=bool)
        nav_mask[::2] = True
        sig_mask = np.zeros(self.meta.dataset_shape.sig, dtype=bool)
        sig_mask[:, sig_mask.shape[1] // 2:] = True
        return {"nav_part": self.with_mask(self.results.nav_part, nav_mask),
                "sig_half": self.with_mask(self.results.sig_half, sig_mask),
                "plain": self.results.plain}


class LtHalfValid(_HalfValid, lt_udf.UDF):
    pass


class RtHalfValid(_HalfValid, rt.UDF):
    pass


@pytest.mark.parametrize("with_roi", [False, True])
def test_raw_masked_data_and_valid_slice_bounding_as_libertem(lt_ctx, ctx, with_roi):
    data = np.random.default_rng(9).random((4, 5, 6, 8)).astype(np.float32)
    roi = None
    if with_roi:
        roi = np.zeros((4, 5), dtype=bool)
        roi[1:3, 1:4] = True
        roi[3, 0] = True
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data, num_partitions=2), udf=LtHalfValid(), roi=roi)
    got = ctx.run_udf(dataset=ctx.load("memory", data=data, num_partitions=2), udf=RtHalfValid(), roi=roi)
    for name in ("nav_part", "sig_half", "plain"):
        r, g = ref[name], got[name]
        assert g.valid_slice_bounding == r.valid_slice_bounding, name
        rm, gm = r.raw_masked_data, g.raw_masked_data
        assert gm.shape == rm.shape, name
        np.testing.assert_array_equal(np.ma.getmaskarray(gm), np.ma.getmaskarray(rm), err_msg=name)
        np.testing.assert_allclose(gm.compressed(), rm.compressed(), rtol=1e-6, err_msg=name)


class _FullShapeResult:
    """get_results gives a nav result in the data set's whole nav shape (not ROI-compressed)."""

    def get_result_buffers(self):
        return {"default": self.buffer(kind="nav", dtype=np.float32),
                "full": self.buffer(kind="nav", dtype=np.float32, use="result_only")}

    def process_frame(self, frame):
        self.results.default[:] = np.sum(frame)

    def get_results(self):
        full = np.zeros(self.meta.dataset_shape.nav, dtype=np.float32)
        full[self.meta.roi] = self.results.default
        return {"full": full}


class LtFullShapeResult(_FullShapeResult, lt_udf.UDF):
    pass


class RtFullShapeResult(_FullShapeResult, rt.UDF):
    pass


def test_nav_result_in_the_whole_nav_shape_with_an_roi_as_libertem(lt_ctx, inline_ctx):
    data = np.random.default_rng(10).random((4, 5, 6, 8)).astype(np.float32)
    roi = np.random.default_rng(1).random((4, 5)) > 0.5
    ref = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data), udf=LtFullShapeResult(), roi=roi)
    got = inline_ctx.run_udf(dataset=inline_ctx.load("memory", data=data), udf=RtFullShapeResult(), roi=roi)
    np.testing.assert_allclose(got["full"].data, ref["full"].data, rtol=1e-6)
    np.testing.assert_allclose(got["full"].data[roi], data[roi].sum(axis=(1, 2)), rtol=1e-5)
    assert got["full"].valid_mask.shape == ref["full"].valid_mask.shape == (4, 5)
