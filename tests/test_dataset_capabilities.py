"""What a format declares to the generic layers (raytile.io.dataset's table): array backends, frame
delivery, the partition source, I/O size, the one get_tiles signature, initialize's WorkerAccess, JSON
forms of parameters."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSet, DataSetMeta, FrameDelivery, Partition, WorkerAccess
from raytile.io.negotiator import DEFAULT_TILE_BYTES, Negotiator
from raytile.io.params import CHECKS, JSON_FORMS, json_schema
from raytile.io.partition_source import FixedPartitions, StreamedPartitions, StreamSpec, dense_frames
from raytile.common.shape import Shape
from raytile.runtime.plan import make_plan

NAV, SIG = (6, 5), (16, 12)


class LegacyPartition(Partition):
    """A format written against the three-argument get_tiles (as formats were before the one signature)."""

    def __init__(self, meta, partition_slice, idx, frames, io_size=None):
        super().__init__(meta, partition_slice, idx)
        self.frames = frames
        self.io_size = io_size

    def _source(self):
        return self.frames

    def get_io_size(self):
        return self.io_size

    def get_tiles(self, tiling_scheme, roi=None, dest_dtype=None):
        yield from super().get_tiles(tiling_scheme, roi=roi, dest_dtype=dest_dtype)


class LegacyDataSet(DataSet):
    format_name = "legacy_test"

    def __init__(self, frames, io_size=None, **kwargs):
        super().__init__(**kwargs)
        self._frames, self._io_size = frames, io_size

    def _do_initialize(self):
        return DataSetMeta(shape=Shape(NAV + SIG, sig_dims=2), raw_dtype=self._frames.dtype)

    def get_partitions(self):
        flat = self._frames.reshape((-1,) + SIG)
        return [LegacyPartition(self.meta, sl, i, flat[sl.origin[0]:sl.origin[0] + sl.shape[0]], self._io_size)
                for i, sl in enumerate(self.get_slices())]


LegacyDataSet.params_schema = {"frames": {"type": "array", "required": True}, "io_size": {"type": "int", "min": 1}}


@pytest.fixture
def frames(rng):
    return rng.integers(0, 1000, size=NAV + SIG).astype(np.uint16)


def test_a_three_argument_get_tiles_is_adapted_and_reads_exactly(inline_ctx, frames):
    ds = LegacyDataSet(frames=frames, num_partitions=3).initialize(inline_ctx.executor)
    res = inline_ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()])
    np.testing.assert_array_equal(res[0]["intensity"].data, frames.sum(axis=(0, 1)))
    np.testing.assert_array_equal(res[1]["intensity"].data, frames.sum(axis=(2, 3)))
    part = ds.get_partitions()[0]
    assert part.array_backends == ("numpy",) and part.native_backend == "numpy"
    scheme = Negotiator().get_scheme([rt.SumUDF()], part, np.dtype("uint16"))
    tiles = list(part.get_tiles(scheme, array_backend="numpy"))  # its native backend: accepted
    np.testing.assert_array_equal(np.concatenate([t.data for t in tiles]), frames.reshape((-1,) + SIG)[:10])
    with pytest.raises(DataSetException, match="yields only numpy tiles, not array_backend='sparse.COO'"):
        list(part.get_tiles(scheme, array_backend="sparse.COO"))


def test_the_declared_io_size_sets_the_tile_size_when_no_udf_asks(inline_ctx, frames):
    frame_bytes = int(np.prod(SIG)) * 2
    small = LegacyDataSet(frames=frames, io_size=3 * frame_bytes, num_partitions=1).initialize(inline_ctx.executor)
    scheme = Negotiator().get_scheme([rt.SumUDF()], small.get_partitions()[0], np.dtype("uint16"))
    assert scheme.depth == 3  # 3 frames' bytes
    plain = LegacyDataSet(frames=frames, num_partitions=1).initialize(inline_ctx.executor)
    scheme = Negotiator().get_scheme([rt.SumUDF()], plain.get_partitions()[0], np.dtype("uint16"))
    assert scheme.depth * frame_bytes <= DEFAULT_TILE_BYTES and scheme.depth == 30  # every frame fits
    res = inline_ctx.run_udf(dataset=small, udf=rt.SumUDF())
    np.testing.assert_array_equal(res["intensity"].data, frames.sum(axis=(0, 1)))


def test_frame_delivery_and_plans_without_frames(inline_ctx, frames, tmp_path):
    mem = inline_ctx.load("memory", data=frames, num_partitions=2)
    assert {p.frame_delivery for p in mem.get_partitions()} == {FrameDelivery.SHARED}
    assert sorted(dense_frames(mem)) == [0, 1]
    plan = make_plan(mem, rt.SumUDF()).without_frames()
    assert plan.dataset is None and all(t.partition.data is None for t in plan.tasks)
    assert all(t.partition.frame_delivery is FrameDelivery.SHARED for t in plan.tasks)  # still SHARED: from the share

    p = tmp_path / "a.raw"
    frames.tofile(p)
    raw = inline_ctx.load("raw", path=p, nav_shape=NAV, sig_shape=SIG, dtype="uint16")
    assert {q.frame_delivery for q in raw.get_partitions()} == {FrameDelivery.READ} and dense_frames(raw) == {}
    plan = make_plan(raw, rt.SumUDF())
    assert [t.partition for t in plan.without_frames().tasks] == [t.partition for t in plan.tasks]  # unchanged

    sparse = pytest.importorskip("sparse")
    sp = inline_ctx.load("memory", data=sparse.COO.from_numpy(frames))
    assert sp.array_backends == ("scipy.sparse.csr_matrix",) and dense_frames(sp) == {}


def test_partition_sources_fixed_and_streamed(inline_ctx, frames):
    """A memory data set declares the fixed list of its partitions (nothing to pull: its input has
    ended); a stream declares its StreamSpec, which the plan records, and yields its partitions' frames
    when pulled, in nav order, once."""
    mem = inline_ctx.load("memory", data=frames)
    source = mem.partition_source()
    assert isinstance(source, FixedPartitions) and source.stream is None and list(source.pull()) == []
    assert make_plan(mem, rt.SumUDF()).stream is None

    flat = frames.reshape((-1,) + SIG)
    ds = inline_ctx.load("stream", frames=iter([flat[:7], flat[7:]]), nav_shape=NAV, sig_shape=SIG,
                         dtype="uint16", frames_per_partition=10, max_partitions_in_flight=2)
    source = ds.partition_source()
    assert isinstance(source, StreamedPartitions) and source.stream == StreamSpec(3, 1, 2)
    plan = make_plan(ds, rt.SumUDF())
    assert plan.stream == source.stream and [t.num_frames for t in plan.tasks] == [10, 10, 10]
    pulled = source.pull()
    got = list(pulled)
    pulled.close()
    assert [idx for idx, _ in got] == [0, 1, 2]
    np.testing.assert_array_equal(np.concatenate([f for _, f in got]), flat)
    with pytest.raises(DataSetException, match="read by a run already"):
        ds.partition_source()


def test_initialize_takes_worker_access(frames):
    class Workers:
        num_workers = 3

        def run_function(self, fn, *args):
            return fn(*args)

    assert isinstance(Workers(), WorkerAccess)
    ds = LegacyDataSet(frames=frames).initialize(Workers())
    assert ds.num_partitions == 3  # at least one per worker
    with pytest.raises(DataSetException, match="initialize needs an executor .* got int"):
        LegacyDataSet(frames=frames).initialize(4)  # type: ignore[arg-type]


def test_every_parameter_kind_declares_its_json_form():
    assert set(CHECKS) <= set(JSON_FORMS)  # a kind without a JSON form would not be offered over HTTP
    assert json_schema({"type": "int", "min": 2})["minimum"] == 2
    assert json_schema({"type": "choice", "choices": ["a", "b"]}) == {"type": "string", "enum": ["a", "b"]}
    assert json_schema({"type": "array"}) is None and json_schema({"type": "corrections"}) is None
    assert json_schema({"type": "bool"}) == {"type": "boolean"}
