"""First run against warm run of the demo's analysis, as on a fresh install.

Every trial is a new ``raytile demo`` process (a new Ray instance, new worker
processes) whose ``NUMBA_CACHE_DIR`` is a new empty folder, so no compiled
numba code is on disk: what a user meets right after ``pip install``. The
demo runs SumUDF, SumSigUDF and a ring mask in one pass twice and prints
the start-up time, the first run and the warm second run; this script
collects them over ``--trials`` and prints best and median side by side,
with the ratio first/warm of each trial. The data file (the demo's, made
once in the cache folder) is read into the page cache first, so both runs
read from memory.

``--breakdown`` adds where one process's first run goes: a new process with
an empty numba cache, the inline executor (the same code a Ray worker runs
per partition) and one BLAS/OpenMP thread (as a worker of one CPU) times importing numba, importing raytile, loading the
data set, the first and the warm run, and counts numba's compilations
(``numba:compile`` events; the outermost ones only, so nested compiles are
not counted twice).

``--startup`` measures what comes before any analysis, each in a new
process: Ray's own start (``ray.init`` of a private local instance), a
Context's start (Ray plus the worker actors, ready to take a run), the same
Context's first small run done (SumUDF over 8x8 frames of 16x16 in memory,
checked against numpy: a Context that returns before its workers started
must not just move the wait into the first run), and ``raytile
serve``'s time from the command to its first accepted request (``GET
/v1/healthz`` answering 200), over ``--trials``.

The machine's load average is printed before and after: on a shared machine
other processes' work shows up in every figure. GB = 1e9 bytes. Run::

    python benchmarks/bench_first_run.py [--size-gib 1] [--trials 3] [--executor ray] [--breakdown]
    python benchmarks/bench_first_run.py --startup [--trials 3] [--no-serve]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FIGURE = re.compile(r"^(first run|warm run): +[\d.]+ GB in ([\d.]+) s", re.M)
START_UP = re.compile(r"^start-up: ([\d.]+) s", re.M)
#: One native thread each, as in a Ray worker actor of one CPU.
ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def load_avg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def demo_trial(size_gib: float, cache: Path, executor: str) -> dict[str, float]:
    """One ``raytile demo`` in a new process with an empty numba cache: its start-up, first and warm run."""
    with tempfile.TemporaryDirectory(prefix="raytile-numba-") as numba_dir, \
            tempfile.TemporaryDirectory(prefix="raytile-demo-out-") as out:
        env = dict(os.environ, NUMBA_CACHE_DIR=numba_dir)
        cmd = [sys.executable, "-m", "raytile.cli", "demo", "--size-gib", str(size_gib), "--cache-dir", str(cache),
               "--out", out, "--executor", executor, "--no-progress"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"raytile demo failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    figures = {label: float(seconds) for label, seconds in FIGURE.findall(proc.stdout)}
    figures["start-up"] = float(START_UP.search(proc.stdout).group(1))
    return figures


RAY_START = """
import time
t0 = time.perf_counter()
import ray
ray.init(address="local", include_dashboard=False, logging_level="ERROR")
print("SECONDS", time.perf_counter() - t0, flush=True)
"""

CONTEXT_START = """
import time
t0 = time.perf_counter()
import numpy as np
import raytile as rt
from raytile.udf.sum import SumUDF
ctx = rt.Context.make_local()
assert ctx.num_workers >= 1
print("SECONDS", time.perf_counter() - t0, flush=True)
data = np.arange(8 * 8 * 16 * 16, dtype=np.float32).reshape(8, 8, 16, 16)
res = ctx.run_udf(dataset=ctx.load("memory", data=data), udf=SumUDF())
assert np.allclose(np.asarray(res["intensity"]), data.sum(axis=(0, 1)))
print("FIRST_RUN", time.perf_counter() - t0, flush=True)
"""


def _timed_script(script: str, label: str = "SECONDS") -> float:
    return _timed_figures(script)[label]


def _timed_figures(script: str) -> dict[str, float]:
    """Run ``script`` in a new process; the figures it printed as ``LABEL seconds`` lines."""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise SystemExit(f"start-up probe failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^([A-Z_]+) ([\d.]+)$", proc.stdout, re.M)}


def serve_trial(timeout: float = 180.0) -> tuple[float, float]:
    """Seconds from starting ``raytile serve`` (a new process) to its first answered ``GET /v1/healthz``,
    and to the end of its first run (SumUDF on a 16x16x32x32 .npy, POST then the whole NDJSON stream)."""
    import signal
    import socket
    import urllib.request

    import numpy as np

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="raytile-serve-") as root:
        np.save(os.path.join(root, "scan.npy"), np.ones((16, 16, 32, 32), np.float32))
        cmd = [sys.executable, "-m", "raytile.cli", "serve", "--data-root", root, "--port", str(port)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"raytile serve exited ({proc.returncode}): {proc.stderr.read()[-3000:]!r}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/healthz", timeout=1) as r:
                        if r.status == 200:
                            health = time.perf_counter() - t0
                            break
                except OSError:
                    pass
                if time.perf_counter() - t0 > timeout:
                    raise SystemExit(f"raytile serve answered nothing within {timeout} s")
                time.sleep(0.05)
            body = json.dumps({"dataset": {"format": "npy", "params": {"path": "scan.npy"}},
                               "udfs": [{"name": "sum"}]}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/runs", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=timeout) as r:
                run_id = json.loads(r.read())["run_id"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/runs/{run_id}/stream", timeout=timeout) as r:
                last = json.loads([ln for ln in r.read().splitlines() if ln.strip()][-1])
            if last.get("status") != "finished":
                raise SystemExit(f"the first run over HTTP ended {last.get('status')}: {last.get('error')}")
            return health, time.perf_counter() - t0
        finally:
            proc.send_signal(signal.SIGTERM)  # it shuts Serve and its own Ray down
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def startup(trials: int, serve: bool = True) -> None:
    """Each trial a new process: ``ray.init`` alone and a Context ready, interleaved (so that a change
    of the machine's load hits both), then ``raytile serve``; the Context's excess over ``ray.init``
    per trial is printed too (target: at most 1 s)."""
    print(f"start-up, each a new process; {trials} trials; load average before: {load_avg()}")
    ray_init: list[float] = []
    context: list[float] = []
    first_run: list[float] = []
    for _ in range(trials):
        ray_init.append(_timed_script(RAY_START))
        figures = _timed_figures(CONTEXT_START)
        context.append(figures["SECONDS"])
        first_run.append(figures["FIRST_RUN"])
    rows = {"ray.init (local)": ray_init, "Context ready": context,
            "Context - ray.init": [c - r for c, r in zip(context, ray_init)],
            "Context + 1st run": first_run}
    if serve:
        served = [serve_trial() for _ in range(trials)]
        rows.update({"serve: 1st request": [h for h, _ in served], "serve: 1st run done": [r for _, r in served]})
    print(f"load average after:  {load_avg()}")
    print(f"{'':<20}{'best':>10}{'median':>10}   all")
    for label, values in rows.items():
        print(f"{label:<20}{min(values):>8.2f} s{statistics.median(values):>8.2f} s   "
              + " ".join(f"{v:.2f}" for v in values))


class OuterCompiles:
    """Listens to numba's compile events; counts and times the outermost compilation of each thread."""

    def __init__(self):
        import numba.core.event as ev

        self.count = 0
        self.seconds = 0.0
        self._local = threading.local()
        listener = self

        class _Listener(ev.Listener):
            def on_start(self, event):
                depth = getattr(listener._local, "depth", 0)
                if depth == 0:
                    listener._local.t0 = time.perf_counter()
                listener._local.depth = depth + 1

            def on_end(self, event):
                listener._local.depth -= 1
                if listener._local.depth == 0:
                    listener.count += 1
                    listener.seconds += time.perf_counter() - listener._local.t0

        ev.register("numba:compile", _Listener())


def probe(path: str, nav_shape: tuple[int, int], sig_shape: tuple[int, int]) -> dict[str, float]:
    """In this (new) process: the first-run breakdown of the demo's analysis on the inline executor."""
    t0 = time.perf_counter()
    import numba  # noqa: F401  (imported by sparse anyway; timed on its own)

    out = {"import numba": time.perf_counter() - t0}
    compiles = OuterCompiles()
    t0 = time.perf_counter()
    import raytile as rt
    from raytile.cli import BUILTIN_UDFS, _udf_for
    from raytile.runtime import part_runner  # noqa: F401  (what a worker imports at start)

    out["import raytile"] = time.perf_counter() - t0
    ctx = rt.Context(executor="inline")
    t0 = time.perf_counter()
    ds = ctx.load("raw", path=path, nav_shape=nav_shape, sig_shape=sig_shape, dtype="uint16")
    out["load"] = time.perf_counter() - t0
    out["numba compiles in load"] = compiles.count
    udfs = [_udf_for(n, sig_shape, None) for n in BUILTIN_UDFS]
    for label in ("first run", "warm run"):
        t0 = time.perf_counter()
        ctx.run_udf(dataset=ds, udf=udfs)
        out[label] = time.perf_counter() - t0
    out["numba compiles"] = compiles.count
    out["numba compile s"] = compiles.seconds
    return out


def breakdown(path: Path, nav_shape, sig_shape) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="raytile-numba-") as numba_dir:
        env = dict(os.environ, NUMBA_CACHE_DIR=numba_dir, **{v: "1" for v in ONE_THREAD})
        cmd = [sys.executable, __file__, "--probe", str(path), ",".join(map(str, nav_shape)),
               ",".join(map(str, sig_shape))]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"probe failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-gib", type=float, default=1.0)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--executor", choices=("ray", "inline"), default="ray")
    p.add_argument("--breakdown", action="store_true", help="also the per-process first-run breakdown")
    p.add_argument("--cache-dir", default=None, help="where the demo file is kept (default: the demo's)")
    p.add_argument("--startup", action="store_true", help="only Ray's, a Context's and raytile serve's start-up")
    p.add_argument("--no-serve", action="store_true", help="--startup without raytile serve")
    p.add_argument("--probe", nargs=3, metavar=("PATH", "NAV", "SIG"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        path, nav, sig = args.probe
        print(json.dumps(probe(path, tuple(map(int, nav.split(","))), tuple(map(int, sig.split(","))))))
        return 0

    if args.startup:
        startup(args.trials, serve=not args.no_serve)
        return 0

    # imported here, not at the top: the --probe process times its own imports
    from raytile.cli.demo import default_cache_dir, demo_file, demo_shape

    from bench_inline import warm_page_cache  # this folder is on sys.path when run as a script

    nav_shape, sig_shape = demo_shape(args.size_gib)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    path = demo_file(cache, nav_shape, sig_shape)
    gb = path.stat().st_size / 1e9
    warm_page_cache(path)
    print(f"demo analysis (SumUDF + SumSigUDF + ring, one pass) on {gb:.3f} GB, {args.executor} executor; "
          f"{args.trials} trials, each a new process with an empty NUMBA_CACHE_DIR")
    print(f"load average before: {load_avg()}")
    trials = [demo_trial(args.size_gib, cache, args.executor) for _ in range(args.trials)]
    print(f"load average after:  {load_avg()}")
    print(f"{'':<12}{'best':>22}{'median':>22}   all")
    for label in ("start-up", "first run", "warm run"):
        values = [t[label] for t in trials]
        rate = "" if label == "start-up" else " ({:.2f} GB/s)"
        best, med = min(values), statistics.median(values)
        cells = [f"{v:.2f} s" + (rate.format(gb / v) if rate and v > 0 else "") for v in (best, med)]
        print(f"{label:<12}{cells[0]:>22}{cells[1]:>22}   " + " ".join(f"{v:.2f}" for v in values))
    ratios = [t["first run"] / t["warm run"] for t in trials]
    print(f"{'first/warm':<12}{min(ratios):>21.2f}x{statistics.median(ratios):>21.2f}x   "
          + " ".join(f"{r:.2f}" for r in ratios))
    if args.breakdown:
        print(f"\none process, inline executor, empty numba cache (load average before: {load_avg()}):")
        b = breakdown(path, nav_shape, sig_shape)
        for key, value in b.items():
            print(f"  {key:<24}{value:.3f}" + (" s" if isinstance(value, float) and "compiles" not in key else ""))
        print(f"  load average after: {load_avg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
