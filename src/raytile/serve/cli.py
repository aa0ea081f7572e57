"""``raytile serve``: the serve app from a shell. Ctrl-C (or SIGTERM) shuts it down cleanly.

    raytile serve --data-root /data [--host 127.0.0.1] [--port 8000] [--token T] [--udf-module pkg.mod]
    raytile serve --data-root /shared/data --address auto --host 0.0.0.0   # on a `ray up` cluster's head
    raytile serve --data-root /data --live merlin://127.0.0.1:6342?api_port=6341  # live runs: POST /v1/live/merlin/runs

Importing this module imports neither Ray nor Ray Serve (the ``serve``
extra may be missing); :func:`cmd_serve` does.

>>> import argparse
>>> sub = argparse.ArgumentParser().add_subparsers()
>>> add_serve_parser(sub)
"""

from __future__ import annotations

import argparse
import os
import logging
import signal
import sys
import threading
from typing import Any

from raytile.common.errors import ConfigValidationError

__all__ = ["add_serve_parser", "cmd_serve", "parse_storage_options"]


def add_serve_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to ``sub`` (an argparse subparsers object)."""
    s = sub.add_parser("serve", help="the HTTP API and web viewer on Ray Serve (the serve extra)",
                       description="Serve raytile over HTTP (Ray Serve, FastAPI): clients send JSON, "
                                   "stream partial results, patch live; the viewer is at /. See docs/serve.md.")
    s.add_argument("--data-root", action="append", required=True, metavar="DIR",
                   help="a directory or object store prefix (s3://bucket/prefix) clients may read data sets from "
                        "(repeat for several)")
    s.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an fsspec storage option for s3:// data roots, e.g. endpoint_url=http://minio:9000 or "
                        "anon=true (repeatable); credentials better come from the environment (AWS_* variables, "
                        "~/.aws), which is the default")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    s.add_argument("--token", default=os.environ.get("RAYTILE_SERVE_TOKEN"),
                   help="bearer token clients must send (default $RAYTILE_SERVE_TOKEN; none: no check)")
    s.add_argument("--udf-module", action="append", default=[], metavar="MODULE",
                   help="a server-side module whose UDF classes clients may name (repeatable)")
    s.add_argument("--max-runs", type=int, default=8, help="runs going on at once (default 8; 429 beyond)")
    s.add_argument("--live", action="append", default=[], metavar="[NAME=]URL",
                   help="a detector connection clients may start live runs on, e.g. "
                        "merlin://127.0.0.1:6342?api_port=6341 (repeatable; see docs/live.md)")
    s.add_argument("--address", default=None,
                   help="Ray cluster to join ('auto' on a cluster node; default: a private local Ray)")
    s.set_defaults(func=cmd_serve)
    return s


def parse_storage_options(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as storage options; ``true``/``false`` become booleans.

    >>> parse_storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=true"])
    {'endpoint_url': 'http://127.0.0.1:9000', 'anon': True}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigValidationError("serve: --storage-option must be KEY=VALUE (an item has no '=')")
        out[key] = {"true": True, "false": False}.get(value.lower(), value)
    return out


def cmd_serve(args: argparse.Namespace) -> int:
    """Start Ray (or join ``--address``), Serve on ``--host:--port``, the app; block until Ctrl-C."""
    import ray

    from raytile.actors.ray_start import COMMAND_INIT_KWARGS, start_ray

    try:
        from ray import serve

        from raytile.serve import build_app
    except ImportError as e:
        raise ConfigValidationError(f"raytile serve needs the serve extra (pip install -e '.[serve]'): {e}") from None

    live: dict[str, Any] = {"live": tuple(args.live)} if getattr(args, "live", None) else {}
    options = parse_storage_options(getattr(args, "storage_option", []) or [])
    if options:
        live["storage_options"] = options
    app = build_app(args.data_root, token=args.token, max_runs=args.max_runs, udf_modules=args.udf_module, **live)
    started_ray = not ray.is_initialized()
    if started_ray:  # no --address: the shared Ray session's (raytile ray start), else a private local Ray
        from raytile.actors.ray_session import command_address

        start_ray(command_address(args.address, say=lambda line: print(line, file=sys.stderr)),
                  init_kwargs=COMMAND_INIT_KWARGS)
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # Serve's INFO lines: in its log files only
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(app, name="raytile", route_prefix="/")
        print(f"raytile serve: http://{args.host}:{args.port}/ (API under /v1, viewer at /); Ctrl-C stops",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        print("raytile serve: shutting down", file=sys.stderr, flush=True)
        serve.shutdown()
        if started_ray:
            ray.shutdown()
    return 0
