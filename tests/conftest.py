"""Shared fixtures: an inline Context, and `ctx` parametrised over both executors.

The Ray cluster is one local instance per test session (num_cpus=2, no
dashboard), started on first use and shut down at the end.
"""

from __future__ import annotations

import numpy as np
import pytest

import raytile as rt


@pytest.fixture(scope="session")
def ray_context():
    """A Context on the session's local Ray cluster (num_cpus=2)."""
    pytest.importorskip("ray")
    try:
        import raytile.actors.executor  # noqa: F401
    except ImportError as e:
        pytest.skip(f"Ray executor not available: {e}")
    ctx = rt.Context.make_local(cpus=2, gpus=0)
    yield ctx
    ctx.close()
    import ray

    ray.shutdown()


@pytest.fixture(scope="session")
def inline_ctx():
    return rt.Context(executor="inline")


@pytest.fixture(params=["inline", "ray"])
def ctx(request):
    """Runs a test once per executor: inline and Ray."""
    if request.param == "inline":
        return request.getfixturevalue("inline_ctx")
    return request.getfixturevalue("ray_context")


@pytest.fixture
def rng():
    return np.random.default_rng(42)
