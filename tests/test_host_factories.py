"""Context(executor=...) finds its run host through registered factories (the runtime imports no actors)."""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import ConfigValidationError
from raytile.runtime.host import DriverHost
from raytile.runtime.host_factories import make_host, register_host_factory
from raytile.runtime.inline import InlineExecutor


def test_ray_hosts_are_registered_by_the_actors_package_as_names():
    from raytile.runtime import host_factories

    assert host_factories._FACTORIES[("ray", "driver")] == "raytile.actors.executor:RayExecutor.make"
    assert host_factories._FACTORIES[("ray", "actor")] == "raytile.actors.actor_host:ActorHost.make"


def test_a_registered_factory_makes_the_contexts_host(monkeypatch):
    from raytile.runtime import host_factories

    monkeypatch.setattr(host_factories, "_FACTORIES", dict(host_factories._FACTORIES))
    made = []

    def factory(**kwargs):
        made.append(kwargs)
        return InlineExecutor()

    register_host_factory("mine", "driver", factory)
    ctx = rt.Context(executor="mine", threads=3)
    assert made == [{"threads": 3}] and isinstance(ctx._host, DriverHost) and ctx.coordinator == "driver"
    data = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    res = ctx.run_udf(dataset=ctx.load("memory", data=data), udf=rt.SumUDF())
    np.testing.assert_allclose(res["intensity"].data, data.sum(axis=(0, 1)))
    register_host_factory("mine2", "driver", "raytile.runtime.inline:InlineExecutor")  # by name, imported on use
    assert isinstance(make_host("mine2", "driver").executor, InlineExecutor)


def test_an_unknown_executor_is_named():
    with pytest.raises(ConfigValidationError, match="no executor 'dask' with coordinator='driver'; known: .*'inline'"):
        rt.Context(executor="dask")
