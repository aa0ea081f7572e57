"""The HTTP face: a FastAPI app with the /v1 JSON API and the viewer page, over a :class:`Service`.

Every /v1 route but ``healthz`` checks the bearer token. Errors are JSON
``{"error", "detail", "field"}`` with the status of their
:class:`~raytile.serve.errors.ServeError`; other raytile errors in a request
are 400, anything else 500 (the server stays up).

>>> api = make_api()
>>> api.state.service = Service(ServeConfig.make(["/data"]))   # or use_service(...), as the deployment does
>>> # uvicorn.run(api) would serve it without Ray Serve, e.g. for debugging
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from importlib import resources
from typing import Any, AsyncIterator

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.requests import HTTPConnection

from raytile.common.errors import RaytileError
from raytile.serve.backlog import SocketBacklog
from raytile.serve.downloads import npz_bytes
from raytile.serve.encoding import BUFFER_MODES, ndjson, npy_bytes, sse
from raytile.serve.errors import BadRequest, ServeError
from raytile.serve.registry import ServedRun
from raytile.serve.service import Service

__all__ = ["make_api", "get_service", "use_service", "authorized"]

log = logging.getLogger(__name__)


#: The Service of this process (one replica a process), set by :func:`use_service`. Ray Serve runs a
#: copy of the ingress app made when the replica starts, so the deployment cannot reach the app's state.
_service: Service | None = None


def use_service(service: Service | None) -> None:
    """Make ``service`` the one the routes of this process use (the deployment's constructor calls it)."""
    global _service
    _service = service


def get_service(request: HTTPConnection) -> Service:
    """The Service: ``app.state.service`` if the app has one (plain uvicorn), else this process's."""
    service = getattr(request.app.state, "service", None) or _service
    if service is None:
        raise RuntimeError("no raytile Service is installed in this process (see use_service)")
    return service


def authorized(request: Request, service: Service = Depends(get_service)) -> Service:
    """The Service, once the request's bearer token is checked (401 without it)."""
    service.authorize(request.headers.get("authorization"))
    return service


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest("body", f"is not valid JSON: {e}") from None


def _run(service: Service, run_id: str) -> ServedRun:
    return service.registry.get(run_id)


router = APIRouter(prefix="/v1")


@router.get("/healthz")
async def healthz(service: Service = Depends(get_service)) -> dict[str, Any]:
    return service.health()


@router.get("/formats")
async def formats(service: Service = Depends(authorized)) -> dict[str, Any]:
    return service.formats()


@router.get("/colourwheel")
async def colourwheel(service: Service = Depends(authorized)) -> dict[str, Any]:
    """LiberTEM's colour wheel for a vector field, as the viewer draws a CoM ``field``
    (:func:`raytile.viz.colourwheel.wheel_table`)."""
    from raytile.viz.colourwheel import wheel_table

    return wheel_table()


@router.get("/udfs")
async def udfs(service: Service = Depends(authorized)) -> dict[str, Any]:
    return service.udf_catalogue()


@router.get("/datasets")
async def datasets(service: Service = Depends(authorized)) -> dict[str, Any]:
    return service.datasets()


@router.post("/datasets/detect")
async def detect_dataset(request: Request, service: Service = Depends(authorized)) -> dict[str, Any]:
    """``{"path"}`` -> the file's format as ``auto`` detects it, its parameters, nav and sig shapes and dtype
    (a raw file: ``"needs"``, what to enter for it)."""
    body = await _json(request)
    return await anyio.to_thread.run_sync(service.detect, body)


@router.post("/runs", status_code=201)
async def create_run(request: Request, stream: bool = False, buffers: str = "inline",
                     service: Service = Depends(authorized)) -> Any:
    """201 ``{run_id, ...}``; with ``?stream=true`` the 201's body is the run's stream at once (as
    ``GET .../stream`` gives it; the id in the ``X-Raytile-Run-Id`` header): one request instead of two."""
    if buffers not in BUFFER_MODES:
        raise BadRequest("buffers", f"must be one of {list(BUFFER_MODES)}, got {buffers!r}")
    served = await service.create_run(await _json(request))
    base = f"/v1/runs/{served.id}"
    if stream:
        return await _stream_response(service, served, request, buffers, None, status_code=201)
    return JSONResponse({"run_id": served.id, "stream": f"{base}/stream", "status": base,
                         "max_rate_hz": served.rate_hz}, status_code=201)


@router.get("/runs")
async def list_runs(service: Service = Depends(authorized)) -> dict[str, Any]:
    return {"runs": [r.status_json() for r in service.registry.runs.values()]}


@router.get("/runs/{run_id}")
async def run_status(run_id: str, service: Service = Depends(authorized)) -> dict[str, Any]:
    return _run(service, run_id).status_json()


@router.patch("/runs/{run_id}")
async def patch_run(run_id: str, request: Request, service: Service = Depends(authorized)) -> dict[str, Any]:
    return service.patch(_run(service, run_id), await _json(request))


@router.delete("/runs/{run_id}")
async def cancel_run(run_id: str, service: Service = Depends(authorized)) -> dict[str, Any]:
    served = _run(service, run_id)
    served.cancel("cancelled by DELETE")
    await served.wait_over(5.0)
    return served.status_json()


@router.get("/runs/{run_id}/results/{udf}/{buffer}.npy")
async def result_npy(run_id: str, udf: str, buffer: str, service: Service = Depends(authorized)) -> Response:
    served = _run(service, run_id)
    data = service.result_npy(served, udf, buffer)
    return Response(npy_bytes(data), media_type="application/octet-stream",
                    headers={"X-Raytile-Status": served.status, "X-Raytile-Seq": str(served.seq)})


@router.get("/runs/{run_id}/results/{udf}.npz")
async def result_npz(run_id: str, udf: str, service: Service = Depends(authorized)) -> Response:
    """Every buffer of one UDF (by index or name) in one ``.npz``: the latest, the final once the run ended."""
    served = _run(service, run_id)
    data = await anyio.to_thread.run_sync(npz_bytes, service.result_buffers(served, udf))
    return Response(data, media_type="application/octet-stream",
                    headers={"X-Raytile-Status": served.status, "X-Raytile-Seq": str(served.seq),
                             "Content-Disposition": f'attachment; filename="{_filename(served, udf)}.npz"'})


@router.get("/runs/{run_id}/results/{udf}/{buffer}.png")
async def result_png(run_id: str, udf: str, buffer: str, index: int = 0, colour: bool = False,
                     service: Service = Depends(authorized)) -> Response:
    """One 2D buffer as a PNG, a pixel per value (gray from its minimum to its maximum; ``index``: the
    plane along extra dims, e.g. the mask; ``colour=true``: a CoM ``field`` as a colour wheel)."""
    served = _run(service, run_id)
    data = await anyio.to_thread.run_sync(lambda: service.result_png(served, udf, buffer, index, colour))
    name = f"{_filename(served, udf)}-{buffer}"
    return Response(data, media_type="image/png",
                    headers={"X-Raytile-Status": served.status, "X-Raytile-Seq": str(served.seq),
                             "Content-Disposition": f'attachment; filename="{name}.png"'})


def _filename(served: ServedRun, udf: str) -> str:
    """A download's file name: the UDF's name (dots and odd characters as ``_``) and the run's id."""
    name = served.udf_names[int(udf)] if udf.isdigit() and int(udf) < len(served.udf_names) else udf
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] + "-" + served.id[:8]


