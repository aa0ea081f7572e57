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
