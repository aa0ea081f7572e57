"""``http(s)://`` URLs (fsspec's HTTP file system over aiohttp): files served by a 127.0.0.1 HTTP server
that answers ranged GETs, read by raytile's ranged requests and compared with numpy; a missing file is a
DataSetException naming the URL. The server runs in a thread for the module and is shut down after it.

``gs://`` and ``az://`` take the same path through gcsfs and adlfs; their emulators are not on PyPI
(fake-gcs-server, Azurite), so they are not tested here (docs/cloud.md says so).
"""

from __future__ import annotations

import functools
import http.server
import re
import threading

import numpy as np
import pytest

from raytile.common.errors import DataSetException
from test_cloud_formats import check_pick
from test_io_formats import NAV, SIG, check_read, frames, roi  # noqa: F401 - fixtures

pytest.importorskip("aiohttp")
pytest.importorskip("fsspec")


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with single ``Range: bytes=a-b`` requests answered by 206 (http.server has no ranges)."""

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def send_head(self):
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m is None:
            return super().send_head()
        path = self.translate_path(self.path)
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return None
        size = f.seek(0, 2)
        start = int(m.group(1))
        stop = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
        if start >= size:
            f.close()
            self.send_error(416, "Range Not Satisfiable")
            return None
        f.seek(start)
        body = f.read(stop - start + 1)
        f.close()
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{stop}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        import io

        return io.BytesIO(body)


@pytest.fixture(scope="module")
def http_root(tmp_path_factory):
    """``(directory, base URL)`` of an HTTP server on 127.0.0.1 serving the directory."""
    root = tmp_path_factory.mktemp("http")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(root)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        assert not thread.is_alive()


def test_raw_and_npy_over_http(inline_ctx, http_root, frames, roi):
    root, base = http_root
    frames.tofile(root / "scan.raw")
    np.save(root / "scan.npy", frames)
    ds = inline_ctx.load("raw", path=f"{base}/scan.raw", nav_shape=NAV, sig_shape=SIG, dtype="uint16",
                         num_partitions=3)
    assert ds.io_backend == "remote"
    check_read(inline_ctx, ds, frames, roi=roi)
    check_pick(inline_ctx, ds, frames, 3, 5)
    ds2 = inline_ctx.load("npy", path=f"{base}/scan.npy", num_partitions=2)
    assert ds2.shape.to_tuple() == NAV + SIG
    check_read(inline_ctx, ds2, frames, tilings=((None, None), (3, 200)))
    auto = inline_ctx.load("auto", path=f"{base}/scan.npy")
    assert auto.format_name == "npy" and auto.shape == ds2.shape


def test_missing_file_over_http_names_the_url(inline_ctx, http_root):
    _, base = http_root
    with pytest.raises(DataSetException, match=rf"{re.escape(base)}/none\.raw"):
        inline_ctx.load("raw", path=f"{base}/none.raw", nav_shape=NAV, sig_shape=SIG, dtype="uint16")
