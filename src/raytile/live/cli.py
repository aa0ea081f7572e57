"""``raytile live``: a Merlin simulator on loopback, and a UDF run on a live acquisition.

    raytile live sim merlin --mode R12 --nav-shape 64,64 --sig-shape 256,256 --frame-rate 5000
    raytile live sim merlin --dataset scan.hdr --format mib --continuous
    raytile live run merlin --udf sum,ring --data-port 6342 --api-port 6341 --out live.npz
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError

__all__ = ["add_live_parser", "cmd_live"]


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape like 64,64, got {text!r}") from None
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes, got {text!r}")
    return shape


def add_live_parser(sub: Any) -> None:
    """Add ``live sim`` and ``live run`` to the ``raytile`` subcommand parsers."""
    p = sub.add_parser("live", help="live acquisition: a detector simulator, or a UDF run on a live stream",
                       description="Live acquisition from detectors (see docs/live.md).")
    lsub = p.add_subparsers(dest="live_command", metavar="{sim,run}")
    lsub.required = True
    s = lsub.add_parser("sim", help="a Merlin detector on 127.0.0.1 replaying synthetic frames or a data set")
    s.add_argument("detector", choices=("merlin",))
    s.add_argument("--mode", default="U16", help="U08, U16, U32, R1, R6 or R12 (default U16)")
    s.add_argument("--nav-shape", type=_shape, default=(32, 32), help="scan shape (default 32,32)")
    s.add_argument("--sig-shape", type=_shape, default=(256, 256), help="frame shape (default 256,256)")
    s.add_argument("--dataset", default=None, help="replay this data set's frames instead of synthetic ones")
    s.add_argument("--format", default="auto", help="format of --dataset (default auto)")
    s.add_argument("--frame-rate", type=float, default=None, help="frames/s (default: as fast as possible)")
    s.add_argument("--acquisitions", type=int, default=1_000_000, help="acquisitions to send (default: many)")
    s.add_argument("--continuous", action="store_true", help="one acquisition repeating the scan forever")
    s.add_argument("--triggered", action="store_true", help="wait for CMD,STARTACQUISITION on the control port")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--data-port", type=int, default=6342)
    s.add_argument("--api-port", type=int, default=6341)
    s.set_defaults(func=cmd_live)
    r = lsub.add_parser("run", help="run built-in UDFs on the next acquisition and save an .npz")
    r.add_argument("detector", choices=("merlin",))
    r.add_argument("--udf", default="sum", help="sum, sumsig, ring or a comma-separated list (default sum)")
    r.add_argument("--nav-shape", type=_shape, default=None, help="scan shape (default: from the detector)")
    r.add_argument("--data-host", default="127.0.0.1")
    r.add_argument("--data-port", type=int, default=6342)
    r.add_argument("--api-host", default="127.0.0.1")
    r.add_argument("--api-port", type=int, default=6341)
    r.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the acquisition (default 30)")
    r.add_argument("--executor", choices=("ray", "inline"), default="ray")
    r.add_argument("--out", default="raytile-live.npz")
    r.set_defaults(func=cmd_live)


def cmd_live(args: argparse.Namespace) -> int:
    return _sim(args) if args.live_command == "sim" else _run(args)


def _frames(args: argparse.Namespace) -> tuple[np.ndarray, tuple[int, ...]]:
    if args.dataset is None:
        n = int(np.prod(args.nav_shape))
        top = {"U08": 0xFF, "U16": 0xFFF, "U32": 0xFFFFFF, "R1": 1, "R6": 0x3F, "R12": 0xFFF}.get(args.mode, 0xFFF)
        frames = np.random.default_rng(0).integers(0, top + 1, size=(n,) + tuple(args.sig_shape))
        return frames.astype(np.uint32), tuple(args.nav_shape)
    from raytile.runtime.context import Context
    from raytile.udf import AutoUDF

    ctx = Context(executor="inline")
    ds = ctx.load(args.format, path=args.dataset)
    data = ctx.run_udf(dataset=ds, udf=AutoUDF(f=lambda frame: frame))["result"].data
    return np.asarray(data).reshape((-1,) + ds.shape.sig.to_tuple()), ds.shape.nav.to_tuple()


def _sim(args: argparse.Namespace) -> int:
    from raytile.live.detectors.merlin.sim import MerlinSimulator

    frames, nav = _frames(args)
    sim = MerlinSimulator(frames, mode=args.mode, nav_shape=nav, host=args.host, data_port=args.data_port,
                          api_port=args.api_port, frame_rate=args.frame_rate, acquisitions=args.acquisitions,
                          continuous=args.continuous, triggered=args.triggered)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with sim:
        print(f"Merlin simulator: data {args.host}:{sim.data_port}, control {args.host}:{sim.api_port}, "
              f"{len(frames)} frames of {frames.shape[1]}x{frames.shape[2]} {args.mode}, nav {nav}", flush=True)
        while not stop.wait(1.0):
            pass
        print(f"sent {sim.frames_sent} frames in {sim.acquisitions_sent} acquisitions", flush=True)
    return 0


def _run(args: argparse.Namespace) -> int:
    from raytile.live.api import LiveContext
    from raytile.udf import ApplyMasksUDF, SumSigUDF, SumUDF, masks

    ctx = LiveContext(executor=args.executor)
    try:
        with ctx.make_connection("merlin").open(data_host=args.data_host, data_port=args.data_port,
                                                api_host=args.api_host, api_port=args.api_port) as conn:
            pending = conn.wait_for_acquisition(args.timeout)
            if pending is None:
                raise ConfigValidationError(f"no acquisition started within {args.timeout} s on "
                                            f"{args.data_host}:{args.data_port}")
            aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=args.nav_shape)
            h, w = aq.shape.sig.to_tuple()
            names: list[str] = []
            udfs: list[Any] = []
            for name in args.udf.split(","):
                if name == "sum":
                    udfs.append(SumUDF())
                elif name == "sumsig":
                    udfs.append(SumSigUDF())
                elif name == "ring":
                    ring = masks.ring(h / 2, w / 2, min(h, w) / 4, 0.45 * min(h, w), (h, w))
                    udfs.append(ApplyMasksUDF(mask_factories=[lambda: ring]))
                else:
                    raise ConfigValidationError(f"--udf: unknown UDF {name!r} (sum, sumsig, ring)")
                names.append(name)
            t0 = time.perf_counter()
            results = ctx.run_udf(dataset=aq, udf=udfs, progress=True)
            took = time.perf_counter() - t0
        arrays = {f"{n}_{k}": np.asarray(r[k].data) for n, r in zip(names, results) for k in r}
        np.savez(args.out, **arrays)  # type: ignore[arg-type]
        n = int(np.prod(aq.shape.nav.to_tuple()))
        print(f"{n} frames in {took:.2f} s ({n / took:,.0f} frames/s); results in {args.out}")
    finally:
        ctx.close()
    return 0
