"""A scientist's first hour (issue 20): the demo and the CLI beside another Ray, and where Ray comes from.

These start Ray instances of their own in subprocesses (the issue's scenario is
a second Ray on the machine); each is stopped by its PID at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
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
        temp = head.temp_dir
    assert not processes_mentioning(temp)  # the head is stopped, by its PID, and nothing of it is left


#: The issue asks for 20 runs of the five-line script; each starts its own Ray (~9 s on 2 busy cores), so the
#: default suite runs 3 and RAYTILE_CLEAN_EXIT_RUNS=20 runs the issue's count.
CLEAN_EXIT_RUNS = int(os.environ.get("RAYTILE_CLEAN_EXIT_RUNS", "3"))

FIVE_LINES = """\
import time, numpy as np, raytile as rt
from raytile.udf import SumUDF
ctx = rt.Context(coordinator="actor")
ds = ctx.load("memory", data=np.ones((8, 8, 16, 16), np.float32))
print(ctx.run_udf(dataset=ds, udf=SumUDF())["intensity"].data.sum(), "LAST", time.time(), flush=True)
"""


def test_five_line_script_with_coordinator_actor_exits_cleanly(tmp_path):
    script = tmp_path / "five.py"
    script.write_text(FIVE_LINES)
    for i in range(CLEAN_EXIT_RUNS):
        ray_tmp = tempfile.mkdtemp(prefix="rtX", dir="/tmp")  # its Ray's own temp folder: no other cluster found
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                              env=_env(RAY_TMPDIR=ray_tmp))
        ended = time.time()
        assert proc.returncode == 0, f"run {i}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        total, last = proc.stdout.split("LAST")[0].strip(), float(proc.stdout.split("LAST")[1])
        assert float(total) == 8 * 8 * 16 * 16
        # a finalizer calling into Ray after its shutdown started a second Ray here (25 s, or a hang)
        assert proc.stderr.count("Started a local Ray instance") == 1, f"run {i}:\n{proc.stderr[-3000:]}"
        assert ended - last < 10.0, f"run {i} took {ended - last:.1f} s to exit after its last line"
        assert not processes_mentioning(ray_tmp), f"run {i} left processes running"
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_detached_run_keep_time_is_a_parameter_and_the_actor_exits(tmp_path):
    with ray_head(num_cpus=2) as head:
        driver = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import numpy as np, raytile as rt
            from raytile.udf import SumUDF
            ctx = rt.Context(coordinator="actor", detached_keep_s=1.0)
            ds = ctx.load("memory", data=np.ones((4, 4, 8, 8), np.float32))
            run = ctx.run_udf_iter(dataset=ds, udf=SumUDF(), detached=True)
            print("RUN", run.run_id, flush=True)
        """)], capture_output=True, text=True, timeout=120, env=_env(RAY_ADDRESS=head.address))
        assert driver.returncode == 0, driver.stderr[-3000:]
        # the driver is gone, the run ended, its result expires after 1 s: the actor exits by itself
        watcher = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import time, ray
            from raytile.actors.coordinator_actor import NAMESPACE, NAME_PREFIX
            ray.init(address="auto", logging_level="ERROR")
            def names():
                return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                        if a.get("namespace") == NAMESPACE and a["name"].startswith(NAME_PREFIX)]
            deadline = time.monotonic() + 60
            while names() and time.monotonic() < deadline:
                time.sleep(0.5)
            print("LEFT", names())
        """)], capture_output=True, text=True, timeout=120, env=_env(RAY_ADDRESS=head.address))
        assert watcher.returncode == 0, watcher.stderr[-3000:]
        assert "LEFT []" in watcher.stdout, watcher.stdout
    import raytile as rt
    from raytile.common.errors import ConfigValidationError

    with pytest.raises(ConfigValidationError, match="detached_keep_s"):
        rt.Context(coordinator="driver", detached_keep_s=5.0)
