"""Quiet commands (issue 35): what the user asked for stays on the screen, Ray's own logs stay in Ray's
log files. Each test runs a real process and reads its stderr: no token-authentication notice from a
private Ray, no Ray INFO/WARNING log lines or worker echoes from a `raytile` command, no
``SIGTERM ... epoll_wait`` stack dump when a process that used Ray is stopped, and no Serve log lines
among `pytest -q`'s dots."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: A log line of Ray's (driver or an echoed worker): "2026-11-28 12:31:05,918\tWARNING file.py:85 -- ..."
RAY_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING|DEBUG)\s|^\((raylet|pid=|\w+Actor)", re.M)

pytestmark = pytest.mark.ray


def _env() -> dict[str, str]:
    src = str(ROOT / "src")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))


def test_raytile_run_on_ray_prints_what_was_asked_and_no_ray_logs(tmp_path):
    data = np.random.default_rng(0).integers(0, 9, size=(4, 4, 8, 8)).astype(np.float32)
    np.save(tmp_path / "s.npy", data)
    proc = subprocess.run([sys.executable, "-m", "raytile.cli", "run", "--format", "npy", "--path",
                           str(tmp_path / "s.npy"), "--udf", "sum", "--out", str(tmp_path / "r.npz"), "--no-progress"],
                          capture_output=True, text=True, env=_env(), timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Token authentication" not in proc.stderr
    assert not RAY_LOG.search(proc.stderr), proc.stderr[-3000:]
    assert f"wrote {tmp_path / 'r.npz'}" in proc.stdout  # what the user asked for
    with np.load(tmp_path / "r.npz") as got:
        np.testing.assert_array_equal(got["sum"], data.sum(axis=(0, 1)))


SCRIPT = """
import time
import raytile as rt
ctx = rt.Context.make_local(cpus=1)
print("ready", ctx.num_workers, flush=True)
time.sleep(300)
"""


def test_sigterm_after_ray_ends_the_process_without_a_stack_dump():
    """As a notebook kernel is stopped: SIGTERM ends the process as it would without Ray (status -15),
    with no ``*** SIGTERM received ... epoll_wait`` trace from Ray's failure handler."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready"), (line, proc.stderr.read()[-3000:] if proc.poll() is not None else "")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, err[-3000:])
    assert "SIGTERM received" not in err and "epoll_wait" not in err, err[-3000:]
    assert "Token authentication" not in err


@pytest.mark.slow
def test_pytest_q_shows_dots_not_serve_logs():
    """A served test under `pytest -q`: its output is the dots and the summary, no Serve or Ray log line."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_serve.py::test_token_required"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert not RAY_LOG.search(out), out[-3000:]
    assert "serve" not in out.lower().replace("test_serve", ""), out[-3000:]
    assert re.search(r"^\.\s+\[100%\]$", proc.stdout, re.M) and "1 passed" in proc.stdout, proc.stdout
