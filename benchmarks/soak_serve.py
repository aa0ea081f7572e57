"""Soak of ``raytile serve``: clients run analyses for ``--minutes``; every process's memory start/end.

Starts ``raytile serve`` as a user does (a process of its own, with its own
local Ray: GCS, raylet, Serve's controller and proxy, the replica, the
worker actors) on a data root holding one .npy scan, then ``--clients``
threads each start a run and read its stream in one request
(``POST /v1/runs?stream=true``), check the final result against numpy
(exact: integer data summed in float64), and start the next. Every
``--every`` seconds it samples the RSS of each process of the server's tree.

Printed at the end, per process: RSS after the warm-up (the first sample
after ``--warmup`` s), at the end, and the slope over the second half of the
soak (MiB/min; flat is what a service that runs for days needs). Also runs,
errors and the median latency of the first and the last tenth of the runs.

    python benchmarks/soak_serve.py --minutes 60 [--clients 4] [--partitions 64] [--every 30]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psutil

TOKEN = "soak"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def label(p: psutil.Process) -> str:
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return "?"
    head = cmd[0] if cmd else p.name()
    if head.startswith("ray::"):
        return head.split(".")[0]  # ray::WorkerActor, ray::ServeReplica:raytile:RaytileServer, ...
    for word in ("gcs_server", "raylet", "log_monitor", "monitor.py", "dashboard", "runtime_env"):
        if any(word in c for c in cmd[:3]):
            return word
    return os.path.basename(head)[:30]


def sample(root: psutil.Process) -> dict[int, tuple[str, float]]:
    """pid -> (label, RSS MiB) of ``root`` and its descendants."""
    out = {}
    for p in [root] + root.children(recursive=True):
        try:
            out[p.pid] = (label(p), p.memory_info().rss / 2**20)
        except psutil.Error:
            pass
    return out


def client_loop(url: str, body: dict, expect: np.ndarray, stop: threading.Event, stats: dict, lock) -> None:
    import httpx

    from raytile.serve.encoding import decode_npy

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                with c.stream("POST", "/v1/runs", params={"stream": "true"}, json=body) as r:
                    if r.status_code == 429:
                        time.sleep(float(r.headers.get("retry-after", "1")))
                        continue
                    last = None
                    for line in r.iter_lines():
                        if line:
                            last = line
                msg = json.loads(last) if last else {}
                ok = msg.get("status") == "finished" and np.array_equal(
                    decode_npy(msg["buffers"][0]["buffers"]["intensity"]["npy"]), expect)
            except Exception as e:  # noqa: BLE001  (counted, printed at the end)
                ok = False
                with lock:
                    stats["last_error"] = repr(e)[:200]
            with lock:
                stats["runs"] += 1
                stats["errors"] += 0 if ok else 1
                stats["latency"].append(time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--partitions", type=int, default=64)
    p.add_argument("--every", type=float, default=30.0, help="seconds between memory samples")
    p.add_argument("--warmup", type=float, default=60.0, help="seconds before the start sample")
    args = p.parse_args(argv)

    root_dir = tempfile.mkdtemp(prefix="raytile-soak-")
    scan = np.random.default_rng(3).integers(0, 1000, size=(32, 32, 32, 32)).astype(np.uint16)
    np.save(os.path.join(root_dir, "scan.npy"), scan)
    expect = scan.sum(axis=(2, 3), dtype=np.float64).astype(np.float32)  # SumSigUDF's float32 of exact sums
    body = {"dataset": {"format": "npy", "params": {"path": "scan.npy", "num_partitions": args.partitions}},
            "udfs": [{"name": "sumsig"}]}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    server = subprocess.Popen([sys.executable, "-m", "raytile.cli", "serve", "--data-root", root_dir, "--port",
                               str(port), "--token", TOKEN, "--address", "local", "--max-runs", "8"],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(root_dir, "serve.log"), "w"),
                              env=env)
    stop = threading.Event()
    stats: dict = {"runs": 0, "errors": 0, "latency": [], "last_error": None}
    lock = threading.Lock()
    samples: list[tuple[float, dict[int, tuple[str, float]]]] = []
    threads: list[threading.Thread] = []
    try:
        import httpx

        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/v1/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                with open(os.path.join(root_dir, "serve.log")) as f:
                    raise SystemExit(f"raytile serve did not start:\n{f.read()[-2000:]}")
            time.sleep(0.5)
        print(f"raytile serve up on {url}; {args.clients} clients, {args.partitions} partitions a run, "
              f"{args.minutes} min; load {os.getloadavg()[0]:.1f}", flush=True)
        threads += [threading.Thread(target=client_loop, args=(url, body, expect, stop, stats, lock), daemon=True)
                   for _ in range(args.clients)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        proc = psutil.Process(server.pid)
        while time.monotonic() < end:
            now = time.monotonic() - t0
            samples.append((now, sample(proc)))
            gcs = [rss for name, rss in samples[-1][1].values() if name == "gcs_server"]
            with lock:
                runs, errors = stats["runs"], stats["errors"]
            print(f"{now / 60:6.1f} min  runs {runs:6d}  errors {errors}  gcs_server {gcs[0] if gcs else 0:.0f} MiB  "
                  f"total {sum(r for _, r in samples[-1][1].values()):.0f} MiB", flush=True)
            time.sleep(min(args.every, max(0.0, end - time.monotonic())))
        samples.append((time.monotonic() - t0, sample(proc)))
    finally:
        stop.set()
        for t in threads:  # the runs going on end before the server does (else they count as errors)
            t.join(120)
        server.send_signal(signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()

    start_i = next((i for i, (t, _) in enumerate(samples) if t >= args.warmup), 0)
    (t_start, first), (t_end, last) = samples[start_i], samples[-1]
    half = [s for s in samples[start_i:] if s[0] >= (t_start + t_end) / 2]
    print(f"\nper process, RSS MiB: after warm-up ({t_start / 60:.1f} min), end ({t_end / 60:.1f} min), "
          "slope over the second half (MiB/min)")
    for pid, (name, rss_end) in sorted(last.items(), key=lambda kv: kv[1][0]):
        rss_start = first.get(pid, (name, float("nan")))[1]
        pts = [(t, s[pid][1]) for t, s in half if pid in s]
        slope = float("nan")
        if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
            slope = float(np.polyfit([t / 60 for t, _ in pts], [r for _, r in pts], 1)[0])
        print(f"  {name:42s} {pid:7d} {rss_start:8.1f} {rss_end:8.1f} {slope:+8.2f}")
    lat = stats["latency"]
    tenth = max(1, len(lat) // 10)
    print(f"runs {stats['runs']}, errors {stats['errors']} (last: {stats['last_error']}); median latency first "
          f"tenth {statistics.median(lat[:tenth]) * 1e3:.0f} ms, last tenth {statistics.median(lat[-tenth:]) * 1e3:.0f} ms"
          if lat else "no runs")
    return 0 if stats["errors"] == 0 and stats["runs"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
