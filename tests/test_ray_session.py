"""`raytile ray start | status | stop`: one private Ray that successive commands share (issue 35).

Every command runs as a new process, as a user types them; the session file lives in a folder of the
test's own (RAYTILE_RUNTIME_DIR). Each test stops what it started, by pid.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from raytile.actors import ray_session

from _wait import wait_until

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _env(runtime_dir: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, RAYTILE_RUNTIME_DIR=str(runtime_dir), PYTHONPATH=path)


def _raytile(env: dict[str, str], *argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raytile.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _descendants(pid: int) -> set[int]:
    """Processes below ``pid`` (its Ray: GCS, raylet, workers), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if ray_session._alive(p)}


def _start(env: dict[str, str], *extra: str) -> tuple[ray_session.RaySession, set[int]]:
    proc = _raytile(env, "ray", "start", "--cpus", "1", *extra)
    assert proc.returncode == 0, proc.stderr
    path = Path(env["RAYTILE_RUNTIME_DIR"]) / ray_session.SESSION_FILE
    session = ray_session.RaySession(**json.loads(path.read_text()))
    assert f"started a shared Ray session at {session.address}" in proc.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # not world- nor group-readable
    assert session.token and session.token not in proc.stdout + proc.stderr  # kept, never printed
    ray_processes = _descendants(session.pid)
    assert any("raylet" in Path(f"/proc/{p}/cmdline").read_text(errors="replace") for p in _alive(ray_processes))
    return session, ray_processes


def _kill(session: ray_session.RaySession | None) -> None:
    if session is not None and ray_session._alive(session.pid):
        os.killpg(session.pid, signal.SIGKILL)


@pytest.mark.ray
def test_a_second_command_joins_the_session_and_stop_leaves_no_process(tmp_path):
    env = _env(tmp_path / "run")
    session = None
    try:
        session, ray_processes = _start(env)
        data = np.random.default_rng(5).integers(0, 100, size=(4, 6, 8, 10)).astype(np.float32)
        np.save(tmp_path / "scan.npy", data)
        out = tmp_path / "sum.npz"
        cmd = subprocess.Popen([sys.executable, "-m", "raytile.cli", "run", "--format", "npy", "--path",
                                str(tmp_path / "scan.npy"), "--udf", "sum", "--out", str(out), "--no-progress"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = cmd.communicate(timeout=240)
        assert cmd.returncode == 0, stderr
        assert session.token not in stdout + stderr
        assert f"using the shared Ray session at {session.address}" in stderr
        assert "Token authentication is enabled" not in stderr  # the session's token, taken up quietly
        with np.load(out) as npz:
            np.testing.assert_allclose(npz["sum"], data.sum(axis=(0, 1)))
        # the command was a driver of the session's Ray (its job table names its pid), no Ray of its own
        probe = subprocess.run(
            [sys.executable, "-c", "import json, ray; ray.init(address=%r, logging_level='ERROR');"
             "from ray._private import state; print(json.dumps([j['DriverPid'] for j in state.state.job_table()]))"
             % session.address], env=dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=session.token),
            capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0, probe.stderr
        assert cmd.pid in json.loads(probe.stdout.strip().splitlines()[-1])
        status = _raytile(env, "ray", "status")
        assert status.returncode == 0 and session.address in status.stdout
        assert session.token not in status.stdout + status.stderr
        stop = _raytile(env, "ray", "stop")
        assert stop.returncode == 0 and f"stopped the shared Ray session at {session.address}" in stop.stdout
        assert not ray_session._alive(session.pid)
        wait_until(lambda: not _alive(ray_processes), timeout=30, what="the session's Ray processes to end")
        assert not (tmp_path / "run" / ray_session.SESSION_FILE).exists()
        assert _raytile(env, "ray", "status").returncode == 1
    finally:
        _kill(session)


@pytest.mark.ray
def test_an_idle_session_stops_itself(tmp_path):
    env = _env(tmp_path / "run")
    session = None
    try:
        session, ray_processes = _start(env, "--idle", "2")
        wait_until(lambda: not ray_session._alive(session.pid), timeout=90, what="the idle session to stop")
        wait_until(lambda: not _alive(ray_processes), timeout=30, what="the session's Ray processes to end")
        assert not (tmp_path / "run" / ray_session.SESSION_FILE).exists()
    finally:
        _kill(session)


def test_a_stale_session_file_is_removed_with_a_clear_message(tmp_path, monkeypatch, capsys):
    """A session whose host is gone (killed, machine restarted): said in one line, the file removed, and
    the command starts a Ray of its own ("local") instead of trying to join a dead address."""
    monkeypatch.setenv("RAYTILE_RUNTIME_DIR", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / ray_session.SESSION_FILE
    path.write_text(json.dumps({"address": "127.0.0.1:1", "pid": dead.pid, "idle_s": 60.0, "started_at": 0.0}))
    said: list[str] = []
    assert ray_session.command_address(None, say=said.append) == "local"
    assert len(said) == 1 and re.search(rf"session recorded in .* is gone \(its host process {dead.pid} ended\)",
                                        said[0])
    assert not path.exists()
    assert ray_session.command_address("auto", say=said.append) == "auto" and len(said) == 1
    from raytile.cli import main

    path.write_text(json.dumps({"address": "127.0.0.1:1", "pid": dead.pid, "idle_s": 60.0, "started_at": 0.0}))
    assert main(["ray", "status"]) == 1
    captured = capsys.readouterr()
    assert "is gone" in captured.err and "no shared Ray session runs" in captured.out
    assert not path.exists()
