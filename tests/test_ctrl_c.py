"""Ctrl-C in a script in the middle of a long run (issue 37): KeyboardInterrupt, the work stops at
once, the process ends and leaves no process behind (its private Ray included).

Each case is a real child Python process that gets SIGINT while its run goes on. Timings are the
probe's (benchmarks/probe_ctrl_c.py); here the effects: the interrupt is raised, the workers stop
at their next tile (before the fix the run went on while the interrupted consumer waited up to 5 s
for it, then it was cancelled), the process exits, its children are gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from _wait import wait_until

psutil = pytest.importorskip("psutil")

#: The child: a run of 0.2 s tiles, one line per tile in the log; "interrupted" when Ctrl-C comes.
CHILD = r"""
import signal, sys, time
import numpy as np
import raytile as rt

# as a script started from a terminal: a test session started in the background of a shell without job
# control inherits SIGINT ignored, and so would this child
signal.signal(signal.SIGINT, signal.default_int_handler)

kind, log = sys.argv[1], sys.argv[2]

class LoggedTileUDF(rt.UDF):
    def __init__(self, log=""):
        super().__init__(log=log)

    def get_tiling_preferences(self):
        return {"depth": 1, "total_size": 1 << 30}

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="nav", dtype="float64")}

    def process_tile(self, tile):
        time.sleep(0.2)
        self.results.intensity[:] = tile.sum(axis=(1, 2))
        with open(self.params.log, "a") as f:
            f.write("x\n")

if kind == "inline":
    ctx = rt.Context(executor="inline")
else:
    ctx = rt.Context.make_local(cpus=2, coordinator=kind)
ds = ctx.load("memory", data=np.ones((16, 32, 4, 4), dtype=np.float32), num_partitions=8)
try:
    ctx.run_udf(dataset=ds, udf=LoggedTileUDF(log=log))  # 512 tiles: 100 s on one worker
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""


def _lines(path) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("kind", ["inline", pytest.param("driver", marks=pytest.mark.ray),
                                  pytest.param("actor", marks=pytest.mark.ray)])
def test_ctrl_c_stops_the_run_and_the_process(kind, tmp_path):
    """``driver``/``actor``: on a private local Ray of the child, coordinated in the driver or by
    the coordinator actor."""
    log = tmp_path / "tiles.log"
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, kind, str(log)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    children: list = []
    try:
        wait_until(lambda: _lines(log) >= 2 or proc.poll() is not None, timeout=180, what="the run to go on")
        assert proc.poll() is None, proc.communicate()
        children = psutil.Process(proc.pid).children(recursive=True)
        at_interrupt = _lines(log)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # generous: the probe measures the time (< 3 s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "interrupted" in out and "finished" not in out, (out, err[-2000:])
    assert "KeyboardInterrupt" in err
    assert proc.returncode != 0
    # the workers stopped at their next tile: a few tiles more at most (one in flight per worker, and
    # those that ended while the signal was delivered), where the run went on for seconds before
    workers = 1 if kind == "inline" else 2
    time.sleep(0.5)
    assert _lines(log) - at_interrupt <= 3 * workers, (at_interrupt, _lines(log))
    if kind != "inline":
        assert children, "the child's Ray processes were not seen"

    def left():
        return [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    try:
        wait_until(lambda: not left(), timeout=30, what="the child's processes to end")
    finally:
        for p in left():  # leave the machine clean whatever happened
            p.kill()


#: The child for a second Ctrl-C: a finished run, then SIGINT arrives while the exit hook shuts the
#: private Ray down (sent from inside ``ray.shutdown``, so it lands there every time).
CHILD_EXIT = r"""
import os, signal
import numpy as np
import ray
import raytile as rt

signal.signal(signal.SIGINT, signal.default_int_handler)
ctx = rt.Context.make_local(cpus=1)
ds = ctx.load("memory", data=np.ones((4, 4, 4, 4), dtype=np.float32), num_partitions=2)
print(float(ctx.run_udf(dataset=ds, udf=rt.SumUDF())["intensity"].data.sum()), flush=True)
shutdown = ray.shutdown

def interrupted_shutdown(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    shutdown(*args, **kwargs)

ray.shutdown = interrupted_shutdown
"""


@pytest.mark.ray
def test_ctrl_c_while_the_exit_hook_stops_ray_is_quiet(tmp_path):
    """Ctrl-C pressed again while a script's exit hook stops its private Ray: no "Exception ignored in
    atexit callback" traceback, the process ends normally, and none of its Ray processes is left."""
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD_EXIT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    children: list = []
    try:
        wait_until(lambda: psutil.Process(proc.pid).children() or proc.poll() is not None, timeout=120,
                   what="the child's Ray to start")
        if proc.poll() is None:
            children = psutil.Process(proc.pid).children(recursive=True)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert out.split() == [str(float(4 * 4 * 4 * 4))], (out, err[-2000:])
    assert "Exception ignored" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert proc.returncode == 0, err[-2000:]

    def left():
        return [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    try:
        wait_until(lambda: not left(), timeout=30, what="the child's processes to end")
    finally:
        for p in left():
            p.kill()
