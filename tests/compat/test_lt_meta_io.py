"""``meta`` during a partition's setup, ``TilingScheme`` and ``io_backend`` objects, against LiberTEM's own answers.

Each case runs the same UDF or call with LiberTEM 0.16 (inline) and raytile
on the same data and compares what they see or return (LiberTEM's
``test_coords``, ``test_tiling_scheme`` and ``test_backend`` ask these).
"""

from __future__ import annotations

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.udf.base as lt_udf  # noqa: E402
from libertem.io.dataset.memory import MemoryDataSet as LtMemoryDataSet  # noqa: E402

import raytile.udf as rt_udf  # noqa: E402
from raytile.io.dataset.memory import MemoryDataSet  # noqa: E402

DATA = np.random.default_rng(3).random((6, 7, 4, 4)).astype(np.float32)
ROI = np.random.default_rng(4).random((6, 7)) < 0.5


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


def _coords_udf(base):
    """A UDF whose ``get_task_data`` records ``meta.coordinates`` (as flat nav indices)."""

    class TaskDataCoords(base):
        def get_result_buffers(self):
            return {"seen": self.buffer(kind="nav", dtype=np.int64)}

        def get_task_data(self):
            flat = np.ravel_multi_index(tuple(self.meta.coordinates.T), self.meta.dataset_shape.nav)
            return {"flat": flat}

        def process_frame(self, frame):
            # the partition's coordinates, as get_task_data saw them: this frame's nav index is among them
            here = np.ravel_multi_index(tuple(self.meta.coordinates.T), self.meta.dataset_shape.nav)
            self.results.seen[:] = int(here[0] in set(self.task_data.flat.tolist())) + 10 * len(self.task_data.flat)

        def merge(self, dest, src):
            dest.seen[:] = src.seen

    return TaskDataCoords


@pytest.mark.parametrize("roi", [None, ROI], ids=["all", "roi"])
def test_coordinates_in_get_task_data(lt_ctx, ctx, roi):
    """``meta.coordinates`` in ``get_task_data`` are the partition's (within the ROI)."""
    ref = lt_ctx.run_udf(dataset=LtMemoryDataSet(data=DATA, num_partitions=3, tileshape=(5, 4, 4)),
                         udf=_coords_udf(lt_udf.UDF)(), roi=roi)
    got = ctx.run_udf(dataset=MemoryDataSet(data=DATA, num_partitions=3, tileshape=(5, 4, 4)),
                      udf=_coords_udf(rt_udf.UDF)(), roi=roi)
    np.testing.assert_array_equal(got["seen"].raw_data, ref["seen"].raw_data)
    assert (np.asarray(got["seen"].raw_data) % 10 == 1).all()  # every frame among its partition's coordinates


@pytest.mark.parametrize("tileshape", [(3, 4, 32), (5, 7, 10), (2, 32, 32)])
@pytest.mark.parametrize("intent", [None, "partition", "tile"])
def test_tiling_scheme_as_libertem(tileshape, intent):
    """``make_for_shape(intent=)``, ``slices``, ``slices_array``, ``shape`` and ``adjust_for_partition``."""
    from unittest import mock

    from libertem.common import Shape as LtShape, Slice as LtSlice
    from libertem.io.dataset.base import TilingScheme as LtTilingScheme

    from raytile.common import Shape, Slice
    from raytile.io.dataset.base import TilingScheme

    ref = LtTilingScheme.make_for_shape(tileshape=LtShape(tileshape, sig_dims=2),
                                        dataset_shape=LtShape((16, 16, 32, 32), sig_dims=2), intent=intent)
    got = TilingScheme.make_for_shape(tileshape=Shape(tileshape, sig_dims=2),
                                      dataset_shape=Shape((16, 16, 32, 32), sig_dims=2), intent=intent)
    assert len(got) == len(ref) and got.depth == ref.depth and got.intent == ref.intent
    assert tuple(got.shape) == tuple(ref.shape)
    assert [(i, tuple(s.origin), tuple(s.shape)) for i, s in got.slices] == \
        [(i, tuple(s.origin), tuple(s.shape)) for i, s in ref.slices]
    assert [tuple(got[i].origin) for i in range(len(got))] == [tuple(ref[i].origin) for i in range(len(ref))]
    np.testing.assert_array_equal(got.slices_array, ref.slices_array)
    for frames in (4, tileshape[0]):
        lt_part, part = mock.MagicMock(), mock.MagicMock()
        lt_part.slice = LtSlice(origin=(0, 0, 0), shape=LtShape((frames, 32, 32), sig_dims=2))
        part.slice = Slice(origin=(0, 0, 0), shape=Shape((frames, 32, 32), sig_dims=2))
        lt_adj, adj = ref.adjust_for_partition(lt_part), got.adjust_for_partition(part)
        assert (adj is got) == (lt_adj is ref) and adj.depth == lt_adj.depth and adj.intent == lt_adj.intent


