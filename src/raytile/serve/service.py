"""`Service`: what the HTTP routes (and the deployment's streaming method) do, without HTTP.

One per replica: a :class:`~raytile.Context` joining the cluster the app
runs on, the data roots, the UDF registry and the run registry. Runs start
through ``Context.run_udf_iter`` (the one execution path); blocking steps
(opening a data set, planning) run in a thread so the replica's event loop
stays free. The Context coordinates on a coordinator actor
(``coordinator="actor"``), as every run that other processes may reach: a
served run is the same run object there as any other, with one id, so
``raytile runs`` lists it and ``Context.attach(run_id)`` views it.

>>> service = Service(ServeConfig.make(["/data"]))
>>> served = await service.create_run({"dataset": {"format": "npy", "params": {"path": "a.npy"}},
...                                    "udfs": [{"name": "sum"}]})
>>> async for message in service.messages(served):
...     print(message["partitions_done"], message["status"])
"""

from __future__ import annotations

import asyncio
import hmac
import math
from typing import Any, AsyncGenerator

import anyio.to_thread
import numpy as np

from raytile.common.errors import RunEnded
from raytile.runtime.context import Context
from raytile.serve.backlog import SocketBacklog
from raytile.serve.config import ServeConfig
from raytile.serve.dataset_cache import DataSetCache
from raytile.serve.datasets import DATASET_SCHEMA, npy_header, open_dataset, resolve_dataset, served_formats
from raytile.serve.detection import RAW_NEEDS, Detections, describe
from raytile.serve.downloads import plane, png_bytes
from raytile.serve.encoding import BUFFER_MODES, encode_buffers
from raytile.serve.errors import BadRequest, Conflict, NotFound, PayloadTooLarge, Unauthorized
from raytile.serve.paths import DataRoots
from raytile.serve.registry import RunRegistry, ServedRun
from raytile.serve.roi import decode_roi
from raytile.serve.udfs import UDF_REF_SCHEMA, UDFRegistry
from raytile.serve.validation import check

__all__ = ["Service", "RUN_SCHEMA", "PATCH_SCHEMA", "DETECT_SCHEMA", "INLINE_ENCODE_BYTES"]

#: Messages whose buffers add up to more than this are encoded in a thread, not in the event loop.
INLINE_ENCODE_BYTES = 1 << 20
#: How often a stream whose client has not taken its previous messages looks at its socket again (s).
BACKLOG_POLL_S = 0.05

RUN_SCHEMA = {
    "type": "object", "required": ["dataset", "udfs"], "additionalProperties": False,
    "properties": {
        "dataset": DATASET_SCHEMA,
        "udfs": {"type": "array", "items": UDF_REF_SCHEMA, "minItems": 1, "maxItems": 16},
        "roi": {"type": ["object", "null"]},
        "max_rate_hz": {"type": "number", "exclusiveMinimum": 0},
    },
}

#: ``POST /v1/datasets/detect``: the file whose format and shapes the client wants.
DETECT_SCHEMA = {
    "type": "object", "required": ["path"], "additionalProperties": False,
    "properties": {"path": {"type": "string", "minLength": 1, "maxLength": 4096}},
}

PATCH_SCHEMA = {
    "type": "object", "required": ["params"], "additionalProperties": False,
    "properties": {"params": {"type": "array", "items": {"type": "object"}}, "recompute": {"type": "boolean"}},
}


