"""A `ray start --head` of a test's own, beside any other Ray on the machine, stopped by its PID.

Its temp folder, GCS port, client-server port and dashboard port are its own,
so it neither joins nor disturbs another Ray instance; it is stopped by
signalling its own process (``ray start --block`` stops its children on
SIGTERM), then its own process group, never with a bare ``ray stop``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

__all__ = ["ray_head", "RayHead", "processes_mentioning"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayHead:
    def __init__(self, address: str, temp_dir: str, proc: subprocess.Popen):
        self.address = address
        self.temp_dir = temp_dir
        self.proc = proc


def processes_mentioning(text: str) -> list[int]:
    """PIDs of the processes whose command line contains ``text`` (e.g. a Ray temp folder of ours)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def ray_head(num_cpus: int = 0, timeout: float = 90.0) -> Iterator[RayHead]:
    """``ray start --head --num-cpus=N`` in a temp folder of its own; yields its address; stops it."""
    temp_dir = tempfile.mkdtemp(prefix="rtH", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = _free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    cmd = [ray_bin, "start", "--head", f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={temp_dir}",
           f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false",
           f"--dashboard-port={_free_port()}", f"--ray-client-server-port={_free_port()}", "--block"]
    log = open(os.path.join(temp_dir, "ray-start.log"), "wb")
    # without token authentication, as a Ray before 2.52 (Ray's default token would be shared through
    # ~/.ray/auth_token with every other Ray of the machine's user)
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {proc.returncode}: "
                                   + Path(temp_dir, "ray-start.log").read_text(errors="replace")[-2000:])
            if "This command will now block" in Path(temp_dir, "ray-start.log").read_text(errors="replace"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"ray start did not come up within {timeout} s")
            time.sleep(0.2)
        yield RayHead(address, temp_dir, proc)
    finally:
        log.close()
        _stop(proc, temp_dir)


def _stop(proc: subprocess.Popen, temp_dir: str) -> None:
    """SIGTERM to our `ray start --block` (it drains and stops its children), then what is left of its
    process group and of the processes naming our temp folder, each by its PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(45)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session's group (start_new_session): only ours
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
    for pid in processes_mentioning(temp_dir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(temp_dir, ignore_errors=True)