@router.get("/runs/{run_id}/stream")
async def stream(run_id: str, request: Request, buffers: str = "inline", max_rate_hz: float | None = None,
                 service: Service = Depends(authorized)) -> StreamingResponse:
    """NDJSON (default) or server-sent events (``Accept: text/event-stream``) of the run's messages.

    A client that goes away cancels the run.
    """
    return await _stream_response(service, _run(service, run_id), request, buffers, max_rate_hz)


async def _stream_response(service: Service, served: ServedRun, request: Request, buffers: str,
                           max_rate_hz: float | None, status_code: int = 200) -> StreamingResponse:
    if buffers not in BUFFER_MODES:
        raise BadRequest("buffers", f"must be one of {list(BUFFER_MODES)}, got {buffers!r}")
    if max_rate_hz is not None and not (0 < max_rate_hz < math.inf):
        raise BadRequest("max_rate_hz", f"must be a number > 0, got {max_rate_hz!r}")
    use_sse = "text/event-stream" in request.headers.get("accept", "")
    encode = sse if use_sse else ndjson
    messages = service.messages(served, buffers, f"/v1/runs/{served.id}", max_rate_hz,
                                backlog=SocketBacklog(request.scope.get("server"), request.scope.get("client")))
    try:
        first = await messages.__anext__()
    except asyncio.CancelledError:  # the client left before the first message
        served.cancel("the client disconnected")
        raise

    async def body() -> AsyncIterator[bytes]:
        complete = False
        try:
            yield encode(first)
            if not first["final"]:
                async for msg in messages:
                    yield encode(msg)
            complete = True
        finally:
            if not complete:
                served.cancel("the client disconnected")
            await messages.aclose()

    media = "text/event-stream" if use_sse else "application/x-ndjson"
    return StreamingResponse(body(), status_code=status_code, media_type=media,
                             headers={"Cache-Control": "no-store", "X-Raytile-Run-Id": served.id})