class Service:
    """The app's state and actions on one replica."""

    def __init__(self, config: ServeConfig, ctx: Context | None = None):
        self.config = config
        self.roots = DataRoots(config.data_roots, config.storage_options)
        self.udfs = UDFRegistry(config.udf_modules)
        self.registry = RunRegistry(config.max_runs, config.keep_finished)
        if ctx is None:
            ctx = Context(executor="ray", coordinator="actor", cpus=config.workers)
            ctx.num_workers  # the coordinator actor and its workers start with the replica, not the first run
        self.ctx = ctx
        self._formats = served_formats()
        self.datasets_open = DataSetCache(size=8)
        self.detections = Detections()

    def close(self) -> None:
        """Cancel every run and close the Context (the replica is going away)."""
        self.registry.cancel_all("the server shut down")
        self.ctx.close()

    # -- access ------------------------------------------------------------------
    def authorize(self, header: str | None) -> None:
        """Raise Unauthorized (401) unless ``header`` is ``Bearer <token>`` (when a token is set)."""
        token = self.config.token
        if token is None:
            return
        scheme, _, given = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise Unauthorized("Authorization", "needs 'Bearer <token>' with this server's token")

    # -- catalogue ---------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return {"status": "ok", "active_runs": len(self.registry.active()), "runs": len(self.registry.runs),
                "max_runs": self.config.max_runs, "workers": self.ctx.num_workers}

    def formats(self) -> dict[str, Any]:
        return {"formats": [{"name": n, "params": s} for n, s in self._formats.items()]}

    def udf_catalogue(self) -> dict[str, Any]:
        return {"udfs": self.udfs.describe()}

    def datasets(self) -> dict[str, Any]:
        """The data files under the roots as ``auto`` detects them (see :mod:`raytile.serve.detection`)."""
        files = self.detections.annotate(self.roots.listing())
        for f in files:
            header = npy_header(f["path"])
            if header is not None:
                f.update(header)
        return {"roots": list(self.roots.roots), "files": files}

    def detect(self, body: Any) -> dict[str, Any]:
        """``{"format", "params", "nav_shape", "sig_shape", "dtype"}`` of one file inside the roots, opened
        with the format ``auto`` detects; a raw file answers ``{"format": "raw", "needs": {...}}`` (what to
        enter: it has no header). Blocking (opens the file): call it from a thread."""
        check(body, DETECT_SCHEMA, "body")
        path = self.roots.resolve(body["path"], "body.path")
        found = self.detections.of(path)
        if found is None:
            raise BadRequest("body.path", f"{body['path']!r} holds no data set that a format recognises "
                                          f"(raw files end in .raw, .bin or .dat)")
        name, detected = found
        if name == "raw":
            return {"format": "raw", "params": {}, "needs": dict(RAW_NEEDS)}
        spec = {"format": name, "params": {**detected, "path": body["path"]}}
        resolved = resolve_dataset(spec, self.roots, "body", self._formats)
        return describe(name, detected, lambda: self.datasets_open.get(
            resolved, lambda: open_dataset(self.ctx, *resolved, "body")))

    # -- runs ----------------------------------------------------------------------
    async def create_run(self, body: Any) -> ServedRun:
        """Validate ``body``, open the data set, start the run; raises a ServeError on bad input."""
        check(body, RUN_SCHEMA, "body")
        rate = min(float(body.get("max_rate_hz", self.config.max_rate_hz)), self.config.max_rate_hz)
        self.registry.reserve()
        try:
            run, specs, sig_shape, notes = await anyio.to_thread.run_sync(self._start, body)
            served = ServedRun(run, [u["name"] for u in body["udfs"]], rate, sig_shape, specs, warnings=notes)
            return self.registry.add(served)
        finally:
            self.registry.release()

    def _start(self, body: dict[str, Any]) -> tuple[Any, list[Any], tuple[int, ...], list[str]]:
        name, params = resolve_dataset(body["dataset"], self.roots, "dataset", self._formats)
        ds = self.datasets_open.get((name, params), lambda: open_dataset(self.ctx, name, params, "dataset"))
        sig_shape = tuple(ds.shape.sig)
        nav_shape = tuple(ds.shape.nav)
        roi = decode_roi(body.get("roi"), nav_shape, self.config.max_roi_bytes)
        udfs = [self.udfs.build(ref, sig_shape, f"udfs[{i}]") for i, ref in enumerate(body["udfs"])]
        specs = [self.udfs.spec(ref["name"], f"udfs[{i}].name") for i, ref in enumerate(body["udfs"])]
        if roi is not None and not roi.any():
            raise BadRequest("roi", "selects no nav position")
        empty = self.ctx.dry_run(ds, udfs, roi=roi)
        size = sum(b.data.nbytes for bufs in empty for b in bufs.values())
        if size > self.config.max_result_bytes:
            raise PayloadTooLarge("udfs", f"the results would take {size} bytes; this server allows "
                                          f"{self.config.max_result_bytes} per run")
        run = self.ctx.run_udf_iter(dataset=ds, udf=udfs, roi=roi, sync=False)  # followed by a task (ServedRun)
        return run, specs, sig_shape, ds.load_warnings

    def patch(self, served: ServedRun, body: Any) -> dict[str, Any]:
        """A live patch: ``{"params": [one dict per UDF], "recompute": bool}``."""
        check(body, PATCH_SCHEMA, "body")
        if served.over:
            raise Conflict("run_id", f"run {served.id} is {served.status}; only running runs take patches")
        params = body["params"]
        if len(params) != len(served.specs):
            raise BadRequest("body.params", f"needs {len(served.specs)} objects (one per UDF), got {len(params)}")
        kwargs = [spec.kwargs(p, served.sig_shape, f"body.params[{i}]", patch=True)
                  for i, (spec, p) in enumerate(zip(served.specs, params))]
        try:
            served.run.update_parameters(kwargs, recompute=bool(body.get("recompute", False)))
        except RunEnded as e:  # it ended between the check above and the patch
            raise Conflict("run_id", str(e)) from None
        served.patches += 1
        return {"run_id": served.id, "patches": served.patches, "recompute": bool(body.get("recompute", False))}

    def result_npy(self, served: ServedRun, udf: str, buffer: str) -> np.ndarray:
        """The latest (final once the run ended) data of one buffer; ``udf`` is an index or a UDF name."""
        bufs = self.result_buffers(served, udf)
        if buffer not in bufs:
            raise NotFound("buffer", f"UDF {udf!r} has no buffer {buffer!r}; it has {sorted(bufs)}")
        return bufs[buffer]

    def result_buffers(self, served: ServedRun, udf: str) -> dict[str, np.ndarray]:
        """Every buffer of one UDF's latest (final once the run ended) results, by name."""
        return {name: buf.data for name, buf in self._udf_results(served, udf).items()}

    def result_png(self, served: ServedRun, udf: str, buffer: str, index: int = 0, colour: bool = False) -> bytes:
        """One buffer as a PNG, a pixel per value (:mod:`raytile.serve.downloads`): its plane ``index``
        along extra dims; ``colour``: a CoM field (extra shape ``(2,)``) as a colour wheel."""
        bufs = self._udf_results(served, udf)
        if buffer not in bufs:
            raise NotFound("buffer", f"UDF {udf!r} has no buffer {buffer!r}; it has {sorted(bufs)}")
        buf = bufs[buffer]
        extra = tuple(buf.extra_shape) if buf.kind == "nav" else ()
        dims = buf.data.ndim - len(extra) if buf.kind == "nav" else len(served.sig_shape)
        if buf.kind == "single" or dims != 2:
            raise BadRequest("buffer", f"{buffer!r} is a {buf.kind} buffer of shape {list(buf.data.shape)}; "
                                       "PNGs are made of 2D scan or frame images (take the .npy or .npz)")
        if colour:
            if extra != (2,):
                raise BadRequest("colour", f"needs a vector field (extra shape (2,)); {buffer!r} has {list(extra)}")
            return png_bytes(buf.data, colour_field=True)
        try:
            image = plane(buf.data, dims, index)
        except IndexError as e:
            raise BadRequest("index", str(e)) from None
        return png_bytes(image)

    def _udf_results(self, served: ServedRun, udf: str) -> dict[str, Any]:
        part = served.latest
        if part is None:
            raise NotFound("run_id", f"run {served.id} has no results yet")
        if udf.isdigit() and int(udf) < len(part.buffers):
            index = int(udf)
        elif served.udf_names.count(udf) == 1:
            index = served.udf_names.index(udf)
        else:
            raise NotFound("udf", f"no UDF {udf!r} in run {served.id} (UDFs: {served.udf_names}, or an index)")
        return dict(part.buffers[index])

    def message(self, served: ServedRun, mode: str, url_base: str) -> dict[str, Any]:
        """The stream message for the run's latest state."""
        part = served.latest
        msg: dict[str, Any] = {
            "seq": served.seq, "run_id": served.id, "status": served.status, "final": served.over,
            "partitions_done": part.partitions_done if part else 0,
            "partitions_total": part.partitions_total if part else None,
            "damage_fraction": part.damage.fraction if part else 0.0,
            "param_versions": {str(k): v for k, v in part.param_versions.items()} if part else {},
            "coalesced": served.run.coalesced,
            "buffers": encode_buffers(part, served.udf_names, mode, url_base) if part else [],
        }
        if served.warnings:  # what opening the data set found suspicious (file, size, what was read)
            msg["warnings"] = list(served.warnings)
        if served.error is not None:
            msg["error"] = served.error
        if served.cancel_reason is not None:
            msg["cancel_reason"] = served.cancel_reason
        return msg

    async def messages(self, served: ServedRun, mode: str = "inline", url_base: str = "",
                       rate_hz: float | None = None,
                       backlog: SocketBacklog | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """The run's stream: the latest state whenever it changed, partial results at most ``rate_hz``
        a second; the last message, sent as soon as the run ends, has ``final: true`` and the end
        status (and ``error`` if the run failed). With the client's ``backlog``, a partial result
        waits until the client took the previous messages off its connection (a slow reader skips
        states, and its final message is not queued behind them: see serve/backlog.py)."""
        if mode not in BUFFER_MODES:
            raise BadRequest("buffers", f"must be one of {list(BUFFER_MODES)}, got {mode!r}")
        rate = served.rate_hz if rate_hz is None else min(served.rate_hz, rate_hz)
        if not (rate > 0 and math.isfinite(rate)):
            raise BadRequest("max_rate_hz", f"must be a number > 0, got {rate_hz!r}")
        loop = asyncio.get_running_loop()
        sent, next_at = 0, 0.0
        while True:
            await served.wait_newer(sent)
            delay = next_at - loop.time()
            if delay > 0 and not served.over:
                # latest wins: what arrives meanwhile replaces, never queues; the run's end comes at once
                await served.wait_over(delay)
            while backlog is not None and not served.over and not backlog.free():
                await served.wait_over(BACKLOG_POLL_S)  # the socket is full: the newest state goes later
            sent = served.seq
            part = served.latest
            size = sum(b.data.nbytes for bufs in part.buffers for b in bufs.values()) if part else 0
            if mode == "inline" and size > INLINE_ENCODE_BYTES:
                msg = await anyio.to_thread.run_sync(self.message, served, mode, url_base)
            else:
                msg = self.message(served, mode, url_base)
            yield msg
            if msg["final"]:
                return
            next_at = loop.time() + 1.0 / rate
