"""Shared fixtures: an inline Context, and `ctx` parametrised over both executors.

The Ray cluster is one local instance per test session (num_cpus=2, no
dashboard), started on first use and shut down at the end.

Every test that uses Ray carries the ``ray`` mark, so ``pytest -m "not ray"`` starts no Ray:
the ``ctx`` fixture's "ray" parameter carries it, tests that request ``ray_context`` or
``serve_url`` get it at collection, and a test without the mark that calls ``ray.init``
fails with a message saying so (the guard below).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import raytile as rt


RAY_FIXTURES = frozenset({"ray_context", "serve_url"})


def pytest_collection_modifyitems(config, items):
    """Mark every test that requests the session's Ray cluster (directly or through a fixture) ``ray``."""
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(autouse=True)
def _no_ray_without_the_mark(request, monkeypatch):
    """A test without the ``ray`` mark must not start Ray: ``-m "not ray"`` would start it anyway."""
    if request.node.get_closest_marker("ray") is not None:
        return
    ray = sys.modules.get("ray")
    if ray is None:
        try:
            import ray
        except ImportError:
            return

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} starts Ray but has no @pytest.mark.ray: "
                             "mark it, or use the ray_context / ctx fixtures, which carry the mark")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.fixture(scope="session")
def ray_context():
    """A Context on the session's local Ray cluster (num_cpus=2)."""
    pytest.importorskip("ray")
    try:
        import raytile.actors.executor  # noqa: F401
    except ImportError as e:
        pytest.skip(f"Ray executor not available: {e}")
    # Test modules define UDFs; the workers import them by module name like the driver does.
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    pythonpath = os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH", "")) if p)
    # log_to_driver=False: Ray's and Serve's actors log to Ray's files, not between pytest's dots (issue 35)
    ctx = rt.Context.make_local(cpus=2, gpus=0, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
                                log_to_driver=False)
    yield ctx
    ctx.close()
    import ray

    ray.shutdown()


@pytest.fixture(scope="session")
def serve_url(ray_context):
    """Ray Serve on the session's Ray cluster, HTTP on 127.0.0.1 at a free port; its URL.

    Shut down before Ray is (this fixture depends on ``ray_context``, so it is torn down first).
    """
    serve = pytest.importorskip("ray.serve")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import logging

    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # the driver's Serve INFO lines: not in the dots
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()


@pytest.fixture(scope="session")
def inline_ctx():
    return rt.Context(executor="inline")


@pytest.fixture(params=["inline", pytest.param("ray", marks=pytest.mark.ray)])
def ctx(request):
    """Runs a test once per executor: inline and Ray."""
    if request.param == "inline":
        return request.getfixturevalue("inline_ctx")
    return request.getfixturevalue("ray_context")


@pytest.fixture
def rng():
    return np.random.default_rng(42)
