"""raytile over HTTP: a Ray Serve app (FastAPI ingress) that runs analyses for clients sending JSON.

Needs the ``serve`` extra (``pip install -e ".[serve]"``). Clients send
names and JSON only, never code; runs go through ``Context.run_udf_iter``.
See docs/serve.md.

>>> from ray import serve
>>> from raytile.serve import build_app
>>> serve.run(build_app(data_roots=["/data"]), name="raytile", route_prefix="/")

or from a shell: ``raytile serve --data-root /data``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raytile.serve.config import ServeConfig
from raytile.serve.errors import (
    BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge, ServeError, TooManyRuns, Unauthorized,
)

if TYPE_CHECKING:
    from ray.serve.deployment import Application

__all__ = [
    "build_app", "ServeConfig", "ServeError", "BadRequest", "Unauthorized", "Forbidden", "NotFound",
    "Conflict", "PayloadTooLarge", "TooManyRuns",
]


def build_app(data_roots: Any, token: str | None = None, max_runs: int = 8, udf_modules: Any = (),
              **limits: Any) -> "Application":
    """The Serve application (see :func:`raytile.serve.deployment.build_app`); imports Ray Serve on call,
    so ``import raytile.serve`` (e.g. by a worker unpickling a mask shape) does not."""
    from raytile.serve.deployment import build_app as _build

    return _build(data_roots, token=token, max_runs=max_runs, udf_modules=udf_modules, **limits)
