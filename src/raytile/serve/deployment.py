"""The Ray Serve deployment: :class:`RaytileServer` with the FastAPI ingress, and :func:`build_app`.

>>> from ray import serve
>>> serve.run(build_app(data_roots=["/data"], token="s3cret"), name="raytile", route_prefix="/")

Other deployments stream a run through a handle (no HTTP):

>>> handle = serve.get_app_handle("raytile")
>>> gen = handle.options(stream=True).stream_run.remote(
...     {"dataset": {"format": "npy", "params": {"path": "a.npy"}}, "udfs": [{"name": "sumsig"}]})
>>> async for message in gen:      # dicts, as on the HTTP stream; the last has "final": True
...     ...
"""

from __future__ import annotations

import os
from typing import Any, AsyncIterator, Sequence, cast

from ray import serve
from ray.serve.deployment import Application

from raytile.serve.config import ServeConfig
from raytile.serve.routes import make_api, use_service
from raytile.serve.service import Service

__all__ = ["RaytileServer", "build_app", "api"]

#: The ingress app (Serve gives each replica a copy; the routes find the replica's Service by use_service).
api = make_api()


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256, num_replicas=1)
@serve.ingress(api)
class RaytileServer:
    """One replica: a Service (a Context joined to the cluster, the runs it serves) behind the API.

    Runs live in the replica that started them, so the app runs one replica;
    the workers that do the work are the Context's actors across the cluster.
    """

    def __init__(self, config: ServeConfig):
        self.service = Service(config)
        use_service(self.service)

    async def stream_run(self, body: dict[str, Any], buffers: str = "inline") -> AsyncIterator[dict[str, Any]]:
        """Start a run (the body of ``POST /v1/runs``) and yield its stream messages (for
        ``handle.options(stream=True).stream_run.remote(body)``); closing the stream cancels it."""
        served = await self.service.create_run(body)
        complete = False
        try:
            async for msg in self.service.messages(served, buffers):
                yield msg
            complete = True
        finally:
            if not complete:
                served.cancel("the handle's stream was closed")

    def __del__(self) -> None:
        service = getattr(self, "service", None)
        if service is not None:
            use_service(None)
            service.close()


def build_app(data_roots: Sequence[str | os.PathLike[str]], token: str | None = None, max_runs: int = 8,
              udf_modules: Sequence[str] = (), **limits: Any) -> Application:
    """The Serve application: pass it to ``serve.run``.

    ``limits``: other :class:`ServeConfig` fields (``max_roi_bytes``,
    ``max_result_bytes``, ``max_rate_hz``, ``keep_finished``, ``workers``).
    Settings are checked here, in the caller (a bad root fails now, not in the replica).

    >>> app = build_app(data_roots=["/data"], token=None, max_runs=8, udf_modules=["mylab.udfs"])
    >>> serve.run(app, name="raytile", route_prefix="/")
    """
    config = ServeConfig.make(data_roots, token=token, max_runs=max_runs, udf_modules=tuple(udf_modules), **limits)
    for mod in config.udf_modules:  # an allow-listed module that does not import fails here, not in the replica
        __import__(mod)
    return cast(Any, RaytileServer).bind(config)  # serve.deployment made the class a Deployment
