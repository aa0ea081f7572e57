"""The ``raytile`` command line: ``raytile demo | run | info``.

``raytile demo``
    Makes (once, in a cache folder) a synthetic 4D-STEM scan of about 1 GiB,
    runs SumUDF, SumSigUDF and a ring virtual detector over it in one pass
    with a progress bar, twice, prints the start-up time and the throughput
    of the first run (fresh workers) and of the warm second run, and writes
    PNG images and an ``.npz`` of the results. The scan is
    :mod:`raytile.cli.demo`'s scene.
``raytile run``
    Runs a built-in UDF on a data set given on the command line and saves
    the results as ``.npz`` with labelled PNGs beside it (never over an
    earlier output: see :mod:`raytile.figures.outputs`).
``raytile info``
    Versions, the Ray cluster's resources (if one is running) and the known
    data set formats.
``raytile ray start | status | stop``
    A private local Ray that the commands after it share instead of each
    starting its own (:mod:`raytile.actors.ray_session`).

Bad arguments end with a one-line message and exit status 2
(:class:`~raytile.cli.args.CLIError`; the argument types are in
:mod:`raytile.cli.args`). ``python -m raytile.cli`` runs the same command.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from raytile.cli.args import CLIError, parse_floats, parse_shape, positive_float
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape
from raytile.common.errors import RaytileError

__all__ = ["main", "build_parser", "make_context", "format_lines", "BUILTIN_UDFS"]

BUILTIN_UDFS = ("sum", "sumsig", "ring")


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def make_context(executor: str, log=print, address: str | None = None, coordinator: str = "auto"):
    """A Context on ``executor``; "ray" falls back to inline if the Ray executor is not available.

    ``address`` (Ray only): a cluster to join ("auto", "host:6379", "ray://host:10001"); None: the
    shared Ray session if one runs (``raytile ray start``, :mod:`raytile.actors.ray_session`), else a
    private local Ray of this process, started beside any other Ray on the machine (never joining
    one, RAY_ADDRESS or not; see :mod:`raytile.actors.ray_start`). ``coordinator``: see ``Context``.
    """
    import raytile as rt

    if executor == "ray":
        try:
            import raytile.actors.executor  # noqa: F401
        except ImportError as e:
            log(f"note: the Ray executor is not available ({e}); running inline instead")
            executor = "inline"
    if executor == "inline":
        if address is not None:
            raise CLIError(f"--address {address} needs the Ray executor")
        return rt.Context(executor="inline", coordinator=coordinator), executor
    from raytile.actors.ray_session import command_address
    from raytile.actors.ray_start import COMMAND_INIT_KWARGS

    return rt.Context(executor="ray", address=command_address(address, say=_note), coordinator=coordinator,
                      **COMMAND_INIT_KWARGS), executor


def _note(line: str) -> None:
    """A one-line note on stderr (what the results on stdout do not include)."""
    print(line, file=sys.stderr)


def ring_geometry(sig_shape: tuple[int, ...], radii: Sequence[float] | None = None,
                  center: Sequence[float] | None = None) -> tuple[float, float, float, float]:
    """``(cy, cx, ri, ro)`` of the ring detector: by default centred, radii sig/4 and 0.45 sig."""
    if len(sig_shape) != 2:
        raise CLIError(f"the ring detector needs a 2D signal, got sig shape {tuple(sig_shape)}")
    sy, sx = sig_shape
    cy, cx = center if center else (sy / 2, sx / 2)
    ri, ro = radii if radii else (min(sy, sx) / 4, min(sy, sx) * 0.45)
    if ri > ro or ri < 0:
        raise CLIError(f"--ring-radii needs 0 <= inner <= outer, got {ri}, {ro}")
    return float(cy), float(cx), float(ri), float(ro)


def ring_udf(sig_shape: tuple[int, ...], radii: Sequence[float] | None = None,
             center: Sequence[float] | None = None):
    """A ring (annular) virtual detector: ApplyMasksUDF with one ``masks.ring`` mask."""
    from raytile.udf import ApplyMasksUDF, masks

    cy, cx, ri, ro = ring_geometry(sig_shape, radii, center)
    shape = (int(sig_shape[0]), int(sig_shape[1]))

    def ring_mask():
        return masks.ring(cy, cx, ri, ro, shape)

    return ApplyMasksUDF(mask_factories=[ring_mask])


def _udf_for(name: str, sig_shape, args):
    from raytile.udf import SumSigUDF, SumUDF

    if name == "sum":
        return SumUDF()
    if name == "sumsig":
        return SumSigUDF()
    return ring_udf(sig_shape, getattr(args, "ring_radii", None), getattr(args, "ring_center", None))


def _result_arrays(names: Sequence[str], results: Sequence[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, res in zip(names, results):
        if name == "ring":
            out[name] = np.asarray(res["intensity"].data)[..., 0]
        else:
            out[name] = np.asarray(res["intensity"].data)
    return out


def _figures(arrays: dict[str, np.ndarray], sig_shape: tuple[int, ...], frames: int, args) -> dict[str, Any]:
    """The figures of ``arrays`` (:func:`raytile.figures.result_figures`), the ring detector drawn on the sum."""
    from raytile.figures import result_figures

    rings = [ring_geometry(sig_shape, getattr(args, "ring_radii", None), getattr(args, "ring_center", None))] \
        if "ring" in arrays else []
    return result_figures(arrays, rings=rings, frames=frames)


def _fmt_throughput(nbytes: int, frames: int, seconds: float) -> str:
    seconds = max(seconds, 1e-9)
    return (f"{nbytes / 1e9:.3f} GB in {seconds:.2f} s: {nbytes / seconds / 1e9:.2f} GB/s, "
            f"{frames / seconds:,.0f} frames/s")


def _first_and_warm_run(ctx, ds, udfs, progress: bool) -> tuple[Any, float, float]:
    """Run ``udfs`` twice; ``(results of the first run, first run's seconds, second run's seconds)``.

    The first run is what a user waits for after start-up, one-time costs
    of fresh worker processes included (numba loading or compiling jitted
    code, first use of modules and memory); the second shows the steady state.
    Both are printed, so neither hides the other.
    """
    t0 = time.perf_counter()
    results = ctx.run_udf(dataset=ds, udf=udfs, progress=progress)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    ctx.run_udf(dataset=ds, udf=udfs, progress=progress)
    return results, first, time.perf_counter() - t0


# ---------------------------------------------------------------------------
# subcommands
# ---------------------------------------------------------------------------

def cmd_demo(args) -> int:
    nav_shape, sig_shape = demo_shape(args.size_gib, args.sig_size)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    path = demo_file(cache, nav_shape, sig_shape, seed=args.seed)
    print(f"data: {path}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    ctx, executor = make_context(args.executor, address=args.address, coordinator=args.coordinator)
    try:
        ds = ctx.load("raw", path=str(path), nav_shape=nav_shape, sig_shape=sig_shape, dtype="uint16")
        print(f"start-up: {time.perf_counter() - t0:.2f} s ({executor} executor and the data set, once per session)")
        names = list(BUILTIN_UDFS)
        udfs = [_udf_for(n, sig_shape, args) for n in names]
        print(f"running SumUDF, SumSigUDF and a ring detector in one pass ({executor} executor, "
              f"{ds.num_partitions} partitions), twice: the first run in fresh workers, then a warm one")
        results, first, warm = _first_and_warm_run(ctx, ds, udfs, progress=not args.no_progress)
    finally:
        ctx.close()
    nbytes = path.stat().st_size
    frames = nav_shape[0] * nav_shape[1]
    print(f"first run: {_fmt_throughput(nbytes, frames, first)} (includes one-time start-up costs)")
    print(f"warm run:  {_fmt_throughput(nbytes, frames, warm)}")

    arrays = _result_arrays(names, results)
    npz = out / "results.npz"
    np.savez(npz, **arrays)
    from raytile.figures import save_figure

    written = [npz]
    for name, fig in _figures(arrays, sig_shape, frames, args).items():
        png = out / f"{name}.png"
        save_figure(fig, png)
        written.append(png)
    print("wrote " + ", ".join(str(p) for p in written))
    print(f"again on this file: raytile run --format raw --path {path} "
          f"--nav-shape {nav_shape[0]},{nav_shape[1]} --sig-shape {sig_shape[0]},{sig_shape[1]} "
          f"--dtype uint16 --udf sum,sumsig,ring")
    return 0


def cmd_run(args) -> int:
    names = [n.strip() for n in args.udf.split(",") if n.strip()]
    bad = [n for n in names if n not in BUILTIN_UDFS]
    if not names or bad:
        raise CLIError(f"unknown --udf {', '.join(bad) or repr(args.udf)}; choose from {', '.join(BUILTIN_UDFS)}")
    if len(set(names)) != len(names):
        raise CLIError(f"--udf names a UDF twice: {args.udf}")
    kwargs: dict[str, Any] = {"path": args.path}
    if args.format == "raw":
        missing = [o for o, v in (("--nav-shape", args.nav_shape), ("--sig-shape", args.sig_shape),
                                  ("--dtype", args.dtype)) if v is None]
        if missing:
            raise CLIError(f"--format raw needs {', '.join(missing)}")
    for key in ("nav_shape", "sig_shape", "dtype"):
        value = getattr(args, key)
        if value is not None:
            kwargs[key] = value
    if args.sync_offset:
        kwargs["sync_offset"] = args.sync_offset
    ctx, executor = make_context(args.executor, address=args.address, coordinator=args.coordinator)
    try:
        ds = ctx.load(args.format, **kwargs)
        sig_shape = ds.shape.sig.to_tuple()
        udfs = [_udf_for(n, sig_shape, args) for n in names]
        t0 = time.perf_counter()
        results = ctx.run_udf(dataset=ds, udf=udfs, progress=not args.no_progress)
        dt = time.perf_counter() - t0
        nbytes = ds.shape.size * ds.dtype.itemsize
        frames = ds.shape.nav.size
    finally:
        ctx.close()
    arrays = _result_arrays(names, results)
    print(f"{', '.join(names)} on {ds!r} ({executor}): {_fmt_throughput(nbytes, frames, dt)}")
    from raytile.figures import npz_path, write_results

    written = write_results(args.out, arrays, _figures(arrays, sig_shape, frames, args))
    if written[0] != npz_path(args.out):
        print(f"note: {args.out} exists; this result goes to {written[0]} (nothing is overwritten)")
    print(f"wrote {written[0]} ({', '.join(f'{k} {v.shape}' for k, v in arrays.items())}) and "
          + ", ".join(str(p) for p in written[1:]))
    return 0


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def format_lines(names: Sequence[str]) -> list[str]:
    """One line per data set format: its name and parameters (``*`` required, ``=default`` where one is set)."""
    import inspect

    from raytile.io.dataset import DataSet
    from raytile.io.formats import get_format

    common = list(DataSet.params_schema)
    lines = []
    for name in names:
        try:
            cls = get_format(name)
        except ImportError as e:  # an optional dependency is missing
            lines.append(f"  {name:<14}(not available: {e})")
            continue
        defaults: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            init = klass.__dict__.get("__init__")
            if init is not None:
                defaults.update({p.name: p.default for p in inspect.signature(init).parameters.values()
                                 if p.default is not p.empty and p.default is not None})
        params = []
        for pname, spec in cls.get_params_schema().items():
            if pname in common:
                continue
            if spec.get("required"):
                params.append(pname + "*")
            elif pname in defaults and not isinstance(defaults[pname], (dict, list)):
                params.append(f"{pname}={defaults[pname]!r}")
            else:
                params.append(pname)
        if name == "auto":
            params.append("and the detected format's")
        lines.append(f"  {name:<14}{', '.join(params)}")
    lines.append(f"  (every format also takes {', '.join(common)})")
    return lines


def cmd_info(args) -> int:
    import raytile
    from raytile.io.formats import known_formats

    print(f"raytile {raytile.__version__}")
    print(f"python  {platform.python_version()} ({sys.executable})")
    for dist in ("numpy", "ray", "numba", "sparse", "sparseconverter", "scipy", "cupy-cuda12x", "h5py"):
        print(f"{dist:<16}{_version(dist)}")
    print(f"cpus    {os.cpu_count()}")
    print("formats (parameters; * required, =default)")
    for line in format_lines(known_formats()):
        print(line)
    try:
        import raytile.actors.executor  # noqa: F401

        print("executors inline, ray")
    except ImportError as e:
        print(f"executors inline (ray executor not importable: {e})")
    print(f"cache   {default_cache_dir()}")
    print("ray     " + _ray_status(args.address))
    return 0


def cmd_runs(args) -> int:
    """List the runs coordinator actors hold on a cluster (to attach to, or to find a detached one)."""
    import ray

    from raytile.actors.actor_host import list_runs
    from raytile.actors.ray_start import start_ray

    joined = ray.is_initialized()
    if not joined:
        try:
            start_ray(args.address or "auto", need_workers=False,
                      init_kwargs={"logging_level": logging.ERROR, "log_to_driver": False})
        except Exception as e:  # noqa: BLE001 - reported, not raised
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise CLIError(f"cannot connect to the Ray cluster at {args.address or 'auto'!r}: {first}") from None
    try:
        runs = list_runs()
    finally:
        if not joined:
            ray.shutdown()
    if not runs:
        print("no runs (only runs of Contexts with coordinator='actor' are listed)")
        return 0
    print(f"{'run id':<34}{'state':<9}{'detached':<10}{'viewers':<9}udfs")
    for r in runs:
        print(f"{r['run_id']:<34}{'over' if r['over'] else 'running':<9}{str(r['detached']):<10}"
              f"{r['viewers']:<9}{','.join(r['udfs'])}")
    return 0


def cmd_ray(args) -> int:
    """``raytile ray start | status | stop``: the Ray session successive commands share."""
    from raytile.actors import ray_session

    if args.ray_command == "start":
        session = ray_session.start_session(args.cpus, args.gpus, args.idle)
        print(f"started a shared Ray session at {session.address} (host pid {session.pid}); it stops after "
              f"{session.idle_s:g} s without a command, or on `raytile ray stop`")
        return 0
    if args.ray_command == "stop":
        stopped = ray_session.stop_session()
        print(f"stopped the shared Ray session at {stopped.address}" if stopped else "no shared Ray session runs")
        return 0
    found = ray_session.find_session(say=_note)
    if found is None:
        print("no shared Ray session runs (start one with `raytile ray start`)")
        return 1
    print(f"shared Ray session at {found.address}, host pid {found.pid}, up "
          f"{time.time() - found.started_at:.0f} s, stops after {found.idle_s:g} s idle; "
          f"file {ray_session.session_path()}")
    return 0


def _ray_status(address: str | None) -> str:
    try:
        import ray
    except ImportError:
        return "not installed"
    if not ray.is_initialized():
        addr = address or os.environ.get("RAY_ADDRESS")
        if addr is None:
            # "auto" finds a cluster started with `ray start` on this machine through this file
            if not os.path.exists(os.path.join(os.environ.get("TMPDIR", "/tmp"), "ray", "ray_current_cluster")) \
                    and not os.path.exists("/tmp/ray/ray_current_cluster"):
                return "no cluster running here (start one with `ray start --head`, or pass --address)"
            addr = "auto"
        from raytile.actors.ray_start import start_ray

        try:
            start_ray(addr, need_workers=False, init_kwargs={"logging_level": logging.ERROR, "log_to_driver": False})
        except Exception as e:  # noqa: BLE001 - any connection failure is reported, not raised
            return f"could not connect to {addr!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        try:
            return _describe_resources(ray)
        finally:
            ray.shutdown()
    return _describe_resources(ray)


def _describe_resources(ray) -> str:
    total = ray.cluster_resources()
    avail = ray.available_resources()
    keys = [k for k in ("CPU", "GPU", "memory", "object_store_memory") if k in total]
    keys += sorted(k for k in total if k not in keys and not k.startswith("node:"))
    parts = []
    for k in keys:
        t, a = total[k], avail.get(k, 0)
        if "memory" in k:
            parts.append(f"{k} {a / 2**30:.1f}/{t / 2**30:.1f} GiB free")
        else:
            parts.append(f"{k} {a:g}/{t:g} free")
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return f"cluster of {nodes} node(s): " + ", ".join(parts)


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="raytile", description="Run UDFs over large N-D detector data on Ray.")
    sub = p.add_subparsers(dest="command", metavar="{demo,run,info,runs,ray,serve,pipeline,live}")
    sub.required = True

    d = sub.add_parser("demo", help="synthetic 4D-STEM scan: sum, sumsig and a ring detector in one pass",
                       description="Create (once) a synthetic 4D-STEM raw file in the cache folder, run "
                                   "SumUDF, SumSigUDF and a ring virtual detector over it in one pass, "
                                   "twice (first run in fresh workers, then warm), print both throughputs "
                                   "and write PNGs and an .npz.")
    d.add_argument("--size-gib", type=positive_float, default=1.0, help="size of the data set (default 1)")
    d.add_argument("--sig-size", type=int, default=256, help="frame edge in pixels (default 256)")
    d.add_argument("--seed", type=int, default=0, help="random seed of the synthetic specimen")
    d.add_argument("--cache-dir", default=None,
                   help="where the data file is kept (default $RAYTILE_CACHE or ~/.cache/raytile)")
    d.add_argument("--out", default="raytile-demo-out", help="output folder (default ./raytile-demo-out)")
    _executor_args(d)
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="run a built-in UDF on a data set and save an .npz and PNGs",
                       description="Run built-in UDFs (one pass) on a data set and save the results as .npz, "
                                   "with a labelled PNG of each beside it.")
    r.add_argument("--format", default="raw", help="data set format (see `raytile info`; default raw)")
    r.add_argument("--path", required=True, help="data file")
    r.add_argument("--nav-shape", type=parse_shape, default=None, help="e.g. 64,64")
    r.add_argument("--sig-shape", type=parse_shape, default=None, help="e.g. 256,256")
    r.add_argument("--dtype", default=None, help="e.g. uint16, float32")
    r.add_argument("--sync-offset", type=int, default=0, help="frames to skip at the start of the file")
    r.add_argument("--udf", default="sum", help="sum, sumsig, ring or a comma-separated list (default sum)")
    r.add_argument("--ring-radii", type=parse_floats, default=None, metavar="RI,RO",
                   help="inner and outer ring radius in pixels (default sig/4, 0.45*sig)")
    r.add_argument("--ring-center", type=parse_floats, default=None, metavar="CY,CX",
                   help="ring centre (default the signal centre)")
    r.add_argument("--out", default="raytile-result.npz",
                   help="output .npz (default ./raytile-result.npz), PNGs beside it (<stem>-sum.png, ...); "
                        "if any exists, the first free <stem>-1, <stem>-2, ... instead: nothing is overwritten")
    _executor_args(r)
    r.set_defaults(func=cmd_run)

    i = sub.add_parser("info", help="versions, Ray cluster resources, known formats")
    i.add_argument("--address", default=None, help="Ray cluster address (default: a local one, if running)")
    i.set_defaults(func=cmd_info)

    rs = sub.add_parser("runs", help="runs on a Ray cluster that can be attached to (coordinator='actor')")
    rs.add_argument("--address", default=None, help="Ray cluster address (default: auto)")
    rs.set_defaults(func=cmd_runs)

    ry = sub.add_parser("ray", help="a Ray that successive commands share: start, status, stop")
    ry_sub = ry.add_subparsers(dest="ray_command", metavar="{start,status,stop}", required=True)
    ry_start = ry_sub.add_parser("start", help="start the shared Ray in the background")
    ry_start.add_argument("--cpus", type=int, default=None, help="its CPUs (default: this machine's)")
    ry_start.add_argument("--gpus", type=int, default=None, help="its GPUs (default: this machine's)")
    ry_start.add_argument("--idle", type=float, default=900.0,
                          help="stop it after this many seconds without a command connected (default 900)")
    ry_sub.add_parser("status", help="whether it runs, where, since when")
    ry_sub.add_parser("stop", help="stop it")
    ry.set_defaults(func=cmd_ray)

    from raytile.serve.cli import add_serve_parser  # imports no Ray Serve until `raytile serve` runs

    add_serve_parser(sub)

    from raytile.pipeline.cli import add_pipeline_parser

    add_pipeline_parser(sub)

    from raytile.live.cli import add_live_parser

    add_live_parser(sub)
    return p


def _executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", choices=("ray", "inline"), default="ray",
                   help="ray (default; falls back to inline if unavailable) or inline")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join: auto, host:6379 or ray://host:10001 (default: the shared Ray "
                        "of `raytile ray start` if it runs, else a private local Ray, started beside any other "
                        "Ray on this machine; RAY_ADDRESS is not used)")
    p.add_argument("--coordinator", choices=("auto", "driver", "actor"), default="auto",
                   help="where runs are coordinated: this process (driver) or an actor on the cluster "
                        "(default auto: actor for ray:// addresses)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _check_args(args) -> None:
    for name in ("ring_radii", "ring_center"):
        value = getattr(args, name, None)
        if value is not None and len(value) != 2:
            raise CLIError(f"--{name.replace('_', '-')} needs two numbers, got {len(value)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``raytile`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: usage message already printed
        return int(e.code or 0)
    try:
        _check_args(args)
        return int(args.func(args) or 0)
    except (CLIError, RaytileError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"raytile {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
