"""Live runs over HTTP: runs on the acquisitions of detector connections configured on the server.

``raytile serve --live merlin://HOST:6342?api_port=6341`` (or ``build_app(...,
live={"merlin": "merlin://..."})``) names a detector connection; clients
start a run on its next acquisition and watch it grow like any served run:

    GET  /v1/live                        the configured sources: name, detector, url, busy, run_id
    POST /v1/live/{name}/runs            {"udfs": [...], "nav_shape": [8, 8], "timeout": 30,
                                          "frames_per_partition": 16, "max_rate_hz": 10}
                                         -> 201 {run_id, stream, status} once the acquisition started
                                         (504 if none started within ``timeout`` s; 409 while a run
                                         reads that source); ``?stream=true`` streams at once

The run is then an ordinary served run: ``/v1/runs/{id}``, its stream,
WebSocket, results, patches and DELETE. The server opens each connection
once, keeps it open across acquisitions (LiberTEM-live's way), and lets one
run at a time read it (a second would take the first one's frames).
Clients send names and JSON only; the connection is the server's.

>>> sources = LiveSources({"merlin": "merlin://127.0.0.1:6342?api_port=6341"})
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Mapping

import anyio.to_thread
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from raytile.serve.encoding import BUFFER_MODES
from raytile.serve.errors import BadRequest, Conflict, NotFound, ServeError
from raytile.serve.registry import ServedRun
from raytile.serve.routes import _stream_response, _json, authorized
from raytile.serve.service import Service
from raytile.serve.udfs import UDF_REF_SCHEMA
from raytile.serve.validation import check

__all__ = ["LiveSources", "NoAcquisition", "LIVE_RUN_SCHEMA", "live_router", "create_live_run", "live_sources",
           "check_live_config"]

LIVE_RUN_SCHEMA = {
    "type": "object", "required": ["udfs"], "additionalProperties": False,
    "properties": {
        "udfs": {"type": "array", "items": UDF_REF_SCHEMA, "minItems": 1, "maxItems": 16},
        "nav_shape": {"type": ["array", "null"], "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
        "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 600},
        "frames_per_partition": {"type": "integer", "minimum": 1},
        "max_rate_hz": {"type": "number", "exclusiveMinimum": 0},
    },
}


class NoAcquisition(ServeError):
    """No acquisition started on the source within the request's ``timeout``."""

    error = "timeout"
    status = 504


def check_live_config(live: Any) -> tuple[tuple[str, str], ...]:
    """``{name: url}``, ``[(name, url)]`` or ``["[name=]url"]`` as ``((name, url), ...)``, each URL
    parsed once (ConfigValidationError for a bad one, in the caller). A bare URL is named by its
    detector (``merlin``)."""
    from raytile.live.sources import LiveSource

    items = live.items() if isinstance(live, Mapping) else live
    out: dict[str, str] = {}
    for item in items:
        if isinstance(item, str):
            name, sep, url = item.partition("=")
            if not sep or "://" in name:
                name, url = "", item
        else:
            name, url = item
        source = LiveSource.parse(url)
        name = name or source.detector
        if name in out:
            from raytile.common.errors import ConfigValidationError

            raise ConfigValidationError(f"serve: live source name {name!r} is given twice")
        out[name] = url
    return tuple(out.items())


class LiveSources:
    """The live sources of one replica: parsed URLs, their open connections and the run reading each."""

    def __init__(self, live: Any):
        from raytile.live.sources import LiveSource

        self.sources = {name: LiveSource.parse(url) for name, url in check_live_config(live)}
        self._connections: dict[str, Any] = {}
        self._runs: dict[str, ServedRun | None] = {}  # None: a run is being started
        self._lock = threading.Lock()

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            out = []
            for name, src in self.sources.items():
                run = self._runs.get(name)
                busy = name in self._runs and (run is None or not run.over)
                out.append({"name": name, **src.describe(), "busy": busy, "run_id": run.id if run else None})
            return out

    def claim(self, name: str) -> Any:
        """The source's open connection, for one run (Conflict while another run reads it)."""
        source = self.sources.get(name)
        if source is None:
            raise NotFound("name", f"no live source {name!r} on this server (sources: {sorted(self.sources)})")
        with self._lock:
            if name in self._runs:
                held = self._runs[name]  # None: a run of it is being started
                if held is None or not held.over:
                    raise Conflict("name", f"live source {name!r} is read by a run already; wait for it to end")
            self._runs[name] = None
        try:
            conn = self._connections.get(name)
            if conn is None:
                conn = self._connections[name] = source.open()
            return conn
        except BaseException:
            self.unclaim(name)
            raise

    def started(self, name: str, served: ServedRun) -> None:
        with self._lock:
            self._runs[name] = served

    def unclaim(self, name: str) -> None:
        with self._lock:
            if self._runs.get(name, False) is None:
                del self._runs[name]

    def close(self) -> None:
        with self._lock:
            conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            conn.close()


