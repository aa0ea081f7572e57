"""Small differences LiberTEM's test suite found, each against LiberTEM's own behaviour: ``repr(Shape)``,
importing the removed holography module, CoM's error type for an unknown regression option, and
``detect()`` saying why a broken cupy install is not used."""

from __future__ import annotations

import builtins
import importlib
import sys

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import raytile as rt  # noqa: E402


def test_shape_repr_as_libertem():
    from libertem.common.shape import Shape as LtShape

    from raytile.common.shape import Shape

    for dims, sig_dims in [((16, 16, 128, 128), 2), ((7, 3), 1), ((), 0)]:
        assert repr(Shape(dims, sig_dims=sig_dims)) == repr(LtShape(dims, sig_dims=sig_dims))


def test_holography_module_says_where_it_went():
    sys.modules.pop("libertem.udf.holography", None)
    sys.modules.pop("raytile.udf.holography", None)
    with pytest.raises(ImportError, match="holography implementation is removed") as ref:
        importlib.import_module("libertem.udf.holography")
    with pytest.raises(ImportError, match="holography implementation is removed") as got:
        importlib.import_module("raytile.udf.holography")
    assert "LiberTEM-holo" in str(ref.value) and "LiberTEM-holo" in str(got.value)


def test_unknown_com_regression_is_a_value_error_as_in_libertem(ctx):
    from libertem.udf.com import CoMUDF as LtCoMUDF

    data = np.random.default_rng(2).random((4, 4, 8, 8)).astype(np.float32)
    lt_ctx = lt_api.Context.make_with("inline")
    with pytest.raises(ValueError):
        lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data), udf=LtCoMUDF.with_params(regression=5))
    with pytest.raises(ValueError, match="unrecognized regression option 5") as e:
        ctx.run_udf(dataset=ctx.load("memory", data=data), udf=rt.CoMUDF.with_params(regression=5))
    assert isinstance(e.value, rt.UDFException)


def test_detect_warns_about_a_broken_cupy_as_libertem(monkeypatch):
    real_import = builtins.__import__

    def broken_cupy(name, *args, **kwargs):
        if name == "cupy":
            raise ImportError("Mocked import error cupy")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.delitem(sys.modules, "libertem.utils.devices", raising=False)
    monkeypatch.setattr(builtins, "__import__", broken_cupy)
    with pytest.warns(RuntimeWarning, match="Mocked import error cupy"):
        lt_devices = importlib.import_module("libertem.utils.devices")
    from raytile.utils.devices import detect

    with pytest.warns(RuntimeWarning, match="Mocked import error cupy"):
        got = detect()
    assert got["has_cupy"] is lt_devices.detect()["has_cupy"] is False


class _Undeclared:
    def get_result_buffers(self):
        return {"buf": self.buffer(kind="nav", dtype=np.float32)}

    def process_frame(self, frame):
        self.results.buf[:] = frame.sum()

    def get_results(self):
        return {"buf": self.results.buf, "blah": np.zeros((3, 3))}


class _ResultOnlyWithoutGetResults:
    def get_result_buffers(self):
        return {"default": self.buffer(kind="nav", dtype=np.float32),
                "result_only": self.buffer(kind="nav", dtype=np.float32, use="result_only")}

    def process_frame(self, frame):
        self.results.default[:] = frame.sum()


def _both(cls):
    import libertem.udf.base as lt_udf

    return type("Lt" + cls.__name__, (cls, lt_udf.UDF), {}), type("Rt" + cls.__name__, (cls, rt.UDF), {})


def test_misdeclared_results_raise_libertems_type_and_words(ctx):
    from libertem.common.exceptions import UDFException as LtUDFException

    data = np.random.default_rng(6).random((3, 4, 5, 5)).astype(np.float32)
    lt_ctx = lt_api.Context.make_with("inline")
    lt_cls, rt_cls = _both(_Undeclared)
    with pytest.raises(KeyError):
        lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data), udf=lt_cls())
    with pytest.raises(KeyError, match="blah") as e:
        ctx.run_udf(dataset=ctx.load("memory", data=data), udf=rt_cls())
    assert isinstance(e.value, rt.UDFException)
    lt_cls, rt_cls = _both(_ResultOnlyWithoutGetResults)
    words = "don't know how to set use='result_only' buffer 'result_only'; please implement `get_results`"
    with pytest.raises(LtUDFException) as ref:
        lt_ctx.run_udf(dataset=lt_ctx.load("memory", data=data), udf=lt_cls())
    assert ref.match(words)
    with pytest.raises(rt.UDFException) as got:
        ctx.run_udf(dataset=ctx.load("memory", data=data), udf=rt_cls())
    assert got.match(words)
