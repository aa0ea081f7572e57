"""Start time and memory of the live simulators on a large synthetic scan (issue 37: a 128x128 Merlin scan
took ~40 s to start and 8.5 GB of RSS).

For each simulator, ``raytile live sim <detector> --nav-shape N,N --sig-shape S,S`` runs in a process of
its own; the probe measures the time from the process start to its "simulator: data ..." line (ready),
its RSS then (``VmRSS``) and its peak (``VmHWM``), and, while a plain consumer drains ``--drain`` frames
(bytes counted and dropped: Merlin's TCP socket, DECTRIS' ZeroMQ PULL), the largest RSS seen. The
baseline, measured in the same run, is the resting simulator: the same command with a scan of one
frame (the same process, threads and sockets, without the frames), at ready and while a consumer
drains it. "One stack" is the frames the simulator makes (``SYNTHETIC_STACK_BYTES``, 16 MiB); the
bound is RSS above the resting simulator <= 2x one stack.

    python benchmarks/probe_sim_memory.py [--nav 256] [--sig 256] [--drain 20000] [--pythonpath SRC]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import threading
import time


def status(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out


def start(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    return proc, time.perf_counter() - t0, line


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def drain_merlin(port: int, frames: int, frame_bytes: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        want, got = frames * frame_bytes, 0
        while got < want:
            chunk = s.recv(1 << 20)
            if not chunk:
                return
            got += len(chunk)


def drain_dectris(port: int, frames: int) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.connect(f"tcp://127.0.0.1:{port}")
    try:
        images = 0
        while images < frames:
            if not sock.poll(20000):
                return
            parts = sock.recv_multipart()
            images += b'"htype": "dimage-1.0"' in parts[0] or b'"dimage-1.0"' in parts[0]
    finally:
        sock.close(0)
        ctx.term()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nav", type=int, default=256)
    p.add_argument("--sig", type=int, default=256)
    p.add_argument("--drain", type=int, default=20000, help="frames a consumer reads while RSS is sampled")
    p.add_argument("--pythonpath", default=None, help="the raytile source to run (default: this checkout's)")
    p.add_argument("--detectors", default="merlin,dectris")
    args = p.parse_args()
    src = args.pythonpath or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = {**os.environ, "PYTHONPATH": src}
    print(f"source {src}", flush=True)
    sig = args.sig
    for det in args.detectors.split(","):
        rest = measure(det, 1, sig, min(args.drain, 2000), env)
        big = measure(det, args.nav, sig, args.drain, env)
        if rest is None or big is None:
            continue
        stack_mib = 16.0
        print(f"{det}: resting simulator (1 frame, this run): ready in {rest['took']:.2f} s, VmRSS "
              f"{rest['ready']:.0f} MiB, while sending {rest['sending']:.0f} MiB", flush=True)
        print(f"{det}: {args.nav}x{args.nav} scan of {sig}x{sig} frames: ready in {big['took']:.2f} s; VmRSS at "
              f"ready {big['ready']:.0f} MiB (+{big['ready'] - rest['ready']:.0f} above resting), peak VmHWM "
              f"{big['hwm']:.0f} MiB; sending {args.drain} frames ({big['rate']:,.0f} frames/s to a draining "
              f"consumer): max VmRSS {big['sending']:.0f} MiB (+{big['sending'] - rest['sending']:.0f} above "
              f"resting; bound 2 x {stack_mib:.0f} MiB = {2 * stack_mib:.0f}); {big['line'][:150]}", flush=True)


def measure(det: str, nav: int, sig: int, drain: int, env: dict[str, str]) -> dict | None:
    extra = ["--mode", "U16", "--continuous"] if det == "merlin" else ["--dtype", "uint16", "--compression", "bslz4"]
    cmd = [sys.executable, "-m", "raytile.cli", "live", "sim", det, "--nav-shape", f"{nav},{nav}",
           "--sig-shape", f"{sig},{sig}", "--data-port", "0", "--api-port", "0", *extra]
    proc, took, line = start(cmd, env)
    try:
        found = re.search(r"data 127\.0\.0\.1:(\d+)", line)
        if found is None:
            print(f"{det}: did not start: {line!r} {proc.stderr.read()[-500:]}")
            return None
        ready = status(proc.pid)
        peak = [ready["VmRSS"]]
        port = int(found.group(1))
        if det == "merlin":
            target = lambda: drain_merlin(port, drain, 15 + 384 + sig * sig * 2)  # noqa: E731
        else:
            target = lambda: drain_dectris(port, drain)  # noqa: E731
        t = threading.Thread(target=target, daemon=True)
        t0 = time.perf_counter()
        t.start()
        while t.is_alive() and time.perf_counter() - t0 < 300:
            peak.append(status(proc.pid)["VmRSS"])
            t.join(0.2)
        return {"took": took, "ready": ready["VmRSS"], "hwm": ready["VmHWM"], "sending": max(peak),
                "rate": drain / (time.perf_counter() - t0), "line": line.strip()}
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
