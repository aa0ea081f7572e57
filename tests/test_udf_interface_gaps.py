"""UDF interface details LiberTEM's users rely on (issue #22 item 5), each run on raytile and on LiberTEM 0.16.

The UDF classes are written once, against a ``UDF`` base passed in, so the
same code runs on both.
"""

from __future__ import annotations

import asyncio
import warnings

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import UDFException
from raytile.udf.base import UseDiscouragedWarning

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")
from libertem.udf.base import UDF as LtUDF  # noqa: E402
from libertem.warnings import UseDiscouragedWarning as LtUseDiscouragedWarning  # noqa: E402

NAV = (4, 5)
SIG = (6, 7)
DATA = np.random.default_rng(4).random(NAV + SIG).astype(np.float32)


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


def _both(inline_ctx, lt_ctx):
    return ((inline_ctx, inline_ctx.load("memory", data=DATA, num_partitions=2), rt.UDF),
            (lt_ctx, lt_ctx.load("memory", data=DATA, num_partitions=2), LtUDF))


def _dict_access_udf(base):
    class DictAccess(base):
        def __init__(self, k=2.0):
            super().__init__(k=k)

        def get_result_buffers(self):
            return {"x": self.buffer(kind="sig", dtype="float64")}

        def get_task_data(self):
            return {"w": 3.0}

        def process_frame(self, frame):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.results.x[:] += frame * self.params["k"] * self.task_data["w"]

        def merge(self, dest, src):
            dest["x"][:] += src["x"]

    return DictAccess


def test_dict_access_to_params_task_data_and_merge_mappings(inline_ctx, lt_ctx):
    got = [ctx.run_udf(dataset=ds, udf=_dict_access_udf(base)())["x"].data for ctx, ds, base in
           _both(inline_ctx, lt_ctx)]
    np.testing.assert_allclose(got[0], got[1], rtol=1e-6)
    np.testing.assert_allclose(got[0], DATA.sum(axis=(0, 1)) * 6, rtol=1e-5)


def _whole_buffer_udf(base, seen):
    class WholeBuffer(base):
        def get_result_buffers(self):
            return {"x": self.buffer(kind="sig", dtype="float64")}

        def process_frame(self, frame):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                whole = self.results["x"]
            try:
                self.results["x"][:] = 1
                raised = None
            except TypeError as e:
                raised = type(e)
            seen.append((type(whole).__name__, tuple(whole.shape), [w.category.__name__ for w in caught], raised))
            self.results.x[:] += frame

        def merge(self, dest, src):
            dest.x[:] += src.x

    return WholeBuffer


def test_results_by_key_is_the_whole_buffer_with_a_warning(inline_ctx, lt_ctx):
    for ctx, ds, base in _both(inline_ctx, lt_ctx):
        seen: list = []
        res = ctx.run_udf(dataset=ds, udf=_whole_buffer_udf(base, seen)())
        np.testing.assert_allclose(res["x"].data, DATA.sum(axis=(0, 1)), rtol=1e-5)
        assert seen and all(s == ("BufferWrapper", SIG, ["UseDiscouragedWarning"], TypeError) for s in seen), seen
    assert issubclass(UseDiscouragedWarning, FutureWarning) and issubclass(LtUseDiscouragedWarning, FutureWarning)


def _merge_kinds(base):
    class NavOnly(base):
        def get_result_buffers(self):
            return {"n": self.buffer(kind="nav"), "r": self.buffer(kind="sig", use="result_only")}

        def process_frame(self, frame):
            self.results.n[:] = frame.sum()

    class WithSig(NavOnly):
        def get_result_buffers(self):
            return {"s": self.buffer(kind="sig")}

    return NavOnly, WithSig


def test_requires_custom_merge_is_a_property(inline_ctx):
    for base in (rt.UDF, LtUDF):
        nav_only, with_sig = _merge_kinds(base)
        assert nav_only().requires_custom_merge is False
        assert with_sig().requires_custom_merge is True


def test_result_buffers_have_extra_shape(inline_ctx, lt_ctx):
    masks = [lambda: np.ones(SIG), lambda: np.eye(*SIG)]
    from libertem.udf.masks import ApplyMasksUDF as LtApplyMasks
    from libertem.udf.sum import SumUDF as LtSum

    ours = inline_ctx.run_udf(dataset=inline_ctx.load("memory", data=DATA),
                              udf=[rt.ApplyMasksUDF(mask_factories=masks), rt.SumUDF()])
    theirs = lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA),
                            udf=[LtApplyMasks(mask_factories=masks), LtSum()])
    assert ours[0]["intensity"].extra_shape == theirs[0]["intensity"].extra_shape == (2,)
    assert ours[1]["intensity"].extra_shape == theirs[1]["intensity"].extra_shape == ()


