"""Object store failures: each is a DataSetException naming the URL, bounded in time, and no secret leaks.

Missing bucket or key, access denied, a wrong endpoint, a truncated object
and a server stopped mid-run, against moto on 127.0.0.1; the text of every
exception and every log record (caplog at DEBUG, all loggers) is searched
for the secret.
"""

from __future__ import annotations

import logging
import time
import traceback

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import DataSetException, RaytileError
from raytile.io.store import ObjectStore, display_url, scrub
from raytile.udf import SumUDF
from _s3 import KEY, SECRET, free_port, moto_s3, s3  # noqa: F401 - s3: the module's S3 server (a fixture)

pytest.importorskip("s3fs")

NAV, SIG = (4, 4), (8, 8)


@pytest.fixture
def secret_watch(caplog):
    """Captures every log record at DEBUG; afterwards no record may hold the secret or the key id."""
    caplog.set_level(logging.DEBUG)
    yield caplog
    text = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert SECRET not in text


def assert_clean(exc: BaseException, url: str) -> None:
    """The exception names the URL and shows no secret, in its message or its formatted traceback."""
    text = "".join(traceback.format_exception(exc))
    assert display_url(url) in str(exc)
    assert SECRET not in text
    assert SECRET not in repr(exc)


def load_raw(ctx, url, options):
    return ctx.load("raw", path=url, nav_shape=NAV, sig_shape=SIG, dtype="uint16", storage_options=options)


def test_missing_bucket_and_key(s3, inline_ctx, secret_watch):
    s3.put("s3://have-bucket/there.raw", np.zeros(NAV + SIG, np.uint16).tobytes())
    for url in ("s3://no-such-bucket-x/data.raw", "s3://have-bucket/not-there.raw"):
        with pytest.raises(DataSetException, match="not found") as e:
            load_raw(inline_ctx, url, s3.options)
        assert_clean(e.value, url)


def test_access_denied(s3, inline_ctx, secret_watch, monkeypatch):
    """moto checks credentials once told to (INITIAL_NO_AUTH_ACTION_COUNT = 0): an unknown key is denied."""
    import moto.settings

    url = s3.put("s3://denied-bucket/data.raw", np.zeros(NAV + SIG, np.uint16).tobytes())
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    with pytest.raises(DataSetException, match="access denied") as e:
        load_raw(inline_ctx, url, s3.options)
    assert_clean(e.value, url)


def test_wrong_endpoint_is_bounded(inline_ctx, secret_watch):
    """Nothing listens at the endpoint: the load fails naming the URL well within the 30 s bound."""
    opts = {"endpoint_url": f"http://127.0.0.1:{free_port()}", "key": KEY, "secret": SECRET}
    url = "s3://some-bucket/data.raw"
    t0 = time.monotonic()
    with pytest.raises(DataSetException, match="cannot connect|did not answer") as e:
        load_raw(inline_ctx, url, opts)
    assert time.monotonic() - t0 < 40
    assert_clean(e.value, url)


def test_truncated_objects(s3, inline_ctx, tmp_path, secret_watch):
    frames = np.arange(np.prod(NAV + SIG), dtype=np.uint16).reshape(NAV + SIG)
    # a raw object too short for nav_shape
    url = s3.put("s3://trunc-bucket/short.raw", frames.tobytes()[: frames.nbytes // 2])
    with pytest.raises(DataSetException, match="too short|needs") as e:
        load_raw(inline_ctx, url, s3.options)
    assert_clean(e.value, url)
    # an npy whose header promises more than the object holds
    p = tmp_path / "d.npy"
    np.save(p, frames)
    url = s3.put("s3://trunc-bucket/cut.npy", p.read_bytes()[:-100])
    with pytest.raises(DataSetException, match="too short") as e:
        inline_ctx.load("npy", path=url, storage_options=s3.options)
    assert_clean(e.value, url)
    # an object cut after the data set was opened: the worker's ranged read comes back short
    url = s3.put("s3://trunc-bucket/later.raw", frames.tobytes())
    ds = load_raw(inline_ctx, url, s3.options)
    s3.put(url, frames.tobytes()[:1000])
    with pytest.raises(RaytileError) as e:
        inline_ctx.run_udf(dataset=ds, udf=SumUDF())
    text = "".join(traceback.format_exception(e.value))
    assert display_url(url) in text and ("short read" in text or "too short" in text)
    assert SECRET not in text


class StopServerUDF(rt.UDF):
    """Stops the S3 server while the first partition is processed (inline executor, same process)."""

    server = None

    def get_result_buffers(self):
        return {"s": self.buffer(kind="single", dtype="float64")}

    def process_tile(self, tile):
        if StopServerUDF.server is not None:
            StopServerUDF.server.stop()
            StopServerUDF.server = None
        self.results.s[:] += tile.sum()

    def get_tiling_preferences(self):
        return {"depth": 1, "total_size": 64 * 2}

    def merge(self, dest, src):
        dest.s[:] += src.s


def test_server_stopped_mid_run(inline_ctx, secret_watch):
    with moto_s3() as s:
        frames = np.ones((64,) + SIG, np.uint16)
        url = s.put("s3://mid-bucket/data.raw", frames.tobytes())
        ds = inline_ctx.load("raw", path=url, nav_shape=(64,), sig_shape=SIG, dtype="uint16", num_partitions=4,
                             storage_options=s.options)
        StopServerUDF.server = s.server
        t0 = time.monotonic()
        with pytest.raises(RaytileError) as e:
            inline_ctx.run_udf(dataset=ds, udf=StopServerUDF())
        assert time.monotonic() - t0 < 60
        text = "".join(traceback.format_exception(e.value))
        assert display_url(url) in text and "cannot connect" in text
        assert SECRET not in text
        s.server.start()  # moto_s3 stops it again on exit


def test_transient_failures_are_retried_then_reported():
    store = ObjectStore("s3", {"secret": SECRET})
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise ConnectionResetError("Connection reset by peer")
        return b"ok"

    assert store.call("s3://b/k", "read", flaky) == b"ok"
    assert len(calls) == 3 and calls[2] - calls[1] > calls[1] - calls[0] > 0.1  # backoff grows

    def always_503():
        calls.append(1)
        raise OSError(f"503 ServiceUnavailable, signed https://h/b/k?X-Amz-Signature=abcdef&X-Amz-Credential={SECRET}")

    calls.clear()
    with pytest.raises(DataSetException, match="s3://b/k") as e:
        store.call("s3://b/k", "read", always_503)
    assert len(calls) == 4  # every attempt used
    assert SECRET not in str(e.value) and "abcdef" not in str(e.value)

    def missing():
        calls.append(1)
        raise FileNotFoundError("nope")

    calls.clear()
    with pytest.raises(DataSetException, match="not found"):
        store.call("s3://b/k", "read", missing)
    assert len(calls) == 1  # not transient: no retry


def test_scrub_and_display_url():
    assert display_url("https://user:pw@host:9000/b/k.raw?X-Amz-Signature=zz") == "https://host:9000/b/k.raw"
    assert "zz" not in scrub("GET /b/k?X-Amz-Signature=zz&x=1")
    assert "hunter2" not in scrub("bad secret hunter2 here", ObjectStore("s3", {"secret": "hunter2"}).options)
