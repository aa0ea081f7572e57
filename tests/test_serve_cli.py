"""``raytile serve`` as a user runs it: a process of its own with its own local Ray; Ctrl-C stops it cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from _wait import wait_until

pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_data_root_is_an_error_before_ray_starts(tmp_path):
    out = subprocess.run([sys.executable, "-m", "raytile.cli", "serve", "--data-root", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "is not a directory" in out.stderr


@pytest.mark.ray  # a Ray of its own, in the served process
def test_raytile_serve_runs_and_stops_on_ctrl_c(tmp_path):
    scan = np.arange(4 * 4 * 8 * 8, dtype=np.float32).reshape(4, 4, 8, 8)
    np.save(tmp_path / "a.npy", scan)
    port = _free_port()
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    proc = subprocess.Popen([sys.executable, "-m", "raytile.cli", "serve", "--data-root", str(tmp_path),
                             "--port", str(port), "--token", "t0k", "--address", "local"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/v1/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                return False

        wait_until(healthy, timeout=120, interval=0.5, what="raytile serve to answer /v1/healthz")
        auth = {"Authorization": "Bearer t0k"}
        r = httpx.post(f"{url}/v1/runs", headers=auth, timeout=60,
                       json={"dataset": {"format": "npy", "params": {"path": "a.npy"}}, "udfs": [{"name": "sum"}]})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        with httpx.stream("GET", f"{url}/v1/runs/{run_id}/stream", headers=auth, timeout=60) as resp:
            lines = [line for line in resp.iter_lines() if line]
        import json

        from raytile.serve.encoding import decode_npy

        last = json.loads(lines[-1])
        assert last["status"] == "finished"
        np.testing.assert_array_equal(decode_npy(last["buffers"][0]["buffers"]["intensity"]["npy"]), scan.sum(axis=(0, 1)))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    err = proc.stderr.read() if proc.stderr else ""
    assert rc == 0, err
    assert "shutting down" in err
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/v1/healthz", timeout=2)
