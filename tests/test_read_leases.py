"""A file truncated while the inline executor reads it through the mmap backend (issue #37).

The process used to die with SIGBUS (a notebook kernel with it); now the
read ends with a DataSetException naming the file, as on Ray. Each case
runs in a subprocess, so that a regression kills that process and not
pytest; the subprocess prints what the run raised and the reference sums.

The file is truncated by another thread while the run is inside a
partition of several blocks of tiles, the blocks read so far being views of
the map. The UDF waits until the kernel shows the truncation held back by
the run's read lease (``/proc/locks``: ``BREAKING``); without a lease it
waits in vain (10 s) and reads on into the vanished pages.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="read leases are Linux's")

SCRIPT = textwrap.dedent('''
    import json, os, sys, threading, time
    import numpy as np
    import raytile as rt
    from raytile.udf import UDF

    path, hold_writer = sys.argv[1], sys.argv[2] == "1"
    data = np.arange(64 * 32 * 32, dtype=np.uint16).reshape(8, 8, 32, 32)
    data.tofile(path)
    inode = os.stat(path).st_ino
    writer = open(path, "r+b") if hold_writer else None  # a writer: no lease can be taken


    def held_back() -> bool:
        with open("/proc/locks") as f:
            return any("BREAKING" in line and f":{inode} " in line for line in f)


    class TruncateMidRun(UDF):
        """Sums; at its first tile another thread truncates the file to one frame."""
        started = False

        def get_result_buffers(self):
            return {"s": self.buffer(kind="nav", dtype="float64")}

        def get_tiling_preferences(self):
            return {"depth": 4, "total_size": 4 * 32 * 32 * 2}

        def get_preferred_input_dtype(self):
            return self.USE_NATIVE_DTYPE

        def process_tile(self, tile):
            self.results.s[:] += tile.sum(axis=(1, 2))
            if not TruncateMidRun.started:
                TruncateMidRun.started = True
                if writer is not None:
                    writer.truncate(2048)
                    writer.flush()
                    return
                threading.Thread(target=os.truncate, args=(path, 2048), daemon=True).start()
                deadline = time.monotonic() + 10
                while not held_back() and time.monotonic() < deadline:
                    time.sleep(0.005)


    ctx = rt.Context(executor="inline")
    ds = ctx.load("raw", path=path, nav_shape=(8, 8), sig_shape=(32, 32), dtype="uint16", num_partitions=1)
    try:
        ctx.run_udf(dataset=ds, udf=TruncateMidRun())
        print(json.dumps({"raised": None}))
    except Exception as e:
        print(json.dumps({"raised": type(e).__name__, "message": str(e)}))
''')


def _run(tmp_path, hold_writer: bool) -> dict:
    script = tmp_path / "truncate_mid_run.py"
    script.write_text(SCRIPT)
    path = tmp_path / "scan.raw"
    proc = subprocess.run([sys.executable, str(script), str(path), "1" if hold_writer else "0"],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 0, f"the process died (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_truncated_during_an_inline_run_raises_naming_the_file(tmp_path):
    got = _run(tmp_path, hold_writer=False)
    assert got["raised"] == "DataSetException", got
    # "too short" under a lease; "short read" where this file system has no leases (read with preadv)
    assert str(tmp_path / "scan.raw") in got["message"] and re.search("too short|short read", got["message"]), got


def test_a_file_open_for_writing_is_read_without_a_map(tmp_path):
    """No lease while a writer has the file open: the backend reads it with preadv (no map to fault), and
    the truncation is a short read."""
    got = _run(tmp_path, hold_writer=True)
    assert got["raised"] == "DataSetException", got
    assert str(tmp_path / "scan.raw") in got["message"] and "truncated" in got["message"], got


def test_files_open_for_writing_read_like_leased_ones(inline_ctx, tmp_path, monkeypatch):
    """The preadv fallback gives the same numbers as the mapped (leased) read: numpy's."""
    import raytile as rt
    from raytile.io.backends import mmap

    reads = []
    read_segment = mmap._read_segment
    monkeypatch.setattr(mmap, "_read_segment", lambda *a: reads.append(1) or read_segment(*a))

    data = np.random.default_rng(3).integers(0, 4000, (6, 5, 16, 12)).astype(np.uint16)
    path = tmp_path / "d.raw"
    data.tofile(path)
    ds = inline_ctx.load("raw", path=str(path), nav_shape=(6, 5), sig_shape=(16, 12), dtype="uint16",
                         num_partitions=3)
    mapped = inline_ctx.run_udf(dataset=ds, udf=[rt.SumUDF(dtype="float64"), rt.SumSigUDF()])
    leases = mmap.ReadLeases()
    if leases.take(0, str(path)):  # else this file system has no leases: both runs read with preadv
        leases.release()
        assert not reads
    with open(path, "r+b"):  # a writer: no lease, so the frames are read into memory of the backend's own
        read = inline_ctx.run_udf(dataset=ds, udf=[rt.SumUDF(dtype="float64"), rt.SumSigUDF()])
    assert reads
    for res in (mapped, read):
        np.testing.assert_array_equal(res[0]["intensity"].data, data.sum(axis=(0, 1), dtype=np.float64))
        np.testing.assert_array_equal(res[1]["intensity"].data, data.sum(axis=(2, 3)))
