"""raytile on a simulated multi-node cluster: throughput and what the coordinator receives, per run.

A ``ray.cluster_utils.Cluster`` on this machine (a head with no CPUs and
``--nodes`` worker nodes of 1 CPU each, small object stores) runs SumUDF (a
sig-sized result) and SumSigUDF (a nav-sized result) over the `raytile demo`
raw file (``--size-gib``, 1 GiB by default) split into ``--partitions``
(64) partitions. For each it prints, best of ``--repeat``:

* throughput (GB/s, GB = 1e9 bytes) beside a numpy chunked sum over the same
  file in ``--nodes`` processes, measured in the same run;
* the bytes of partial results the coordinator received per run (and their
  number), against ``workers x result size``;
* the coordinator thread's CPU time per run.

The simulated nodes share this machine's cores, so throughput is a lower
bound of a real cluster's; the bytes and counts do not depend on that.
Each UDF runs with merging near the data (the workers merge their
partitions and send merged segments, runtime/segments.py) and with every
partition's result merged in the driver. The coordinator as an actor is not
built yet.

    python benchmarks/bench_cluster.py [--size-gib 1] [--nodes 3] [--partitions 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np

import raytile as rt
from raytile.cli import default_cache_dir, demo_file, demo_shape
from raytile.runtime.coordinator import Coordinator

from bench_inline import warm_page_cache  # this folder is on sys.path when run as a script
from bench_ray import _np_sum_range


class Meter:
    """Counts what the coordinator receives (result buffers) and its thread's CPU time."""

    def __init__(self, executor):
        self.bytes = 0
        self.results = 0
        self.cpu_s = 0.0
        result = executor.result

        def counting_result(handle):
            results = result(handle)
            self.results += len(results)
            self.bytes += sum(a.nbytes for res in results for bufs in res.buffers for a in bufs.values())
            return results

        executor.result = counting_result
        main = Coordinator._main
        meter = self

        def timed_main(coordinator):
            t0 = time.thread_time()
            try:
                main(coordinator)
            finally:
                meter.cpu_s += time.thread_time() - t0

        Coordinator._main = timed_main  # type: ignore[method-assign]

    def reset(self) -> None:
        self.bytes, self.results, self.cpu_s = 0, 0, 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    import ray
    from ray.cluster_utils import Cluster

    nav, sig = demo_shape(args.size_gib)
    path = demo_file(default_cache_dir(), nav, sig)
    shape = nav + sig
    nbytes = int(np.prod(shape)) * 2
    warm_page_cache(path)

    frames = int(np.prod(nav))
    bounds = np.linspace(0, frames, args.nodes + 1).astype(int)
    jobs = [(str(path), shape, int(a), int(b), 64) for a, b in zip(bounds[:-1], bounds[1:])]
    with mp.Pool(args.nodes) as pool:
        best_np = min(_timed(lambda: pool.map(_np_sum_range, jobs)) for _ in range(args.repeat))

    store = 200 * 1024 * 1024
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": store})
    for _ in range(args.nodes):
        cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    ctx = rt.Context.connect(cluster.address)
    meter = Meter(ctx.executor)
    workers = len(ctx.executor.actors)
    print(f"{args.nodes} worker nodes of 1 CPU on {os.cpu_count()} cores, {workers} workers; file {nbytes / 1e9:.2f} GB, "
          f"{args.partitions} partitions; best of {args.repeat}; GB = 1e9 bytes")
    print(f"  numpy chunked sum, {args.nodes} processes:    {nbytes / best_np / 1e9:6.2f} GB/s  ({best_np * 1e3:.0f} ms)")
    ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16", num_partitions=args.partitions)
    interval = ctx.executor.merge_interval_s
    for name, udf, result_bytes in (("SumUDF", rt.SumUDF, int(np.prod(sig)) * 4),
                                    ("SumSigUDF", rt.SumSigUDF, int(np.prod(nav)) * 4)):
        for where, merge_interval in (("near the data", interval), ("in the driver", None)):
            ctx.executor.merge_interval_s = merge_interval
            ctx.run_udf(dataset=ds, udf=udf())  # warm-up
            best = None
            for _ in range(args.repeat):
                meter.reset()
                t = _timed(lambda: ctx.run_udf(dataset=ds, udf=udf()))
                if best is None or t < best[0]:
                    best = (t, meter.bytes, meter.results, meter.cpu_s)
            t, received, count, cpu = best
            print(f"  raytile {name:<10} merging {where:<14} {nbytes / t / 1e9:6.2f} GB/s  ({t * 1e3:4.0f} ms); "
                  f"coordinator received {received / 1e6:5.2f} MB in {count:2d} results "
                  f"(workers x result = {workers * result_bytes / 1e6:.2f} MB), its CPU {cpu * 1e3:.0f} ms per run")
    ctx.close()
    ray.shutdown()
    cluster.shutdown()
    return 0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
