"""``raytile live``: detector simulators on loopback, and a UDF run on a live acquisition.

    raytile live sim merlin --mode R12 --nav-shape 64,64 --sig-shape 256,256 --frame-rate 5000
    raytile live sim merlin --dataset scan.hdr --format mib --continuous
    raytile live sim dectris --compression bslz4 --stream-format cbor --frame-rate 2000
    raytile live sim dectris --dataset scan.npy --format npy --triggered     # waits for arm over REST
    raytile live run merlin --udf sum,ring --data-port 6342 --api-port 6341 --out live.npz
    raytile live run dectris --udf sum --data-port 9999 --api-port 8910 --out live.npz

The detectors, their default ports, simulators and options of their own are
those registered (:mod:`raytile.live.registry`); this module names none.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.io.frame_blocks import SequentialFrames

if TYPE_CHECKING:
    from raytile.live.registry import DetectorSpec, SimulatorSpec

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
    """Add ``live sim`` and ``live run`` to the ``raytile`` subcommand parsers: the common options here,
    each registered detector's own from its :class:`~raytile.live.registry.DetectorSpec`."""
    from raytile.live.registry import detector_specs

    specs = detector_specs()
    simulated = [spec for spec in specs.values() if spec.simulator is not None and spec.ports]
    runnable = [spec for spec in specs.values() if spec.ports]

    def port_help(port: str) -> str:
        return ", ".join(h for h in (spec.default_port_help(port) for spec in simulated) if h)

    p = sub.add_parser("live", help="live acquisition: a detector simulator, or a UDF run on a live stream",
                       description="Live acquisition from detectors (see docs/live.md).")
    lsub = p.add_subparsers(dest="live_command", metavar="{sim,run}")
    lsub.required = True
    s = lsub.add_parser("sim", help=f"a {' or '.join(spec.title for spec in simulated)} detector on 127.0.0.1 "
                                    "replaying synthetic frames or a data set")
    s.add_argument("detector", choices=tuple(spec.name for spec in simulated))
    s.add_argument("--nav-shape", type=_shape, default=(32, 32), help="scan shape (default 32,32)")
    s.add_argument("--sig-shape", type=_shape, default=(256, 256), help="frame shape (default 256,256)")
    s.add_argument("--dataset", default=None, help="replay this data set's frames instead of synthetic ones")
    s.add_argument("--format", default="auto", help="format of --dataset (default auto)")
    s.add_argument("--frame-rate", type=float, default=None, help="frames/s (default: as fast as possible)")
    s.add_argument("--acquisitions", type=int, default=1_000_000,
                   help="acquisitions (series) to send (default: many)")
    s.add_argument("--triggered", action="store_true",
                   help="wait for the detector's start command (e.g. Merlin's CMD,STARTACQUISITION, an arm "
                        "over REST) (default: acquisitions start by themselves)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--data-port", type=int, default=None, help=f"data port, 0 for a free one "
                   f"(default {port_help('data_port')})")
    s.add_argument("--api-port", type=int, default=None, help=f"control or REST port, 0 for a free one "
                   f"(default {port_help('api_port')})")
    _detector_arguments(s, simulated, "sim_arguments")
    s.set_defaults(func=cmd_live)
    r = lsub.add_parser("run", help="run built-in UDFs on the next acquisition and save an .npz and PNGs "
                                    "(Ctrl-C or SIGTERM mid-scan saves the partial result)")
    r.add_argument("detector", choices=tuple(spec.name for spec in runnable))
    r.add_argument("--udf", default="sum", help="sum, sumsig, ring or a comma-separated list (default sum)")
    r.add_argument("--nav-shape", type=_shape, default=None, help="scan shape (default: from the detector)")
    r.add_argument("--scans", type=int, default=1, help="scans in this run, 0: until the acquisition ends "
                   "(default 1)")
    r.add_argument("--data-host", default="127.0.0.1")
    r.add_argument("--data-port", type=int, default=None)
    r.add_argument("--api-host", default="127.0.0.1")
    r.add_argument("--api-port", type=int, default=None)
    r.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the acquisition (default 30)")
    r.add_argument("--executor", choices=("ray", "inline"), default="ray")
    r.add_argument("--out", default="raytile-live.npz",
                   help="output .npz (default ./raytile-live.npz), PNGs beside it (<stem>-sum.png, ...); if any "
                        "exists, the first free <stem>-1, <stem>-2, ... instead: nothing is overwritten")
    _detector_arguments(r, runnable, "run_arguments")
    r.set_defaults(func=cmd_live)


def _detector_arguments(parser: argparse.ArgumentParser, specs: list[DetectorSpec], which: str) -> None:
    """Each detector's own options on ``parser`` (shared by all: an option two detectors add is an error)."""
    for spec in specs:
        try:
            getattr(spec, which)(parser)
        except argparse.ArgumentError as e:
            raise ConfigValidationError(f"detector {spec.name!r}: its {which} clash with another's: {e}") from None


