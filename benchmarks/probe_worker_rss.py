"""Worker memory over many runs on fresh 1 MiB memory data sets (issue 24, "memory data sets leak").

Each run loads a fresh 1 MiB memory data set (2 partitions), runs SumUDF
and drops it, as tests/test_run_defects.py does. Every ``--every`` runs it
prints, per worker, the RSS split the way the kernel counts it
(/proc/PID/status): ``anon`` (the worker's own heap: a leak shows here),
``shmem`` (pages of the shared object store the worker has mapped and
touched: they belong to the store, not the worker) and ``file``; and
the worker's cached params and data keys, and the object store's use.

    python benchmarks/probe_worker_rss.py [--runs 300] [--every 50]
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import time

import numpy as np

import raytile as rt


def rss(pid: int) -> dict[str, float]:
    """VmRSS and its parts, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0]) / 1024
    return out


def plasma() -> str:
    import ray
    from ray._private.internal_api import memory_summary

    text = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    m = re.search(r"Plasma memory usage (\d+) MiB, (\d+) objects", text)
    return f"{m.group(1)} MiB, {m.group(2)} objects" if m else "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    ctx = rt.Context(executor="ray", cpus=args.workers)
    rng = np.random.default_rng(9)
    print(f"{args.runs} runs on fresh 1 MiB memory data sets, {args.workers} workers; load {os.getloadavg()[0]:.1f}")
    print("runs  per worker: VmRSS = anon + shmem + file (MiB), params/data cached | object store")
    for i in range(args.runs + 1):
        if i % args.every == 0:
            gc.collect()
            ctx.load("memory", data=np.zeros((2, 2, 2, 2)))  # releases what dropped data sets shared
            time.sleep(0.5)
            cols = []
            for w in ctx.executor.workers:  # type: ignore[attr-defined]
                r = rss(w["pid"])
                cols.append(f"{r['VmRSS']:6.1f} = {r['RssAnon']:6.1f} + {r['RssShmem']:5.1f} + {r['RssFile']:5.1f}")
            import ray

            pings = ray.get([s.actor.ping.remote() for s in ctx.executor.pool.ready])  # type: ignore[attr-defined]
            cached = [(w["params_cached"], w["data_cached"]) for w in pings]
            print(f"{i:4d}  " + " | ".join(cols) + f"  cached {cached} | {plasma()}", flush=True)
        if i == args.runs:
            break
        arr = rng.integers(0, 100, size=(16, 16, 32, 32)).astype(np.uint32)
        ds = ctx.load("memory", data=arr, num_partitions=2)
        res = ctx.run_udf(dataset=ds, udf=rt.SumUDF(dtype="int64"))
        assert np.array_equal(res["intensity"].data, arr.astype(np.int64).sum(axis=(0, 1)))
        del ds, res
    ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
