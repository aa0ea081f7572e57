"""The run after a node loss (issue 24): how long the next run on the same Context takes.

A simulated cluster (``ray.cluster_utils.Cluster``: a head without CPUs and
two worker nodes of ``--cpus`` CPUs) with Ray's default system settings
(or ``--fast-detect``: the health checks and pull timeout that
tests/_cluster_scenarios.py sets). A run over a memory data set loses one
worker node mid-run (killed, not drained); printed are the run before the
loss, the run with the loss, and ``--after`` runs after it, each with the
workers the pool offered when it started and how many of them were on the
dead node.

    python benchmarks/probe_node_loss.py [--cpus 2] [--after 3] [--fast-detect]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import ray
from ray.cluster_utils import Cluster

import raytile as rt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from _cluster_scenarios import WherePidUDF, _check, _data  # noqa: E402

OBJECT_STORE = 80 * 1024 * 1024


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpus", type=int, default=2, help="CPUs per worker node (default 2: a spare one)")
    p.add_argument("--after", type=int, default=3)
    p.add_argument("--fast-detect", action="store_true")
    p.add_argument("--pull-timeout-ms", type=int, default=None, help="Ray's object_manager_pull_timeout_ms")
    p.add_argument("--delay", type=float, default=0.15, help="seconds per partition")
    p.add_argument("--workers", type=int, default=None,
                   help="a fixed number of workers (fewer than the CPUs: spare CPUs for replacements); "
                        "default one per CPU")
    args = p.parse_args(argv)
    config = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
              "object_manager_pull_timeout_ms": 1000} if args.fast_detect else {}
    if args.pull_timeout_ms is not None:
        config["object_manager_pull_timeout_ms"] = args.pull_timeout_ms
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": OBJECT_STORE, **({"_system_config": config} if config else {})})
    for _ in range(2):
        cluster.add_node(num_cpus=args.cpus, object_store_memory=OBJECT_STORE)
    cluster.wait_for_nodes()
    tests_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
    pythonpath = os.pathsep.join(p for p in (os.path.abspath(tests_dir), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    ctx = rt.Context.connect(cluster.address, max_workers=args.workers)
    try:
        while len(ctx.executor.actors) < (args.workers or 2 * args.cpus):  # type: ignore[attr-defined]
            time.sleep(0.05)
        data = _data(64)
        ds = ctx.load("memory", data=data, sig_dims=2, num_partitions=16)
        nodes = [n for n in cluster.list_all_nodes() if n is not cluster.head_node]
        slots = ctx.executor.pool.ready  # type: ignore[attr-defined]
        victim = max(nodes, key=lambda n: sum(1 for s in slots if s.node_id == n.node_id))
        print(f">> 2 worker nodes of {args.cpus} CPUs, {len(slots)} workers "
              f"({[sum(1 for s in slots if s.node_id == n.node_id) for n in nodes]} per node), "
              f"{'fast detection' if config else 'Ray defaults'}; load {os.getloadavg()[0]:.1f}", flush=True)

        def timed(what: str, event=None) -> None:
            ready = ctx.executor.pool.ready  # type: ignore[attr-defined]
            on_dead = sum(1 for s in ready if s.node_id == victim.node_id)
            t0 = time.monotonic()
            run = ctx.run_udf_iter(dataset=ds, udf=WherePidUDF(delay=args.delay))
            first = None
            last = None
            for n, part in enumerate(run):
                first = first if first is not None else time.monotonic() - t0
                last = part
                if n == 0 and event is not None:
                    event()
            took = time.monotonic() - t0
            assert last is not None
            _check(last.buffers[0], data)
            print(f">>  {what:22} {took:6.2f} s (first partial {first:5.2f} s); pool offered {len(ready)} "
                  f"workers, {on_dead} on the lost node", flush=True)

        timed("before the loss")
        timed("losing a node", lambda: cluster.remove_node(victim, allow_graceful=False))
        for i in range(args.after):
            timed(f"run {i + 1} after the loss")
    finally:
        ctx.close()
        ray.shutdown()
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
