"""The notebook-facing Context methods (map, export_dataset, display, make_with) against LiberTEM 0.16."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import ConfigValidationError
from raytile.runtime.notebook import context_kwargs_for

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

NAV = (5, 6)
SIG = (8, 10)
DATA = np.random.default_rng(9).integers(0, 100, size=NAV + SIG).astype(np.uint16)
ROI = np.random.default_rng(2).random(NAV) < 0.5


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


def _frame_stats(frame):
    return np.array([frame.max(), frame.mean()])


def test_map_equals_libertem_and_numpy(ctx, lt_ctx):
    ds = ctx.load("memory", data=DATA, num_partitions=2)
    got = ctx.map(dataset=ds, f=_frame_stats, roi=ROI)
    want = lt_ctx.map(dataset=lt_ctx.load("memory", data=DATA, num_partitions=2), f=_frame_stats, roi=ROI)
    assert got.data.shape == want.data.shape == NAV + (2,)
    np.testing.assert_allclose(got.data, want.data, rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(got.data[ROI, 0], DATA[ROI].max(axis=(1, 2)))
    assert np.all(np.isnan(got.data[~ROI]))


def test_export_dataset_writes_npy_and_raises_as_libertem(ctx, lt_ctx, tmp_path):
    ds = ctx.load("memory", data=DATA, num_partitions=3)
    target = tmp_path / "copy.npy"
    ctx.export_dataset(ds, path=target)
    written = np.load(target)
    assert written.dtype == DATA.dtype
    np.testing.assert_array_equal(written, DATA)
    lt_ds = lt_ctx.load("memory", data=DATA)
    for path, kwargs in ((target, {}), (tmp_path / "copy.raw", {"overwrite": True})):
        with pytest.raises(Exception) as want:
            lt_ctx.export_dataset(lt_ds, path=path, **kwargs)
        with pytest.raises(type(want.value)) as got:
            ctx.export_dataset(ds, path=path, **kwargs)
        assert str(got.value) == str(want.value)
    ctx.export_dataset(ds, path=target, overwrite=True)  # allowed with overwrite
    np.testing.assert_array_equal(np.load(target), DATA)


def test_display_shows_the_buffers_libertem_shows(inline_ctx, lt_ctx):
    from libertem.udf.stddev import StdDevUDF as LtStdDev
    from libertem.udf.raw import PickUDF as LtPick

    ds = inline_ctx.load("memory", data=DATA)
    lt_ds = lt_ctx.load("memory", data=DATA)
    for ours, theirs in ((rt.StdDevUDF(), LtStdDev()), (rt.PickUDF(), LtPick())):
        info = inline_ctx.display(ds, ours)
        lt_html = lt_ctx.display(lt_ds, theirs)._repr_html_()
        html = info._repr_html_()
        for name, (kind, extra, shape, dtype) in info.buffers.items():
            row = f"<td>{name}</td><td>{kind}</td><td>{extra}</td><td>{shape}</td>"
            assert row in html
            assert "".join(lt_html.split()).count("".join(row.split())) == 1, (name, row)
        assert f"<td>{ours.get_method()}</td>" in html
    # with a ROI the concrete shape counts the ROI's frames (LiberTEM 0.16 shows the whole nav here)
    roi = np.zeros(NAV, dtype=bool)
    roi[1, 2] = roi[3, 3] = True
    assert inline_ctx.display(ds, rt.PickUDF(), roi=roi).buffers["intensity"][2] == (2,) + SIG


@pytest.mark.parametrize("spec,executor", [("inline", "inline"), ("synchronous", "inline"), ("dask", "ray"),
                                           ("threads", "ray"), ("pipelined", "ray")])
def test_make_with_maps_libertem_executor_names(spec, executor):
    kwargs = context_kwargs_for(spec, cpus=[0, 1], gpus=0)
    assert kwargs["executor"] == executor
    if executor == "ray":
        assert (kwargs["cpus"], kwargs["gpus"], kwargs["address"]) == (2, 0, "local")


def test_make_with_inline_runs_and_rejects_unknown_names():
    ctx = rt.Context.make_with("inline")
    ds = ctx.load("memory", data=DATA)
    np.testing.assert_array_equal(ctx.run_udf(dataset=ds, udf=rt.SumUDF())["intensity"].data, DATA.sum(axis=(0, 1)))
    with pytest.raises(ConfigValidationError, match="'delayed' is not supported"):
        rt.Context.make_with("delayed")
    with pytest.raises(ConfigValidationError, match="unknown executor_spec='dusk'"):
        rt.Context.make_with("dusk")