_SOURCES: "weakref.WeakKeyDictionary[Service, LiveSources]" = weakref.WeakKeyDictionary()
_SOURCES_LOCK = threading.Lock()


def live_sources(service: Service) -> LiveSources:
    """The replica's live sources (from ``service.config.live``), made on first use."""
    with _SOURCES_LOCK:
        sources = _SOURCES.get(service)
        if sources is None:
            sources = _SOURCES[service] = LiveSources(getattr(service.config, "live", ()))
            weakref.finalize(service, sources.close)
        return sources


async def create_live_run(service: Service, name: str, body: Any) -> ServedRun:
    """Validate ``body``, wait for the source's next acquisition, start the run and register it."""
    check(body, LIVE_RUN_SCHEMA, "body")
    nav = body.get("nav_shape")
    if nav is not None and any(s == 0 or s < -1 for s in nav):
        raise BadRequest("body.nav_shape", f"needs positive sizes or -1 placeholders, got {nav}")
    sources = live_sources(service)
    rate = min(float(body.get("max_rate_hz", service.config.max_rate_hz)), service.config.max_rate_hz)
    service.registry.reserve()
    try:
        conn = sources.claim(name)
        try:
            run, specs, sig_shape = await anyio.to_thread.run_sync(_start, service, sources, name, conn, body)
        except BaseException:
            sources.unclaim(name)
            raise
        served = ServedRun(run, [u["name"] for u in body["udfs"]], rate, sig_shape, specs)
        sources.started(name, served)
        return service.registry.add(served)
    finally:
        service.registry.release()


def _start(service: Service, sources: LiveSources, name: str, conn: Any, body: dict[str, Any]) -> tuple:
    timeout = float(body.get("timeout", 30.0))
    nav = body.get("nav_shape")
    ds = sources.sources[name].next_acquisition(service.ctx, conn, timeout, None if nav is None else tuple(nav),
                                                body.get("frames_per_partition"))
    if ds is None:
        raise NoAcquisition("timeout", f"no acquisition started on live source {name!r} within {timeout:g} s")
    sig_shape = tuple(ds.shape.sig)
    udfs = [service.udfs.build(ref, sig_shape, f"udfs[{i}]") for i, ref in enumerate(body["udfs"])]
    specs = [service.udfs.spec(ref["name"], f"udfs[{i}].name") for i, ref in enumerate(body["udfs"])]
    run = service.ctx.run_udf_iter(dataset=ds, udf=udfs, sync=False)  # followed by a task (ServedRun)
    return run, specs, sig_shape


live_router = APIRouter(prefix="/v1/live")


@live_router.get("")
async def list_live(service: Service = Depends(authorized)) -> dict[str, Any]:
    return {"sources": live_sources(service).describe()}


@live_router.post("/{name}/runs", status_code=201)
async def start_live_run(name: str, request: Request, stream: bool = False, buffers: str = "inline",
                         service: Service = Depends(authorized)) -> Any:
    """201 once the acquisition started (see the module docstring); ``?stream=true`` streams it."""
    if buffers not in BUFFER_MODES:
        raise BadRequest("buffers", f"must be one of {list(BUFFER_MODES)}, got {buffers!r}")
    served = await create_live_run(service, name, await _json(request))
    base = f"/v1/runs/{served.id}"
    if stream:
        return await _stream_response(service, served, request, buffers, None, status_code=201)
    return JSONResponse({"run_id": served.id, "stream": f"{base}/stream", "status": base,
                         "max_rate_hz": served.rate_hz, "source": name}, status_code=201)
