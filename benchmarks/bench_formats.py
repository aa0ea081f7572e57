"""Detector formats: raytile's SumUDF on Ray against LiberTEM 0.16 and numpy, on the same files.

Every ``benchmarks/_formats_<name>.py`` module gives cases (see ``_formats_case.py``):
a file kind of about ``--size-gib`` (MIB raw 12-bit and U16 here; DECTRIS, K2IS where
their modules are present). Each file is made once in ``--dir`` and read into the page
cache, then for each case one run prints, side by side:

``numpy read``
    the file's bytes read into a reused buffer (``readinto``): the I/O roof;
``numpy sum``
    the case's own numpy reader (decoding where the format needs it) summing all
    frames: the reference result every other figure is checked against;
``raytile``
    ``SumUDF`` on a local Ray instance of ``--workers`` CPU workers (best of
    ``--repeat`` warm runs), with its ratio to LiberTEM (target >= 1.5x) and to the
    numpy read (target >= 0.8x where nothing is decoded);
``LiberTEM``
    LiberTEM 0.16's ``SumUDF`` on its Dask executor with the same number of workers;
``fresh process``
    a new process with an empty numba cache (``NUMBA_CACHE_DIR``) and a new Ray
    instance: its first run against its second (target first <= 2x warm).

GB = 1e9 bytes; the load average is printed before and after (the machine may be
shared). Run::

    python benchmarks/bench_formats.py [--size-gib 1] [--only mib_r12,mib_u16] [--repeat 3]
        [--workers 2] [--no-libertem] [--no-first-run] [--dir DIR]
"""

from __future__ import annotations

import argparse
import glob
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def load_avg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


@dataclass
class Case:
    """A case module's case, whatever form it came in (see :func:`normalise`)."""

    name: str
    files: list[str]
    nbytes: int                      # bytes of frame data (decoded), for GB/s
    raytile: tuple[str, dict]
    libertem: tuple[str, dict] | None
    numpy_sum: Callable[[], np.ndarray] | None = None   # numpy's frame sum: baseline and reference
    baseline: tuple[str, Callable[[], Any]] | None = None  # another plain read: (label, function)
    libertem_env: dict = field(default_factory=dict)
    decoded: bool = True
    notes: str = ""


def normalise(raw: Any, size: int) -> Case:
    """A :class:`Case` from a :class:`_formats_case.FormatCase` (made here, ``make(size)``), a dict
    (``name``, ``nbytes``, ``raytile``/``libertem`` as load keywords with ``format``, ``baseline``,
    ``libertem_env``, ``files``) or any object with ``name``, ``files``, ``raytile``, ``libertem``."""
    if isinstance(raw, dict):
        def split(d):
            if d is None:
                return None
            d = dict(d)
            return d.pop("format"), d
        files = list(raw.get("files") or [])
        return Case(raw["name"], files, int(raw.get("nbytes") or sum(os.path.getsize(f) for f in files)),
                    split(raw["raytile"]), split(raw.get("libertem")), raw.get("numpy_sum"),
                    raw.get("baseline"), dict(raw.get("libertem_env") or {}), bool(raw.get("decoded", True)),
                    raw.get("notes", ""))
    make = getattr(raw, "make", None)
    if callable(make):
        make(size)
    files = raw.files() if callable(raw.files) else list(raw.files)
    nbytes = int(getattr(raw, "nbytes", 0) or sum(os.path.getsize(f) for f in files))
    return Case(raw.name, files, nbytes, raw.raytile, raw.libertem, getattr(raw, "numpy_sum", None),
                getattr(raw, "baseline", None), dict(getattr(raw, "libertem_env", None) or {}),
                bool(getattr(raw, "decoded", True)), getattr(raw, "notes", ""))


