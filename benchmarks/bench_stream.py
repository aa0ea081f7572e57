"""Stream data set throughput beside the same frames as a memory data set, in one run.

A generator yields 256x256 uint16 frames (``--nav`` x ``--nav`` per scan,
batches of ``--batch`` frames) as fast as it can into SumUDF + a ring mask
(ApplyMasksUDF with ``masks.ring``) on Ray with ``--workers`` workers; the
same frames as a memory data set (put into the object store at load, not
timed, and again with its load timed, as both then start from arrays in
this process) run with the same UDFs on the same Context, in alternating order
from round to round. All are checked against numpy; the best of ``--repeat``
runs counts, and the medians are printed beside. Also printed: the time from
``run_udf_iter`` to the first partial result of a stream, and the most
partitions in flight (the stream's memory bound).

Target (issue 24): stream >= 0.8x the memory data set. GB = 1e9 bytes. Run::

    python benchmarks/bench_stream.py [--nav 64] [--batch 32] [--repeat 3] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import raytile as rt
from raytile.udf import masks
from raytile.udf.applymasks import ApplyMasksUDF

SIG = (256, 256)


def ring() -> np.ndarray:
    return masks.ring(128, 128, 40, 90, SIG)


def udfs() -> list:
    return [rt.SumUDF(), ApplyMasksUDF(mask_factories=[ring])]


def check(res: list, frames: np.ndarray) -> None:
    expect = frames.sum(axis=0, dtype=np.float64)
    np.testing.assert_allclose(res[0]["intensity"].data, expect, rtol=1e-5)
    got = res[1]["intensity"].data.reshape(-1)
    np.testing.assert_allclose(got, (frames.astype(np.float32) * ring()).sum(axis=(1, 2)), rtol=1e-4)


def generator(frames: np.ndarray, batch: int):
    for i in range(0, len(frames), batch):
        yield frames[i:i + batch]  # views: the frames are never refilled


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nav", type=int, default=64, help="scan of nav x nav frames (default 64)")
    p.add_argument("--batch", type=int, default=32, help="frames per batch the generator yields (default 32)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    args = p.parse_args(argv)

    nav = (args.nav, args.nav)
    n = args.nav * args.nav
    frames = np.random.default_rng(0).integers(0, 4000, size=(n,) + SIG).astype(np.uint16)
    nbytes = frames.nbytes
    ctx = rt.Context(executor="ray", cpus=args.workers)
    print(f"{n} frames of {SIG} uint16 ({nbytes / 1e9:.2f} GB), batches of {args.batch}, "
          f"{args.workers} workers, best of {args.repeat}; load {os.getloadavg()[0]:.1f}")

    ds_mem = ctx.load("memory", data=frames.reshape(nav + SIG))
    check(ctx.run_udf(dataset=ds_mem, udf=udfs()), frames)  # warm-up
    t_mem, t_load, t_stream, t_iter, firsts = [], [], [], [], []
    stats: dict = {}

    def memory_load_and_run() -> None:
        t0 = time.perf_counter()
        res = ctx.run_udf(dataset=ctx.load("memory", data=frames.reshape(nav + SIG)), udf=udfs())
        t_load.append(time.perf_counter() - t0)
        check(res, frames)

    def memory_run() -> None:
        t0 = time.perf_counter()
        res = ctx.run_udf(dataset=ds_mem, udf=udfs())
        t_mem.append(time.perf_counter() - t0)
        check(res, frames)

    def stream_run() -> None:
        t0 = time.perf_counter()
        ds = ctx.load("stream", frames=generator(frames, args.batch), nav_shape=nav, sig_shape=SIG, dtype="uint16")
        res = ctx.run_udf(dataset=ds, udf=udfs())
        t_stream.append(time.perf_counter() - t0)
        check(res, frames)
        stats["partitions"] = f"{ds.num_partitions} partitions of {ds.frames_per_partition}"

    def stream_iter() -> None:
        t0 = time.perf_counter()  # the same with partial results: the time to the first one
        ds = ctx.load("stream", frames=generator(frames, args.batch), nav_shape=nav, sig_shape=SIG, dtype="uint16")
        run = ctx.run_udf_iter(dataset=ds, udf=udfs())
        first = part = None
        for part in run:
            if first is None:
                first = time.perf_counter() - t0
        t_iter.append(time.perf_counter() - t0)
        firsts.append(first)
        assert part is not None
        check(list(part.buffers), frames)
        stats["in_flight"] = max(stats.get("in_flight", 0), (run.stats or {}).get("stream_max_in_flight", 0))
        stats["capacity"] = (run.stats or {}).get("stream_capacity")

    # memory first in even rounds, the stream first in odd ones: whichever runs right after the memory
    # data set's load shares the machine with the object store freeing the previous copy
    order = [memory_load_and_run, memory_run, stream_run, stream_iter]
    for r in range(args.repeat):
        for step in (order if r % 2 == 0 else order[2:] + order[:2]):
            step()

    def line(name: str, t: float) -> None:
        print(f"  {name:34} {n / t:10.0f} frames/s {nbytes / t / 1e9:6.2f} GB/s  ({t * 1e3:.0f} ms)")

    line("memory data set, load + run", min(t_load))
    line("memory data set, run (loaded)", min(t_mem))
    line(f"stream, {stats['partitions']}", min(t_stream))
    line("stream, iterating partial results", min(t_iter))
    ratio, ratio_run = min(t_load) / min(t_stream), min(t_mem) / min(t_stream)
    print(f"stream / memory (load + run: both start from arrays in this process) = {ratio:.2f} "
          f"(target >= 0.8): {'ok' if ratio >= 0.8 else 'BELOW TARGET'}; stream / memory run alone "
          f"(its frames in the object store before the clock starts) = {ratio_run:.2f}")
    med = statistics.median(t_load) / statistics.median(t_stream)
    print(f"medians of the {args.repeat} runs: memory load + run {statistics.median(t_load) * 1e3:.0f} ms, stream "
          f"{statistics.median(t_stream) * 1e3:.0f} ms, stream / memory = {med:.2f}")
    print(f"first partial result of a stream: {statistics.median(firsts) * 1e3:.1f} ms (median); "
          f"most partitions in flight: {stats['in_flight']} (bound {stats['capacity']})")
    ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
