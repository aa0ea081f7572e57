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
