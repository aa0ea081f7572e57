"""Nav positions the data holds no frame for (a ``sync_offset``, a nav shape larger than the data) are left
out of a run, as in LiberTEM: no UDF sees them, their nav results keep the buffers' start values, and
StdDevUDF's ``num_frames`` counts the frames there are. Each case against LiberTEM's own result on the same
file or array (raytile read them as zero frames before, and StdDev counted 20 frames of 13)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

from libertem.udf.base import UDF as LtUDF  # noqa: E402
from libertem.udf.stddev import StdDevUDF as LtStdDevUDF  # noqa: E402
from libertem.udf.sumsigudf import SumSigUDF as LtSumSigUDF  # noqa: E402

import raytile as rt  # noqa: E402
from raytile.udf import StdDevUDF, SumSigUDF  # noqa: E402

SIG = (3, 4)


class _FramesSeen:
    """Marks each position a frame was processed at, and counts the frames."""

    def get_result_buffers(self):
        return {"seen": self.buffer(kind="nav", dtype="int64"), "frames": self.buffer(kind="single", dtype="int64")}

    def process_frame(self, frame):
        self.results.seen[:] = 1
        self.results.frames[:] += 1

    def merge(self, dest, src):
        dest.seen[:] = src.seen
        dest.frames[:] += src.frames


class LtFramesSeen(_FramesSeen, LtUDF):
    pass


class RtFramesSeen(_FramesSeen, rt.UDF):
    pass


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


@pytest.fixture(scope="module")
def frames():
    return (np.random.default_rng(7).integers(1, 50, (15,) + SIG)).astype(np.float32)


def _run(ctx, ds, roi, udfs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ctx.run_udf(dataset=ds, udf=udfs, roi=roi)
    return {
        "num_frames": res[0]["num_frames"].data, "var": res[0]["var"].data, "mean": res[0]["mean"].data,
        "sumsig": res[1]["intensity"].data, "seen": res[2]["seen"].data, "frames": res[2]["frames"].data,
    }


def _compare(got, ref):
    assert got.keys() == ref.keys()
    for key in ref:
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-5, err_msg=key)


def _roi(kind, nav):
    if kind is None:
        return None
    roi = np.zeros(nav, dtype=bool)
    roi.flat[::2] = True
    return roi


@pytest.mark.parametrize("roi_kind", [None, "every other"])
@pytest.mark.parametrize("sync_offset, nav", [(2, (4, 5)), (2, (2, 5)), (-3, (4, 5)), (-3, (2, 5)), (4, (3, 4))])
def test_raw_and_npy_positions_without_a_frame_as_libertem(ctx, lt_ctx, tmp_path, frames, sync_offset, nav,
                                                          roi_kind):
    raw, npy = tmp_path / "f.raw", tmp_path / "f.npy"
    frames.tofile(raw)
    np.save(npy, frames)
    roi = _roi(roi_kind, nav)
    params = dict(nav_shape=nav, sync_offset=sync_offset, num_partitions=2)
    ref = _run(lt_ctx, lt_ctx.load("raw", path=str(raw), sig_shape=SIG, dtype="float32", **params), roi,
               [LtStdDevUDF(), LtSumSigUDF(), LtFramesSeen()])
    got = _run(ctx, ctx.load("raw", path=str(raw), sig_shape=SIG, dtype="float32", **params), roi,
               [StdDevUDF(), SumSigUDF(), RtFramesSeen()])
    _compare(got, ref)
    ref_npy = _run(lt_ctx, lt_ctx.load("npy", path=str(npy), **params), roi,
                   [LtStdDevUDF(), LtSumSigUDF(), LtFramesSeen()])
    got_npy = _run(ctx, ctx.load("npy", path=str(npy), **params), roi, [StdDevUDF(), SumSigUDF(), RtFramesSeen()])
    _compare(got_npy, ref_npy)
    # numpy: the frames there are, and only those
    first, end = max(0, -sync_offset), min(int(np.prod(nav)), 15 - sync_offset)
    present = np.zeros(int(np.prod(nav)), dtype=bool)
    present[first:end] = True
    if roi is not None:
        present &= roi.reshape(-1)
    index = np.flatnonzero(present) + sync_offset
    assert got["num_frames"] == len(index)
    np.testing.assert_allclose(got["mean"], frames[index].mean(axis=0), rtol=1e-5)


@pytest.mark.parametrize("sync_offset", [3, -2])
def test_memory_and_hdf5_positions_without_a_frame_as_libertem(ctx, lt_ctx, tmp_path, frames, sync_offset):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=frames.reshape((3, 5) + SIG))
    for fmt, params in (("memory", dict(data=frames.reshape((3, 5) + SIG), num_partitions=2)),
                        ("hdf5", dict(path=str(path), ds_path="data"))):
        ref = _run(lt_ctx, lt_ctx.load(fmt, sync_offset=sync_offset, **params), None,
                   [LtStdDevUDF(), LtSumSigUDF(), LtFramesSeen()])
        got = _run(ctx, ctx.load(fmt, sync_offset=sync_offset, **params), None,
                   [StdDevUDF(), SumSigUDF(), RtFramesSeen()])
        _compare(got, ref)
        assert got["num_frames"] == 15 - abs(sync_offset)
