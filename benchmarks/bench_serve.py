"""The serve app over HTTP beside the same runs in-process, in one run.

On the 1 GiB `raytile demo` file (made in the cache folder if absent), with
a local Ray of ``--workers`` CPUs (default the CPU count), the Serve app on
127.0.0.1 and an in-process Context with as many workers:

* throughput: SumUDF + SumSigUDF + a ring (ApplyMasksUDF) in one pass,
  ``ctx.run_udf`` in-process vs ``POST /v1/runs`` + the NDJSON stream read
  to its final message (buffers inline, base64 .npy), and vs one request
  (``POST /v1/runs?stream=true``), best of ``--repeat``; results checked equal;
* time to the first partial result: ``run_udf_iter`` to its first result
  in-process vs sending ``POST /v1/runs`` to the first stream message
  received (two requests, and one), median of ``--latency-runs``;
* request overhead for a tiny run (a 4x4 scan of 16x16 frames, SumSigUDF):
  ``ctx.run_udf`` vs POST + stream, and ``GET /v1/healthz`` alone (Serve's
  HTTP path), medians.

Targets (issue 11): HTTP >= 0.9x in-process throughput; first partial over
HTTP within 15 ms of in-process. Published for scale: Ray Serve HTTP p50
about 2-3 ms a request. GB = 1e9 bytes. Run::

    python benchmarks/bench_serve.py [--size-gib 1] [--repeat 3] [--latency-runs 9] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import raytile as rt
from raytile.cli.demo import default_cache_dir, demo_file, demo_shape
from raytile.serve.encoding import decode_npy
from raytile.udf import ApplyMasksUDF, SumSigUDF, SumUDF, masks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


POST_TIMES: list[float] = []


def _stream(client, body: dict, one_request: bool = False) -> tuple[float, float, dict]:
    """POST a run and read its stream (``one_request``: ``POST ?stream=true``): (seconds to the first
    message, to the final one, the final message)."""
    t0 = time.perf_counter()
    if one_request:
        request = client.build_request("POST", "/v1/runs", params={"stream": "true"}, json=body)
    else:
        r = client.post("/v1/runs", json=body)
        r.raise_for_status()
        POST_TIMES.append(time.perf_counter() - t0)
        request = client.build_request("GET", f"/v1/runs/{r.json()['run_id']}/stream")
    first = None
    last: dict = {}
    resp = client.send(request, stream=True)
    try:
        for line in resp.iter_lines():
            if not line:
                continue
            if first is None:
                first = time.perf_counter() - t0
            last = json.loads(line)
    finally:
        resp.close()
    if not resp.is_success:
        raise RuntimeError(f"{resp.status_code}: {last}")
    return first or 0.0, time.perf_counter() - t0, last


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-gib", type=float, default=1.0)
    p.add_argument("--cache-dir", default=None, help="default $RAYTILE_CACHE or ~/.cache/raytile")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--latency-runs", type=int, default=9)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    args = p.parse_args(argv)
    n = max(1, args.workers)

    import httpx
    import ray
    from ray import serve

    from raytile.serve import build_app

    nav, sig = demo_shape(args.size_gib)
    path = demo_file(Path(args.cache_dir) if args.cache_dir else default_cache_dir(), nav, sig)
    nbytes = path.stat().st_size
    tiny_root = tempfile.mkdtemp(prefix="bench-serve-")
    tiny = np.random.default_rng(0).random((4, 4, 16, 16), dtype=np.float32)
    np.save(os.path.join(tiny_root, "tiny.npy"), tiny)

    ray.init(address="local", num_cpus=n, include_dashboard=False, log_to_driver=False)
    ctx = rt.Context.make_local(cpus=n)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"log_level": "WARNING"})
    serve.run(build_app([str(path.parent), tiny_root], max_rate_hz=10.0, workers=n), name="raytile",
              route_prefix="/")
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
    print(f"file {path}: {nbytes / 2**30:.3f} GiB, nav {nav}, sig {sig} uint16; {n} workers in-process and in "
          f"the replica; {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; GB = 1e9 bytes")

    cy, cx, ri, ro = (sig[0] - 1) / 2, (sig[1] - 1) / 2, min(sig) * 0.15, min(sig) * 0.4
    ds = ctx.load("raw", path=str(path), nav_shape=nav, sig_shape=sig, dtype="uint16")
    udfs = [SumUDF(), SumSigUDF(), ApplyMasksUDF(mask_factories=[lambda: masks.ring(cy, cx, ri, ro, sig)])]
    body = {"dataset": {"format": "raw", "params": {"path": path.name, "nav_shape": list(nav),
                                                    "sig_shape": list(sig), "dtype": "uint16"}},
            "udfs": [{"name": "sum"}, {"name": "sumsig"},
                     {"name": "masks", "params": {"masks": [{"shape": "ring", "cy": cy, "cx": cx, "ri": ri, "ro": ro}]}}]}

    # warm-up: page cache, workers' first runs, the replica's first run
    ref = ctx.run_udf(dataset=ds, udf=udfs)
    _stream(client, body)

    t_local, t_http, t_one, last = [], [], [], {}
    for _ in range(args.repeat):  # alternate, so drift in the machine's speed hits all alike
        t0 = time.perf_counter()
        ref = ctx.run_udf(dataset=ds, udf=udfs)
        t_local.append(time.perf_counter() - t0)
        _, t, last = _stream(client, body)
        t_http.append(t)
        _, t, last1 = _stream(client, body, one_request=True)
        t_one.append(t)
    assert last["status"] == "finished" and last1["status"] == "finished", (last, last1)
    for i, name in enumerate(["intensity", "intensity", "intensity"]):
        got = decode_npy(last["buffers"][i]["buffers"][name]["npy"])
        np.testing.assert_allclose(got, ref[i][name].data, rtol=1e-5)
    gbs_local, gbs_http = nbytes / min(t_local) / 1e9, nbytes / min(t_http) / 1e9
    gbs_one = nbytes / min(t_one) / 1e9

    first_local, first_http, first_one = [], [], []
    POST_TIMES.clear()
    for _ in range(args.latency_runs):
        t0 = time.perf_counter()
        run = ctx.run_udf_iter(dataset=ds, udf=udfs)
        for _part in run:
            first_local.append(time.perf_counter() - t0)
            break  # leaving the loop cancels the run
        f, _, _ = _stream(client, dict(body, udfs=body["udfs"][1:2]))  # sumsig: small messages
        first_http.append(f)
        f, _, _ = _stream(client, dict(body, udfs=body["udfs"][1:2]), one_request=True)
        first_one.append(f)

    post_first = list(POST_TIMES)
    tiny_ds = ctx.load("npy", path=os.path.join(tiny_root, "tiny.npy"))
    tiny_body = {"dataset": {"format": "npy", "params": {"path": "tiny.npy"}}, "udfs": [{"name": "sumsig"}]}
    tiny_local, tiny_http, health = [], [], []
    for _ in range(max(20, args.latency_runs)):
        t0 = time.perf_counter()
        ctx.run_udf(dataset=tiny_ds, udf=SumSigUDF())
        tiny_local.append(time.perf_counter() - t0)
        tiny_http.append(_stream(client, tiny_body)[1])
        t0 = time.perf_counter()
        client.get("/v1/healthz").raise_for_status()
        health.append(time.perf_counter() - t0)

    med = statistics.median
    ms = 1e3
    print(f"\n{'':44} {'in-process':>12} {'HTTP':>12} {'HTTP/in-process':>16}")
    print(f"{'throughput, sum+sumsig+ring (best)':44} {gbs_local:>9.2f} GB/s {gbs_http:>7.2f} GB/s "
          f"{gbs_http / gbs_local:>15.2f}x   (target >= 0.9x)")
    print(f"{'  one request (POST ?stream=true)':44} {'':>12} {gbs_one:>7.2f} GB/s {gbs_one / gbs_local:>15.2f}x")
    print(f"{'  time of the 1 GiB run (best)':44} {min(t_local):>10.3f} s {min(t_http):>10.3f} s")
    print(f"{'first partial result (median)':44} {med(first_local) * ms:>9.1f} ms {med(first_http) * ms:>9.1f} ms "
          f"{(med(first_http) - med(first_local)) * ms:>+13.1f} ms   (target within 15 ms)")
    print(f"{'  one request (POST ?stream=true)':44} {'':>12} {med(first_one) * ms:>9.1f} ms "
          f"{(med(first_one) - med(first_local)) * ms:>+13.1f} ms")
    print(f"{'  of which POST /v1/runs returning (median)':44} {'':>12} {med(post_first) * ms:>9.1f} ms")
    print(f"{'tiny run, 4x4x16x16 sumsig (median)':44} {med(tiny_local) * ms:>9.1f} ms {med(tiny_http) * ms:>9.1f} ms "
          f"{(med(tiny_http) - med(tiny_local)) * ms:>+13.1f} ms   (request overhead)")
    print(f"{'GET /v1/healthz (median, p90)':44} {'':>12} {med(health) * ms:>9.2f} ms "
          f"{sorted(health)[int(0.9 * len(health))] * ms:>13.2f} ms   (Ray Serve p50 ~2-3 ms published)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")

    client.close()
    serve.shutdown()
    ctx.close()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
