"""``libertem.contrib.convert_transposed`` at its ported path, against LiberTEM 0.16's own conversion of the
same data (a memory data set stored signal-major, and a transposed ``.dm4`` file) and numpy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.api as lt_api  # noqa: E402
from libertem.contrib import convert_transposed as lt_convert  # noqa: E402
from libertem.executor.inline import InlineJobExecutor as LtInline  # noqa: E402
from libertem.io.dataset.base import DataSetException as LtDataSetException  # noqa: E402

import raytile as rt  # noqa: E402
from raytile.common.errors import DataSetException  # noqa: E402
from raytile.contrib.convert_transposed import _convert_transposed_ds, convert_dm4_transposed  # noqa: E402
from raytile.io.testing.dm import write_dm  # noqa: E402


@pytest.fixture(scope="module")
def contexts():
    """raytile's inline Context and LiberTEM's, side by side."""
    return rt.Context(executor="inline"), lt_api.Context(executor=LtInline())


@pytest.mark.parametrize("nav,sig", [((6,), (7, 5)), ((3, 4), (8,)), ((3, 4), (7, 5))])
def test_convert_transposed_ds_as_libertem(contexts, tmp_path, nav, sig):
    ctx, lt_ctx = contexts
    data = np.random.default_rng(2).random(sig + nav).astype(np.float32)  # stored signal-major
    ours, theirs = tmp_path / "ours.npy", tmp_path / "theirs.npy"
    _convert_transposed_ds(ctx, ctx.load("memory", data=data, sig_dims=len(nav), num_partitions=3), ours)
    lt_convert._convert_transposed_ds(lt_ctx, lt_ctx.load("memory", data=data, sig_dims=len(nav),
                                                          num_partitions=3), theirs)
    expected = np.moveaxis(data, tuple(range(len(sig))), tuple(range(len(nav), data.ndim)))
    assert np.array_equal(np.load(ours), np.load(theirs))
    assert np.array_equal(np.load(ours), expected)


def test_convert_dm4_transposed_as_libertem(contexts, tmp_path):
    """A 4D ``.dm4`` without 'Data Order Swapped' holds its scan signal-major: converted, it is the scan."""
    ctx, lt_ctx = contexts
    scan = np.random.default_rng(4).integers(0, 3000, (3, 4, 6, 5)).astype(np.uint16)
    path = write_dm(str(tmp_path / "t.dm4"), np.ascontiguousarray(np.transpose(scan, (2, 3, 0, 1))))
    convert_dm4_transposed(path, tmp_path / "ours.npy", ctx=ctx)
    lt_convert.convert_dm4_transposed(path, str(tmp_path / "theirs.npy"), ctx=lt_ctx)
    assert np.array_equal(np.load(tmp_path / "ours.npy"), np.load(tmp_path / "theirs.npy"))
    assert np.array_equal(np.load(tmp_path / "ours.npy"), scan)


def test_convert_dm4_transposed_refuses_as_libertem(contexts, tmp_path):
    ctx, lt_ctx = contexts
    with pytest.raises(ValueError):
        lt_convert.convert_dm4_transposed("x.dm4", "out.npy", ctx=lt_ctx, num_cpus=2)
    with pytest.raises(ValueError, match="ctx or num_cpus"):
        convert_dm4_transposed("x.dm4", "out.npy", ctx=ctx, num_cpus=2)
    c_ordered = write_dm(str(tmp_path / "c.dm4"), np.zeros((2, 3, 4, 5), np.uint16), data_order_swapped=True)
    with pytest.raises(LtDataSetException, match="not transposed"):
        lt_convert.convert_dm4_transposed(c_ordered, str(tmp_path / "theirs.npy"), ctx=lt_ctx)
    with pytest.raises(DataSetException, match="not transposed"):
        convert_dm4_transposed(c_ordered, tmp_path / "ours.npy", ctx=ctx)
