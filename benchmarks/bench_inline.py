"""Inline-executor throughput of SumUDF and SumSigUDF beside a plain numpy pass.

A uint16 raw file (1 GiB by default, the `raytile demo` data set, created in
the cache folder if absent) is read once to bring it into the page cache;
then each contender runs ``--repeat`` times and the best time counts:

* numpy: float32 sums over an ``np.memmap`` in chunks of ``--chunk`` frames
  (``acc += chunk.sum(axis=0, dtype=np.float32)``, and for SumSig
  ``chunk.reshape(n, -1).sum(axis=1, dtype=np.float32)``);
* raytile: ``Context(executor="inline").run_udf(...)`` on the same file.

Results are checked against each other (the numpy pass is the reference).
GB = 1e9 bytes. Run::

    python benchmarks/bench_inline.py [--size-gib 1] [--repeat 3] [--profile]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import raytile as rt
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape


def warm_page_cache(path: Path, block: int = 64 * 2**20) -> float:
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(block)
        while f.readinto(buf):
            pass
    return time.perf_counter() - t0


def numpy_sum(path, shape, chunk):
    mm = np.memmap(path, mode="r", dtype=np.uint16, shape=shape)
    flat = mm.reshape((-1,) + shape[-2:])
    acc = np.zeros(shape[-2:], dtype=np.float32)
    for s in range(0, flat.shape[0], chunk):
        acc += flat[s:s + chunk].sum(axis=0, dtype=np.float32)
    return acc


def numpy_sumsig(path, shape, chunk):
    mm = np.memmap(path, mode="r", dtype=np.uint16, shape=shape)
    flat = mm.reshape((-1,) + shape[-2:])
    out = np.empty(flat.shape[0], dtype=np.float32)
    for s in range(0, flat.shape[0], chunk):
        c = flat[s:s + chunk]
        out[s:s + len(c)] = c.reshape(len(c), -1).sum(axis=1, dtype=np.float32)
    return out.reshape(shape[:-2])


def best_of(fn, repeat):
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gib", type=float, default=1.0)
    p.add_argument("--cache-dir", default=None, help="default $RAYTILE_CACHE or ~/.cache/raytile")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--chunk", type=int, default=64, help="frames per numpy chunk (default 64)")
    p.add_argument("--profile", action="store_true", help="pyinstrument profile of one SumUDF run")
    args = p.parse_args(argv)

    nav, sig = demo_shape(args.size_gib)
    path = demo_file(Path(args.cache_dir) if args.cache_dir else default_cache_dir(), nav, sig)
    shape = nav + sig
    nbytes = path.stat().st_size
    t_warm = warm_page_cache(path)
    print(f"file {path}: {nbytes / 2**30:.3f} GiB, shape {shape} uint16; "
          f"warm read {nbytes / t_warm / 1e9:.2f} GB/s")
    print(f"numpy {np.__version__}, {os.cpu_count()} cpus, best of {args.repeat}, GB = 1e9 bytes")

    ctx = rt.Context(executor="inline")
    ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16")

    rows = []
    for name, udf_cls, np_fn in (("SumUDF", rt.SumUDF, numpy_sum), ("SumSigUDF", rt.SumSigUDF, numpy_sumsig)):
        t_np, ref = best_of(lambda: np_fn(path, shape, args.chunk), args.repeat)
        t_rt, res = best_of(lambda: ctx.run_udf(dataset=ds, udf=udf_cls()), args.repeat)
        got = res["intensity"].data
        np.testing.assert_allclose(got, ref, rtol=1e-5)
        rows.append((name, t_rt, t_np))

    t_both, both = best_of(lambda: ctx.run_udf(dataset=ds, udf=[rt.SumUDF(), rt.SumSigUDF()]), args.repeat)
    print()
    print(f"{'UDF':<22}{'raytile GB/s':>14}{'numpy GB/s':>12}{'ratio':>8}")
    for name, t_rt, t_np in rows:
        print(f"{name:<22}{nbytes / t_rt / 1e9:>14.2f}{nbytes / t_np / 1e9:>12.2f}{t_np / t_rt:>8.2f}")
    t_np_both = rows[0][2] + rows[1][2]
    print(f"{'Sum+SumSig (one pass)':<22}{nbytes / t_both / 1e9:>14.2f}{nbytes / t_np_both / 1e9:>12.2f}"
          f"{t_np_both / t_both:>8.2f}   (numpy: two passes)")
    ratio = rows[0][2] / rows[0][1]
    print(f"\nSumUDF / numpy = {ratio:.2f} (target >= 0.70): {'OK' if ratio >= 0.7 else 'BELOW TARGET'}")

    if args.profile:
        # The inline executor runs tasks in the coordinator's thread, which a sampling profiler
        # started here does not see; profile the same per-task body (run_partition) directly.
        from pyinstrument import Profiler

        from raytile.runtime.part_runner import run_partition
        from raytile.runtime.plan import make_plan

        plan = make_plan(ds, [rt.SumUDF()])
        print(f"\nprofile of SumUDF's tasks: input dtype {plan.params.input_dtype}, "
              f"{plan.params.tiling_scheme}, {len(plan.tasks)} partitions")
        prof = Profiler(interval=0.0005)
        prof.start()
        for task in plan.tasks:
            run_partition(task, plan.params)
        prof.stop()
        print(prof.output_text(unicode=False, color=False))
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