def find_cases(tmpdir: str, only: set[str] | None, size_gib: float) -> list[Case]:
    """Every case of every ``_formats_*.py`` module, made (a module that cannot be imported is skipped)."""
    found = []
    for path in sorted(glob.glob(os.path.join(HERE, "_formats_*.py"))):
        mod_name = os.path.splitext(os.path.basename(path))[0]
        if mod_name == "_formats_case":
            continue
        try:
            mod = importlib.import_module(mod_name)
            takes_size = len(inspect.signature(mod.cases).parameters) > 1
            raw_cases = mod.cases(tmpdir, size_gib) if takes_size else mod.cases(tmpdir)
        except ImportError as e:
            print(f"skipping {mod_name}: {e}")
            continue
        for raw in raw_cases:
            name = raw["name"] if isinstance(raw, dict) else raw.name
            if only is None or name in only:
                t0 = time.perf_counter()
                case = normalise(raw, int(size_gib * 2**30))
                print(f"{case.name}: {case.nbytes / 1e9:.2f} GB of frames in {len(case.files)} file(s) "
                      f"(made/checked in {time.perf_counter() - t0:.1f} s)")
                found.append(case)
    return found


def read_roof(case: Case, buf: np.ndarray) -> float:
    """Seconds to read the case's files into ``buf`` chunk by chunk (page cache)."""
    t0 = time.perf_counter()
    for p in case.files:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
    return time.perf_counter() - t0