def _require_extra(args: argparse.Namespace, spec: DetectorSpec) -> None:
    """The modules of the live extra the detector needs (DECTRIS: ZeroMQ and the codecs of the chosen
    stream): say what to install before starting."""
    modules = spec.extra(args)
    if not modules:
        return
    from raytile.live.extra import live_module

    what = f"raytile live {args.live_command} {spec.name}"
    for name in modules:
        live_module(name, what)


def cmd_live(args: argparse.Namespace) -> int:
    from raytile.live.registry import detector_spec

    spec = detector_spec(args.detector)
    _require_extra(args, spec)
    args.data_port = spec.ports.get("data_port") if args.data_port is None else args.data_port
    args.api_port = spec.ports.get("api_port") if args.api_port is None else args.api_port
    return _sim(args, spec) if args.live_command == "sim" else _run(args, spec)


#: Bytes of synthetic frames a simulator makes (one stack): a larger scan repeats them in a cycle, so
#: memory and start-up time do not grow with the scan (a 256x256 scan of 256x256 frames: 128 frames).
SYNTHETIC_STACK_BYTES = 16 * 1024 * 1024


def _synthetic(args: argparse.Namespace, sim: SimulatorSpec, n: int) -> np.ndarray:
    """The first frames of the synthetic scan (seed 0), at most :data:`SYNTHETIC_STACK_BYTES` of them:
    the simulator sends them in a cycle. Made 16 frames at a time (the same values as in one call)."""
    sig = tuple(args.sig_shape)
    dtype = sim.frame_dtype(args)
    count = max(1, min(n, SYNTHETIC_STACK_BYTES // max(1, int(np.prod(sig)) * dtype.itemsize)))
    rng = np.random.default_rng(0)
    out = np.empty((count,) + sig, dtype)
    for start in range(0, count, 16):
        k = min(16, count - start)
        out[start:start + k] = sim.synthetic(rng, (k,) + sig, args)
    return out


def _frames(args: argparse.Namespace, sim: SimulatorSpec) -> tuple[np.ndarray | SequentialFrames, tuple[int, ...], int]:
    """The frames to replay, the scan shape and its frame count ``n``: the data set's, read as they
    are sent (bounded memory, whatever the file's size), or the first ``k`` of a synthetic scan
    (seed 0), which the simulator repeats to fill ``n``."""
    if args.dataset is None:
        n = int(np.prod(args.nav_shape))
        return _synthetic(args, sim, n), tuple(args.nav_shape), n
    from raytile.runtime.context import Context

    ds = Context(executor="inline").load(args.format, path=args.dataset)
    dtype = sim.file_dtype(ds, args.dataset) if sim.file_dtype is not None else None
    return SequentialFrames(ds, depth=64, dtype=dtype), ds.shape.nav.to_tuple(), int(ds.shape.nav.size)


def _sim(args: argparse.Namespace, spec: DetectorSpec) -> int:
    assert spec.simulator is not None  # the parser offers detectors with a simulator only
    frames, nav, n = _frames(args, spec.simulator)
    sim = spec.simulator.make(args, frames, nav, n)
    detail = spec.simulator.describe(args, np.dtype(frames.dtype))
    if isinstance(frames, SequentialFrames):
        shape, distinct = frames.sig_shape, frames.num_frames
    else:
        shape, distinct = frames.shape[1:], len(frames)
    del frames  # the simulator holds what it needs: encoded messages, or the file's reader
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with sim:
        cycle = f" ({distinct} distinct, repeated)" if distinct < n else ""
        api = "" if spec.simulator.api is None else f", {spec.simulator.api} {args.host}:{sim.api_port}"
        print(f"{spec.title} simulator: data {args.host}:{sim.data_port}{api}, {n} frames{cycle} of "
              f"{shape[0]}x{shape[1]} {detail}, nav {nav}", flush=True)
        while not stop.wait(1.0):
            pass
        print(f"sent {sim.frames_sent} frames in {sim.acquisitions_sent} acquisitions", flush=True)
    return 0


def _udfs(names: str, sig: tuple[int, ...]) -> tuple[list[str], list[Any]]:
    from raytile.udf import ApplyMasksUDF, SumSigUDF, SumUDF, masks

    h, w = sig
    out_names: list[str] = []
    udfs: list[Any] = []
    for name in names.split(","):
        if name == "sum":
            udfs.append(SumUDF())
        elif name == "sumsig":
            udfs.append(SumSigUDF())
        elif name == "ring":
            ring = masks.ring(*_ring((h, w)), (h, w))
            udfs.append(ApplyMasksUDF(mask_factories=[lambda: ring]))
        else:
            raise ConfigValidationError(f"--udf: unknown UDF {name!r} (sum, sumsig, ring)")
        out_names.append(name)
    return out_names, udfs


def _ring(sig: tuple[int, ...]) -> tuple[float, float, float, float]:
    """``(cy, cx, ri, ro)`` of the ring detector: centred, radii a quarter and 0.45 of the frame."""
    h, w = sig
    return h / 2, w / 2, min(h, w) / 4, 0.45 * min(h, w)


def _arrays(names: list[str], part: Any) -> dict[str, np.ndarray]:
    return {f"{n}_{k}": np.asarray(r[k].data) for n, r in zip(names, part.buffers) for k in r}


def _figure_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What :func:`raytile.figures.result_figures` pictures, by UDF name (the ring's one mask unpacked)."""
    out = {n: arrays[f"{n}_intensity"] for n in ("sum", "sumsig") if f"{n}_intensity" in arrays}
    if "ring_intensity" in arrays:
        out["ring"] = arrays["ring_intensity"][..., 0]
    return out


def _save(args: argparse.Namespace, names: list[str], part: Any, sig: tuple[int, ...], dropped: int,
          done: float | None) -> list[Any]:
    """Write ``part``'s buffers (``<udf>_<buffer>``), ``frames_dropped``, ``complete`` and the merged
    positions (``damage``) as an ``.npz`` with the figures beside it, never over an earlier output."""
    from raytile.figures import result_figures, write_results

    arrays = _arrays(names, part)
    damage = np.asarray(part.damage.data, dtype=bool)
    frames = int(damage.sum())
    figs = result_figures(_figure_arrays(arrays), rings=[_ring(sig)] if "ring" in names else [], frames=frames,
                          done=done)
    return write_results(args.out, dict(arrays, frames_dropped=np.array(dropped, np.int64), complete=np.array(done is None),
                                        damage=damage), figs)


class _Stopped(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is, so that a run stopped either way saves what it has."""


def _note(line: str) -> None:
    """A one-line note on stderr."""
    print(line, file=sys.stderr)


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped(signal.Signals(signum).name)


def _run(args: argparse.Namespace, spec: DetectorSpec) -> int:
    """Run the UDFs on the next acquisition and save the result; stopped by Ctrl-C or SIGTERM mid-scan, save
    the partial result merged so far (``complete`` False, ``damage`` the positions it holds) and exit 130."""
    from raytile.figures import npz_path
    from raytile.live.api import LiveContext

    previous = signal.signal(signal.SIGTERM, _raise_stopped) \
        if threading.current_thread() is threading.main_thread() else None
    quiet: dict[str, Any] = {}
    if args.executor == "ray":
        from raytile.actors.ray_session import command_address, find_session
        from raytile.actors.ray_start import COMMAND_INIT_KWARGS

        quiet = dict(COMMAND_INIT_KWARGS)
        if find_session(say=_note) is not None:  # the shared Ray of `raytile ray start`: join it
            quiet["address"] = command_address(None, say=_note)
    ctx = LiveContext(executor=args.executor, **quiet)
    run: Any = None
    aq: Any = None
    names: list[str] = []
    sig: tuple[int, ...] = ()
    try:
        params = {name: getattr(args, name) for name in (*spec.hosts, *spec.ports)}
        with ctx.make_connection(args.detector).open(**params, **spec.open_arguments(args)) as conn:
            pending = conn.wait_for_acquisition(args.timeout)
            if pending is None:
                raise ConfigValidationError(f"no acquisition started within {args.timeout} s on "
                                            f"{args.data_host}:{args.data_port}")
            aq = ctx.make_acquisition(conn=conn, pending_aq=pending, nav_shape=args.nav_shape, scans=args.scans)
            sig = aq.shape.sig.to_tuple()
            names, udfs = _udfs(args.udf, sig)
            print(f"acquisition started: nav {aq.shape.nav.to_tuple()}, sig {sig}; running {', '.join(names)} "
                  "(Ctrl-C saves what is merged so far)", flush=True)
            t0 = time.perf_counter()
            run = ctx.run_udf_iter(dataset=aq, udf=udfs, progress=True)
            for _ in run:
                pass
            took = time.perf_counter() - t0
            n, dropped = aq.stats.frames, aq.stats.frames_dropped
        written = _save(args, names, run.last, sig, dropped, None)
        print(f"{n} frames in {took:.2f} s ({n / took:,.0f} frames/s), {dropped} dropped; results in {written[0]}"
              + (f" (as {args.out} exists: nothing is overwritten)" if written[0] != npz_path(args.out) else "")
              + f", figures {', '.join(str(p) for p in written[1:])}")
        return 0
    except KeyboardInterrupt as e:
        last = getattr(run, "last", None)
        if last is None:
            print(f"stopped ({e or 'interrupted'}) before any result was merged: nothing saved", flush=True)
            return 130
        done = float(np.mean(np.asarray(last.damage.data, dtype=bool)))
        dropped = int(getattr(getattr(aq, "stats", None), "frames_dropped", 0) or 0)
        written = _save(args, names, last, sig, dropped, done)
        print(f"stopped ({e or 'interrupted'}) mid-scan: the partial result ({100 * done:.0f} % of the scan) is in "
              f"{written[0]}, figures {', '.join(str(p) for p in written[1:])}", flush=True)
        return 130
    finally:
        ctx.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
