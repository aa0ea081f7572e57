"""Ray executor throughput and latency beside numpy baselines, in one run.

A uint16 raw file (``--size-gib``, 1 GiB by default: the `raytile demo` data
set, created in the cache folder if absent) is read once into the page
cache. Every contender runs ``--repeat`` times, the best time counts, and its
result is checked against the numpy reference:

* numpy, 1 process: float32 sums over an ``np.memmap`` in chunks of
  ``--chunk`` frames; numpy, N processes: the same over N frame ranges in a
  ``multiprocessing`` pool (N = ``--workers``, default the CPU count);
* raytile inline; raytile Ray with 1 and with N worker actors, for SumUDF,
  SumSigUDF and a ring mask (ApplyMasksUDF with ``masks.ring``);
* a memory data set of the same data on Ray with N workers (zero-copy: the
  partitions are put into the object store once, workers read views);
* time from ``run_udf_iter`` to the first partial result on a warm Context
  (median of 20), on the file and on a tiny memory data set;
* per-partition overhead: NoOpUDF over a tiny memory data set split into
  many partitions (wall time / partitions, N workers);
* the ratio Ray N workers / numpy N processes for SumUDF: after the runs
  above, ``--rounds`` (5) more rounds alternate the two, so that drift in
  the machine's speed over the run (other load, CPU frequency) hits both
  alike; the ratio takes the best time of all runs of each.

GB = 1e9 bytes. Run::

    python benchmarks/bench_ray.py [--size-gib 1] [--repeat 2] [--rounds 5] [--workers N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import raytile as rt
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape

from bench_inline import best_of, warm_page_cache  # this folder is on sys.path when run as a script


def _np_sum_range(args):
    path, shape, start, stop, chunk = args
    mm = np.memmap(path, mode="r", dtype=np.uint16, shape=shape)
    flat = mm.reshape((-1,) + shape[-2:])
    acc = np.zeros(shape[-2:], dtype=np.float32)
    for s in range(start, stop, chunk):
        acc += flat[s:min(s + chunk, stop)].sum(axis=0, dtype=np.float32)
    return acc


def ring_udf(sig):
    from raytile.udf import ApplyMasksUDF, masks  # written beside this runtime; imported lazily

    cy, cx = sig[0] / 2, sig[1] / 2
    r = min(sig) / 2
    return ApplyMasksUDF(mask_factories=[lambda: masks.ring(cy, cx, r * 0.3, r * 0.8, sig)])


def ring_reference(sumsig_like_path, shape, sig):
    from raytile.udf import masks

    cy, cx = sig[0] / 2, sig[1] / 2
    r = min(sig) / 2
    m = masks.ring(cy, cx, r * 0.3, r * 0.8, sig).reshape(-1)
    mm = np.memmap(sumsig_like_path, mode="r", dtype=np.uint16, shape=shape)
    flat = mm.reshape(-1, int(np.prod(sig)))
    out = np.empty(flat.shape[0], dtype=np.float64)
    for s in range(0, flat.shape[0], 256):
        out[s:s + 256] = flat[s:s + 256].astype(np.float32) @ m
    return out.reshape(shape[:-2])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gib", type=float, default=1.0)
    p.add_argument("--cache-dir", default=None, help="default $RAYTILE_CACHE or ~/.cache/raytile")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds for the Ray/numpy ratio (default 5)")
    p.add_argument("--chunk", type=int, default=64, help="frames per numpy chunk (default 64)")
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--skip-memory", action="store_true", help="skip the memory data set (needs RAM = 2x size)")
    args = p.parse_args(argv)
    n = max(1, args.workers)

    nav, sig = demo_shape(args.size_gib)
    path = demo_file(Path(args.cache_dir) if args.cache_dir else default_cache_dir(), nav, sig)
    shape = nav + sig
    nbytes = path.stat().st_size
    t_warm = warm_page_cache(path)
    print(f"file {path}: {nbytes / 2**30:.3f} GiB, shape {shape} uint16; warm read {nbytes / t_warm / 1e9:.2f} GB/s")
    print(f"numpy {np.__version__}, {os.cpu_count()} cpus, N = {n} workers, best of {args.repeat}, GB = 1e9 bytes")
    rows: list[tuple[str, str, float]] = []

    def row(name, what, t):
        rows.append((name, what, t))
        print(f"  {name:<34}{what:<12}{nbytes / t / 1e9:>8.2f} GB/s  ({t * 1e3:.0f} ms)", flush=True)

    frames = int(np.prod(nav))
    # -- numpy baselines -------------------------------------------------------------------------
    t_np1, ref_sum = best_of(lambda: _np_sum_range((str(path), shape, 0, frames, args.chunk)), args.repeat)
    row("numpy chunked, 1 process", "Sum", t_np1)
    bounds = np.linspace(0, frames, n + 1).astype(int)
    jobs = [(str(path), shape, int(a), int(b), args.chunk) for a, b in zip(bounds[:-1], bounds[1:])]
    pool = mp.get_context("fork").Pool(n)  # forked before Ray starts; kept for the interleaved ratio
    pool.map(_np_sum_range, jobs)  # warm the pool
    t_npn, parts = best_of(lambda: pool.map(_np_sum_range, jobs), args.repeat)
    np.testing.assert_allclose(np.sum(parts, axis=0), ref_sum, rtol=1e-5)
    row(f"numpy chunked, {n} processes", "Sum", t_npn)
    mm = np.memmap(path, mode="r", dtype=np.uint16, shape=shape)
    ref_sumsig = mm.reshape(frames, -1).sum(axis=1, dtype=np.float64).reshape(nav)
    del mm
    try:
        ref_ring = ring_reference(path, shape, sig)
    except ImportError as e:
        ref_ring = None
        print(f"  (ring mask skipped: {e})")

    def check(name, res):
        data = res["intensity"].data
        ref = {"Sum": ref_sum, "SumSig": ref_sumsig, "Ring": ref_ring}[name]
        np.testing.assert_allclose(data.reshape(ref.shape), ref, rtol=1e-4)

    def udfs():
        out = [("Sum", rt.SumUDF), ("SumSig", rt.SumSigUDF)]
        if ref_ring is not None:
            out.append(("Ring", lambda: ring_udf(sig)))
        return out

    def bench_ctx(label, ctx, which=None):
        ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16")
        for name, make in udfs():
            if which and name not in which:
                continue
            ctx.run_udf(dataset=ds, udf=make())  # warm: JIT, page cache, actors
            t, res = best_of(lambda: ctx.run_udf(dataset=ds, udf=make()), args.repeat)
            check(name, res)
            row(label, name, t)
        return ds

    # -- raytile inline ---------------------------------------------------------------------------
    bench_ctx("raytile inline", rt.Context(executor="inline"), which={"Sum"})

    # -- raytile on Ray -----------------------------------------------------------------------------
    import ray

    ray.init(address="local", num_cpus=n, include_dashboard=False, log_to_driver=False)  # never join another
    ctx1 = rt.Context(executor="ray", cpus=1)
    bench_ctx("raytile Ray, 1 worker", ctx1)
    ctx1.close()
    deadline = time.time() + 30
    while ray.available_resources().get("CPU", 0) < n and time.time() < deadline:
        time.sleep(0.1)
    ctx = rt.Context(executor="ray", cpus=n)
    ds = bench_ctx(f"raytile Ray, {n} workers", ctx)

    if not args.skip_memory:
        arr = np.fromfile(path, dtype=np.uint16).reshape(shape)
        t0 = time.perf_counter()
        mds = ctx.load("memory", data=arr)
        t_put = time.perf_counter() - t0
        ctx.run_udf(dataset=mds, udf=rt.SumUDF())
        t, res = best_of(lambda: ctx.run_udf(dataset=mds, udf=rt.SumUDF()), args.repeat)
        check("Sum", res)
        row(f"raytile Ray memory (zero-copy), {n}w", "Sum", t)
        print(f"    (object store put once at load: {t_put * 1e3:.0f} ms for {mds.num_partitions} partitions)")
        del arr

    # -- latency ------------------------------------------------------------------------------------
    def ttfr(dataset, udf_factory, reps=20):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            run = ctx.run_udf_iter(dataset=dataset, udf=udf_factory())
            it = iter(run)
            next(it)
            times.append(time.perf_counter() - t0)
            for _ in it:
                pass
        return statistics.median(times)

    tiny = np.random.default_rng(0).integers(0, 100, size=(2000, 8, 8)).astype(np.uint16)
    tds = ctx.load("memory", data=tiny, sig_dims=2, num_partitions=8)
    print()
    t_first_file = ttfr(ds, rt.SumUDF, reps=5)
    print(f"time to first partial result, warm Context, {ds.num_partitions}-partition file, SumUDF: "
          f"{t_first_file * 1e3:.1f} ms (median of 5; includes computing one {nbytes / ds.num_partitions / 2**20:.0f} MiB partition)")
    t_first = ttfr(tds, rt.SumUDF)
    print(f"time to first partial result, warm Context, tiny memory data set, SumUDF: {t_first * 1e3:.1f} ms "
          f"(median of 20; target < 50 ms)")

    parts = 1000
    ods = ctx.load("memory", data=tiny, sig_dims=2, num_partitions=parts)
    ctx.run_udf(dataset=ods, udf=rt.NoOpUDF())
    t_noop, _ = best_of(lambda: ctx.run_udf(dataset=ods, udf=rt.NoOpUDF()), args.repeat)
    print(f"per-partition overhead, NoOpUDF, {parts} tiny partitions on {n} workers: "
          f"{t_noop / parts * 1e3:.2f} ms (wall / partitions; target < 2 ms)")

    # -- summary: alternate numpy N processes and Ray N workers, best of each ---------------------------
    t_np, t_ray = [], []
    for _ in range(max(1, args.rounds)):
        t_np.append(best_of(lambda: pool.map(_np_sum_range, jobs), 1)[0])
        t_ray.append(best_of(lambda: ctx.run_udf(dataset=ds, udf=rt.SumUDF()), 1)[0])
    pool.close()
    print(f"\nalternating, best of {max(1, args.rounds)} each (numpy now shares the machine with an idle Ray):")
    row(f"numpy chunked, {n} processes", "Sum", min(t_np))
    row(f"raytile Ray, {n} workers", "Sum", min(t_ray))
    t_rayn_sum = next(t for name, what, t in rows if name == f"raytile Ray, {n} workers" and what == "Sum")
    ratio = min(t_npn, *t_np) / min(t_rayn_sum, *t_ray)
    print(f"Ray {n} workers SumUDF / numpy {n} processes, best of all {args.repeat + len(t_ray)} runs each "
          f"= {ratio:.2f} (target >= 0.8): {'OK' if ratio >= 0.8 else 'BELOW TARGET'}; "
          f"alternating rounds only = {min(t_np) / min(t_ray):.2f}")
    ctx.close()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
