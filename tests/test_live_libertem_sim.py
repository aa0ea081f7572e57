"""raytile's Merlin receiver against LiberTEM-live's own simulator (``libertem-live-mib-sim``), a sender
written by someone else: it replays a MIB file written by raytile.io.testing over 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from raytile.io.testing.mib import write_mib
from raytile.live import LiveContext
from raytile.udf import SumSigUDF, SumUDF

from _procs import stop_process

pytest.importorskip("libertem_live", reason="LiberTEM-live (its simulator) is a test dependency")

NAV, SIG = (8, 12), (32, 64)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sim_command() -> str:
    found = shutil.which("libertem-live-mib-sim") or os.path.join(os.path.dirname(sys.executable),
                                                                   "libertem-live-mib-sim")
    if not os.path.exists(found):
        pytest.skip("libertem-live-mib-sim is not installed")
    return found


def _open_when_listening(ctx, data_port, api_port, deadline_s=60.0):
    t0 = time.monotonic()
    while True:
        try:
            return ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=data_port,
                                                      api_host="127.0.0.1", api_port=api_port)
        except Exception:
            if time.monotonic() - t0 > deadline_s:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("mode", ["U16", "R12"])
def test_libertem_live_simulator(tmp_path, mode):
    frames = np.random.default_rng(3).integers(0, 4096, size=(int(np.prod(NAV)),) + SIG).astype(np.uint16)
    hdr = write_mib(tmp_path / "scan", frames, mode=mode, nav_shape=NAV)
    text = open(hdr).read()
    with open(hdr, "w") as f:  # LiberTEM-live's header parser takes no empty line after "End"
        f.write(text.rstrip("\n"))
    data_port, api_port, trigger_port = _free_port(), _free_port(), _free_port()
    proc = subprocess.Popen([_sim_command(), hdr, "--host", "127.0.0.1", "--data-port", str(data_port),
                             "--control-port", str(api_port), "--trigger-port", str(trigger_port),
                             "--nav-shape", str(NAV[0]), str(NAV[1])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ctx = LiveContext(executor="inline")
        with _open_when_listening(ctx, data_port, api_port) as conn:
            pending = conn.wait_for_acquisition(30.0)
            assert pending is not None and pending.nimages == frames.shape[0]
            aq = ctx.make_acquisition(conn=conn, pending_aq=pending, frames_per_partition=16)
            assert aq.shape.nav.to_tuple() == NAV  # from the header's frames per trigger
            total, per_frame = ctx.run_udf(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()])
        assert np.array_equal(total["intensity"].data, frames.sum(axis=0))
        assert np.array_equal(per_frame["intensity"].data, frames.sum(axis=(1, 2)).reshape(NAV))
    finally:
        stop_process(proc)