@pytest.fixture(scope="module")
def raw_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("raw") / "data.raw"
    DATA.tofile(path)
    return str(path)


@pytest.fixture(scope="module")
def h5_file(tmp_path_factory):
    h5py = pytest.importorskip("h5py")
    path = tmp_path_factory.mktemp("h5") / "data.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=DATA)
    return str(path)


def test_io_backend_object_of_another_class_as_libertem(lt_ctx, inline_ctx, raw_file, h5_file):
    """An ``io_backend`` object of a user's ``IOBackend`` subclass reads the raw partitions (one that cannot
    read raises a RuntimeError from the run, as LiberTEM's test FakeBackend); HDF5 refuses it with a
    ValueError, as LiberTEM's ``H5DataSet``."""
    from libertem.io.dataset.base import IOBackend as LtIOBackend
    from libertem.io.dataset.base.backend import IOBackendImpl as LtIOBackendImpl
    from libertem.udf.sum import SumUDF as LtSumUDF

    from raytile.io.backends import IOBackend, MMapBackend
    from raytile.udf.sum import SumUDF

    class LtBroken(LtIOBackendImpl):
        def get_tiles(self, *args, **kwargs):
            raise RuntimeError("nothing to see here")
            yield

    class LtFake(LtIOBackend, id_="h15c_fake"):
        def get_impl(self):
            return LtBroken()

    class Fake(IOBackend, id_="h15c_fake"):
        pass

    class Counting(MMapBackend):
        frames = 0

        def get_frame_tiles(self, job):
            for tile in super().get_frame_tiles(job):
                Counting.frames += tile.tile_slice.shape[0]
                yield tile

    raw = dict(path=raw_file, dtype="float32", nav_shape=DATA.shape[:2], sig_shape=DATA.shape[2:])
    with pytest.raises(RuntimeError):
        lt_ctx.run_udf(dataset=lt_ctx.load("raw", io_backend=LtFake(), **raw), udf=LtSumUDF())
    with pytest.raises(RuntimeError):
        inline_ctx.run_udf(dataset=inline_ctx.load("raw", io_backend=Fake(), **raw), udf=SumUDF())
    with pytest.raises(ValueError):
        lt_ctx.load("hdf5", path=h5_file, ds_path="data", io_backend=LtFake())
    with pytest.raises(ValueError, match="io_backend"):
        inline_ctx.load("hdf5", path=h5_file, ds_path="data", io_backend=Fake())

    ref = lt_ctx.run_udf(dataset=lt_ctx.load("raw", **raw), udf=LtSumUDF())
    got = inline_ctx.run_udf(dataset=inline_ctx.load("raw", io_backend=Counting(), **raw), udf=SumUDF())
    np.testing.assert_allclose(got["intensity"].data, ref["intensity"].data, rtol=1e-6)
    assert Counting.frames == DATA.shape[0] * DATA.shape[1]  # every frame read by the given backend


def _echo_udf(base):
    class Echo(base):
        def get_result_buffers(self):
            return {"pre": self.buffer(kind="nav", dtype="float32", extra_shape=(2,)),
                    "frame": self.buffer(kind="nav", dtype="float32", extra_shape=(2,))}

        def preprocess(self):
            self.results.pre[:] = self.params.aux

        def process_frame(self, frame):
            self.results.frame[:] = self.params.aux

    return Echo