@router.websocket("/runs/{run_id}/ws")
async def run_socket(websocket: WebSocket, run_id: str, buffers: str = "inline", token: str | None = None) -> None:
    """The run's stream pushed as JSON text frames (``"type": "message"``); the client sends
    ``{"type": "patch", "params": [...], "recompute": bool}`` or ``{"type": "cancel"}`` on the same
    socket and gets ``{"type": "patched", ...}`` or ``{"type": "error", "status", "error", "detail"}`` back.

    Browsers cannot set headers on a WebSocket: the token may come as ``?token=``. Closing the
    socket before the run ends cancels it. A refused socket is closed at once with code 4000 + the
    HTTP status (4400 a bad query value, 4401 no token, 4404 no such run).
    """
    service = get_service(websocket)
    try:
        header = websocket.headers.get("authorization") or (f"Bearer {token}" if token is not None else None)
        service.authorize(header)
        served = _run(service, run_id)
        if buffers not in BUFFER_MODES:
            raise BadRequest("buffers", f"must be one of {list(BUFFER_MODES)}, got {buffers!r}")
        messages = service.messages(served, buffers, f"/v1/runs/{served.id}",
                                    backlog=SocketBacklog(websocket.scope.get("server"), websocket.scope.get("client")))
    except ServeError as e:  # accepted, then closed: a browser sees the code (a refused handshake shows nothing)
        await websocket.accept()
        await websocket.close(code=4000 + e.status, reason=f"{e.error}: {e.detail}"[:120])
        return
    await websocket.accept()
    complete = False

    async def receive() -> None:
        while True:
            try:
                request = await websocket.receive_json()
            except WebSocketDisconnect:
                served.cancel("the client disconnected")  # also ends the sender's wait for the next result
                return
            except ValueError:
                await websocket.send_json({"type": "error", "status": 400, "error": "invalid",
                                           "detail": "body: frames must be JSON"})
                continue
            kind = request.get("type") if isinstance(request, dict) else None
            try:
                if kind == "patch":
                    body = {k: v for k, v in request.items() if k != "type"}
                    await websocket.send_json({"type": "patched", **service.patch(served, body)})
                elif kind == "cancel":
                    served.cancel("cancelled by the client")
                else:
                    raise BadRequest("type", f"must be 'patch' or 'cancel', got {kind!r}")
            except ServeError as e:
                await websocket.send_json({"type": "error", "status": e.status, **e.body()})

    receiver = asyncio.get_running_loop().create_task(receive())
    try:
        async for msg in messages:
            await websocket.send_json({"type": "message", **msg})
        complete = True
        await websocket.close()
    except (WebSocketDisconnect, RuntimeError):
        pass  # the client went away; the finally below cancels the run
    finally:
        receiver.cancel()
        if not complete:
            served.cancel("the client disconnected")
        await messages.aclose()


def _viewer_html() -> str:
    return resources.files("raytile.serve").joinpath("static/viewer.html").read_text(encoding="utf-8")


def make_api() -> FastAPI:
    """The FastAPI app (routes, error handlers, the viewer at ``/``); set ``app.state.service`` before use."""
    from raytile.serve.live_runs import live_router  # live runs on configured detector connections

    api = FastAPI(title="raytile", version="1", docs_url="/docs", redoc_url=None)
    api.include_router(router)
    api.include_router(live_router)

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def viewer() -> HTMLResponse:
        return HTMLResponse(_viewer_html())

    @api.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())

    @api.exception_handler(RaytileError)
    async def raytile_error(request: Request, exc: RaytileError) -> JSONResponse:
        return JSONResponse({"error": "invalid", "detail": f"{type(exc).__name__}: {exc}"}, status_code=400)

    @api.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request %s %s failed", request.method, request.url.path)
        return JSONResponse({"error": "internal", "detail": f"{type(exc).__name__}: {exc}"}, status_code=500)

    return api
