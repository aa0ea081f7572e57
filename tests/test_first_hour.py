"""A scientist's first hour (issue 20): the demo and the CLI beside another Ray, and where Ray comes from.

These start Ray instances of their own in subprocesses (the issue's scenario is
a second Ray on the machine); each is stopped by its PID at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from _ray_head import processes_mentioning, ray_head

pytestmark = pytest.mark.ray

SRC = str(Path(__file__).resolve().parents[1] / "src")
TESTS = str(Path(__file__).resolve().parent)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, TESTS, os.environ.get("PYTHONPATH")) if p)
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


def test_demo_runs_beside_a_ray_head_without_cpus(tmp_path):
    # the machine: a `ray start --head` that cannot host workers, found through RAY_ADDRESS
    with ray_head(num_cpus=0) as head:
        demo = subprocess.run(
            [sys.executable, "-m", "raytile.cli", "demo", "--size-gib", "0.05", "--cache-dir", str(tmp_path / "c"),
             "--out", str(tmp_path / "out"), "--no-progress"],
            capture_output=True, text=True, timeout=240, env=_env(RAY_ADDRESS=head.address))
        assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
        assert "warm run:" in demo.stdout
        out = np.load(tmp_path / "out" / "results.npz")
        assert out["sum"].shape == (256, 256) and out["sum"].sum() > 0
        assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == ["ring.png", "sum.png", "sumsig.png"]

        # rt.Context() keeps Ray's convention (it joins RAY_ADDRESS), says so in one line, and fails at once,
        # naming what is missing, instead of waiting for workers that cannot start
        ctx = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import raytile as rt
            from raytile.common.errors import ExecutorError
            try:
                rt.Context()
            except ExecutorError as e:
                print("ERROR", e)
        """)], capture_output=True, text=True, timeout=120, env=_env(RAY_ADDRESS=head.address))
        assert ctx.returncode == 0, ctx.stderr[-3000:]
        port = ":" + head.address.rsplit(":", 1)[1]  # Ray names the node by its IP, not 127.0.0.1
        assert "ERROR" in ctx.stdout and "lacks a CPU or a GPU" in ctx.stdout and port in ctx.stdout
        joined = [ln for ln in ctx.stderr.splitlines() if "joined the running Ray cluster" in ln]
        assert len(joined) == 1 and port in joined[0] and "0 CPU" in joined[0], ctx.stderr[-3000:]
        # the demo's private Ray is gone with the demo (none of its processes name another session)
        temp = head.temp_dir
    assert not processes_mentioning(temp)