@pytest.mark.parametrize("roi", [None, ROI], ids=["all", "roi"])
def test_aux_data_in_preprocess_with_roi(lt_ctx, ctx, roi):
    """An aux-data parameter in ``preprocess`` holds the ROI's positions, as the nav buffers there."""
    aux = np.random.default_rng(9).random(DATA.shape[:2] + (2,)).astype(np.float32)
    lt_udf_cls, udf_cls = _echo_udf(lt_udf.UDF), _echo_udf(rt_udf.UDF)
    ref = lt_ctx.run_udf(dataset=LtMemoryDataSet(data=DATA, num_partitions=3),
                         udf=lt_udf_cls(aux=lt_udf_cls.aux_data(data=aux, kind="nav", extra_shape=(2,),
                                                                 dtype="float32")), roi=roi)
    got = ctx.run_udf(dataset=MemoryDataSet(data=DATA, num_partitions=3),
                      udf=udf_cls(aux=udf_cls.aux_data(data=aux, kind="nav", extra_shape=(2,), dtype="float32")),
                      roi=roi)
    for key in ("pre", "frame"):
        np.testing.assert_array_equal(got[key].raw_data, ref[key].raw_data)
    sel = np.ones(DATA.shape[:2], bool) if roi is None else roi
    np.testing.assert_array_equal(got["pre"].raw_data, aux[sel])


@pytest.mark.parametrize("fmt", ["memory", "raw", "npy"])
@pytest.mark.parametrize("sync_offset", [9, -9])
@pytest.mark.parametrize("roi", [None, ROI], ids=["all", "roi"])
def test_sync_offset_positions_without_a_frame_get_no_tile(lt_ctx, ctx, tmp_path, fmt, sync_offset, roi):
    """With a ``sync_offset``, positions moved past either end of the data get no tile (LiberTEM's
    ``test_coords`` sync-offset cases): ``StdDevUDF`` counts and averages only the frames the data holds,
    and the tiles' ``meta.coordinates`` are those positions."""
    from libertem.udf.stddev import StdDevUDF as LtStdDevUDF

    from raytile.udf.stddev import StdDevUDF

    nav = DATA.shape[:2]
    kwargs: dict = {"sync_offset": sync_offset}
    if fmt == "memory":
        lt_ds = lt_ctx.load("memory", data=DATA, num_partitions=3, **kwargs)
        ds = ctx.load("memory", data=DATA, num_partitions=3, **kwargs)
    else:
        path = str(tmp_path / f"data.{fmt}")
        if fmt == "raw":
            DATA.tofile(path)
            kwargs.update(dtype="float32", nav_shape=nav, sig_shape=DATA.shape[2:])
        else:
            np.save(path, DATA)
        lt_ds = lt_ctx.load(fmt, path=path, **kwargs)
        ds = ctx.load(fmt, path=path, **kwargs)
    got = ctx.run_udf(dataset=ds, udf=[StdDevUDF(), _coords_seen(rt_udf.UDF)()], roi=roi)
    # numpy: the positions (in the ROI) whose frame position + sync_offset is in the data
    frames = DATA.reshape((-1,) + DATA.shape[2:])
    pos = np.flatnonzero(np.ones(nav, bool) if roi is None else roi)
    pos = pos[(pos + sync_offset >= 0) & (pos + sync_offset < len(frames))]
    assert np.asarray(got[0]["num_frames"].data).item() == len(pos)
    np.testing.assert_allclose(got[0]["mean"].data, frames[pos + sync_offset].mean(axis=0), rtol=1e-5)
    seen = np.zeros(np.prod(nav), np.int64)
    seen[pos] = pos + 1
    np.testing.assert_array_equal(np.nan_to_num(got[1]["seen"].data).reshape(-1)[pos], seen[pos])
    if fmt == "memory" and roi is not None:
        return  # LiberTEM's MemoryDataSet reads other frames with an ROI and a sync_offset (or fails)
    ref = lt_ctx.run_udf(dataset=lt_ds, udf=[LtStdDevUDF(), _coords_seen(lt_udf.UDF)()], roi=roi)
    assert np.asarray(got[0]["num_frames"].data).item() == np.asarray(ref[0]["num_frames"].data).item()
    for key in ("mean", "var", "std"):
        np.testing.assert_allclose(got[0][key].data, ref[0][key].data, rtol=1e-5)
    np.testing.assert_array_equal(got[1]["seen"].raw_data, ref[1]["seen"].raw_data)


def _coords_seen(base):
    """Marks each position a tile's ``meta.coordinates`` names with 1 + its flat index."""

    class CoordsSeen(base):
        def get_result_buffers(self):
            return {"seen": self.buffer(kind="nav", dtype=np.int64)}

        def process_tile(self, tile):
            flat = np.ravel_multi_index(tuple(self.meta.coordinates.T), self.meta.dataset_shape.nav)
            assert len(flat) == tile.shape[0]
            self.results.seen[:] = flat + 1

    return CoordsSeen