def _method_udfs(base):
    class Unimplemented(base):
        def get_result_buffers(self):
            return {"x": self.buffer(kind="nav")}

        def get_method(self):
            return "partition"

        def process_frame(self, frame):
            self.results.x[:] = 1

    class Unknown(Unimplemented):
        def get_method(self):
            return "blub"

    return Unimplemented, Unknown


def test_get_method_is_checked_at_planning(inline_ctx):
    unimplemented, unknown = _method_udfs(rt.UDF)
    ds = inline_ctx.load("memory", data=DATA)
    with pytest.raises(UDFException, match="Unimplemented.get_method.. returned 'partition' but Unimplemented "
                                           "does not implement process_partition"):
        inline_ctx.run_udf_iter(dataset=ds, udf=unimplemented())  # raised while planning, before the loop
    with pytest.raises(UDFException, match="Unknown.get_method.. returned 'blub'"):
        inline_ctx.dry_run(ds, unknown())
    # LiberTEM fails too, later and less clearly
    lt_unimplemented, _ = _method_udfs(LtUDF)
    lt_ctx = lt_api.Context.make_with("inline")
    with pytest.raises(Exception):
        lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA), udf=lt_unimplemented())


def _get_results_udfs(base):
    class Extra(base):
        def get_result_buffers(self):
            return {"x": self.buffer(kind="nav"), "y": self.buffer(kind="nav")}

        def process_frame(self, frame):
            self.results.x[:] = 1
            self.results.y[:] = 2

        def get_results(self):
            return {"x": self.results.x, "z": 5}

    class LeavesOut(Extra):
        def get_results(self):
            return {"x": self.results.x * 3}

    return Extra, LeavesOut


def test_get_results_names_are_checked_and_left_out_buffers_returned(inline_ctx, lt_ctx):
    extra, _ = _get_results_udfs(rt.UDF)
    with pytest.raises(UDFException, match=r"Extra.get_results returned \['z'\], which get_result_buffers does "
                                           r"not declare \(it declares \['x', 'y'\]\)"):
        inline_ctx.run_udf(dataset=inline_ctx.load("memory", data=DATA), udf=extra())
    lt_extra, _ = _get_results_udfs(LtUDF)
    with pytest.raises(KeyError):  # LiberTEM: a bare KeyError 'z'
        lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA), udf=lt_extra())
    got = [{k: v.data for k, v in ctx.run_udf(dataset=ds, udf=_get_results_udfs(base)[1]()).items()}
           for ctx, ds, base in _both(inline_ctx, lt_ctx)]
    assert sorted(got[0]) == sorted(got[1]) == ["x", "y"]
    for key in ("x", "y"):
        np.testing.assert_array_equal(got[0][key], got[1][key])
    assert float(got[0]["x"].mean()) == 3.0 and float(got[0]["y"].mean()) == 2.0


def test_apply_masks_mask_count_mismatch_raises_as_libertem(inline_ctx, lt_ctx):
    from libertem.udf.masks import ApplyMasksUDF as LtApplyMasks

    with pytest.raises(Exception):
        lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=DATA),
                       udf=LtApplyMasks(mask_factories=[lambda: np.ones(SIG)], mask_count=2))
    with pytest.raises(UDFException, match="mask_count=2 but the factories make 1 masks"):
        inline_ctx.run_udf(dataset=inline_ctx.load("memory", data=DATA),
                           udf=rt.ApplyMasksUDF(mask_factories=[lambda: np.ones(SIG)], mask_count=2))


def test_run_udf_iter_sync_is_honoured(inline_ctx, lt_ctx):
    ds = inline_ctx.load("memory", data=DATA, num_partitions=2)
    lt_ds = lt_ctx.load("memory", data=DATA, num_partitions=2)
    from libertem.udf.sum import SumUDF as LtSum

    async def drain(run):
        return [part async for part in run]

    ours = asyncio.run(drain(inline_ctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), sync=False)))
    theirs = asyncio.run(drain(lt_ctx.run_udf_iter(dataset=lt_ds, udf=LtSum(), sync=False)))
    np.testing.assert_allclose(ours[-1].buffers[0]["intensity"].data, theirs[-1].buffers[0]["intensity"].data,
                               rtol=1e-5)
    with pytest.raises(TypeError):  # LiberTEM's async generator has no sync iteration either
        list(lt_ctx.run_udf_iter(dataset=lt_ds, udf=LtSum(), sync=False))
    run = inline_ctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), sync=False)
    with pytest.raises(TypeError, match="sync=False.*async for"):
        list(run)
    assert run.done
    with pytest.raises(rt.ConfigValidationError, match="sync must be True or False"):
        inline_ctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), sync="no")
    parts = list(inline_ctx.run_udf_iter(dataset=ds, udf=rt.SumUDF(), sync=True))
    np.testing.assert_allclose(parts[-1].buffers[0]["intensity"].data, DATA.sum(axis=(0, 1)), rtol=1e-5)