def best(fn, repeat: int):
    """``(best seconds, last result)`` of ``repeat`` calls."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def check(name: str, who: str, got, ref) -> str:
    if ref is None:
        return ""
    got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    ok = np.allclose(got, ref, rtol=1e-4, atol=1e-3 * float(np.abs(ref).max() or 1))
    return "" if ok else f"  !! {who} result differs from the reference on {name}"


def raytile_runs(cases, workers: int, repeat: int, refs: dict) -> dict:
    import raytile as rt

    out = {}
    ctx = rt.Context.make_local(cpus=workers, gpus=0)
    try:
        for case in cases:
            fmt, params = case.raytile
            ds = ctx.load(fmt, **params)
            run = lambda: ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF())["intensity"].data  # noqa: E731
            t0 = time.perf_counter()
            run()
            first = time.perf_counter() - t0
            seconds, res = best(run, repeat)
            if refs.get(case.name) is None:  # no numpy reference: LiberTEM's result is checked against this
                refs[case.name + "/raytile"] = np.asarray(res, dtype=np.float64)
            out[case.name] = (seconds, first, check(case.name, "raytile", res, refs.get(case.name)))
    finally:
        ctx.close()
        import ray

        ray.shutdown()
    return out


def libertem_runs(cases, workers: int, repeat: int, refs: dict) -> dict:
    try:
        from libertem.api import Context as LTContext
        from libertem.udf.sum import SumUDF as LTSum
    except ImportError as e:
        print(f"LiberTEM not importable ({e}); no LiberTEM figures")
        return {}
    out = {}
    for case in cases:  # environment the workers need (e.g. HDF5_PLUGIN_PATH), set before they start
        os.environ.update({k: str(v) for k, v in case.libertem_env.items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lt = LTContext.make_with("dask", cpus=workers)
        try:
            for case in cases:
                if case.libertem is None:
                    continue
                fmt, params = case.libertem
                try:
                    ds = lt.load(fmt, **params)
                except Exception as e:  # noqa: BLE001 - reported beside the figures
                    out[case.name] = (None, None, f"  LiberTEM cannot load {case.name}: {e}")
                    continue
                run = lambda: lt.run_udf(dataset=ds, udf=LTSum())["intensity"].data  # noqa: E731
                run()
                seconds, res = best(run, repeat)
                ref = refs.get(case.name)
                ref = ref if ref is not None else refs.get(case.name + "/raytile")
                out[case.name] = (seconds, None, check(case.name, "LiberTEM", res, ref))
        finally:
            lt.close()
    return out


def child_first_run(name: str, tmpdir: str, workers: int, size_gib: float) -> None:
    """In a fresh process: first and second SumUDF run of one case on a new Ray instance, as JSON."""
    import raytile as rt

    case = next(c for c in find_cases(tmpdir, {name}, size_gib))
    t0 = time.perf_counter()
    ctx = rt.Context.make_local(cpus=workers, gpus=0)
    start = time.perf_counter() - t0
    fmt, params = case.raytile
    ds = ctx.load(fmt, **params)
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        ctx.run_udf(dataset=ds, udf=rt.udf.SumUDF())
        times.append(time.perf_counter() - t0)
    ctx.close()
    print("RESULT " + json.dumps({"start": start, "first": times[0], "warm": times[1]}))


def fresh_process(name: str, tmpdir: str, workers: int, size_gib: float) -> dict | None:
    with tempfile.TemporaryDirectory(prefix="raytile-numba-") as numba_dir:
        env = dict(os.environ, NUMBA_CACHE_DIR=numba_dir)
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, "--dir", tmpdir,
                               "--workers", str(workers), "--size-gib", str(size_gib)], env=env,
                              capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    print(f"  fresh process for {name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gib", type=float, default=1.0, help="size of each file (default 1)")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "raytile-bench-formats"),
                    help="where the files are made (kept for the next run)")
    ap.add_argument("--only", default=None, help="comma-separated case names")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-libertem", action="store_true")
    ap.add_argument("--no-first-run", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.child:
        child_first_run(args.child, args.dir, args.workers, args.size_gib)
        return
    only = set(args.only.split(",")) if args.only else None
    print(f"load average before: {load_avg()}")
    cases = find_cases(args.dir, only, args.size_gib)
    if not cases:
        raise SystemExit("no cases (see benchmarks/_formats_*.py, --only)")
    buf = np.empty(16 << 20, dtype=np.uint8)
    refs: dict[str, Any] = {}
    roof: dict[str, float | None] = {}
    npy: dict[str, tuple[str, float] | None] = {}
    for case in cases:
        roof[case.name] = None
        if case.files:
            read_roof(case, buf)  # into the page cache
            roof[case.name] = best(lambda: read_roof(case, buf), args.repeat)[0]
        npy[case.name] = None
        refs[case.name] = None
        if case.numpy_sum is not None:
            seconds, refs[case.name] = best(case.numpy_sum, args.repeat)
            npy[case.name] = ("numpy sum of the frames, one thread", seconds)
        elif case.baseline is not None:
            label, fn = case.baseline
            npy[case.name] = (label, best(fn, args.repeat)[0])
    rt_res = raytile_runs(cases, args.workers, args.repeat, refs)
    lt_res = {} if args.no_libertem else libertem_runs(cases, args.workers, args.repeat, refs)
    print(f"\nSumUDF over each file in the page cache; {args.workers} workers; best of {args.repeat}; GB/s")
    for case in cases:
        gb = case.nbytes / 1e9
        print(f"\n{case.name} ({gb:.2f} GB{', ' + case.notes if case.notes else ''})")
        roof_s = roof[case.name]
        if roof_s:
            file_gb = sum(os.path.getsize(f) for f in case.files) / 1e9
            print(f"  numpy read          {file_gb / roof_s:7.2f}  ({file_gb:.2f} GB of files read into a buffer)")
        if npy[case.name]:
            label, np_s = npy[case.name]
            print(f"  numpy               {gb / np_s:7.2f}  ({label})")
        seconds, first, problem = rt_res[case.name]
        rt_gbs = gb / seconds
        lt = lt_res.get(case.name)
        vs_lt = f"{rt_gbs / (gb / lt[0]):.2f}x LiberTEM" if lt and lt[0] else "LiberTEM n/a"
        vs_np = ""
        if roof_s:  # the same bytes: a ratio of times
            vs_np = f", {roof_s / seconds:.2f}x numpy read" + ("" if case.decoded else " (target >= 0.8x)")
        print(f"  raytile (Ray)       {rt_gbs:7.2f}  {vs_lt} (target >= 1.5x){vs_np}; first run here {first:.2f} s")
        if problem:
            print(problem)
        if lt:
            print(f"  LiberTEM (Dask)     {gb / lt[0]:7.2f}" if lt[0] else lt[2])
            if lt[0] and lt[2]:
                print(lt[2])
        if not args.no_first_run:
            fr = fresh_process(case.name, args.dir, args.workers, args.size_gib)
            if fr:
                print(f"  fresh process       first {fr['first']:.2f} s, warm {fr['warm']:.2f} s: "
                      f"{fr['first'] / fr['warm']:.2f}x warm (target <= 2x); Ray start {fr['start']:.1f} s")
    print(f"\nload average after: {load_avg()}")


if __name__ == "__main__":
    main()
