"""Pieces of raytile.serve without Serve or Ray: the JSON checker, paths inside the roots, ROIs,
mask shapes, the data set cache and stream encodings, each against a plain reference."""

from __future__ import annotations

import base64
import json
import os
import time

import numpy as np
import pytest

from raytile.serve.dataset_cache import DataSetCache
from raytile.serve.encoding import decode_npy, ndjson, npy_bytes, sse
from raytile.serve.errors import BadRequest, Forbidden, PayloadTooLarge
from raytile.serve.mask_shapes import MASK_SCHEMA, MaskShape
from raytile.serve.paths import DataRoots
from raytile.serve.roi import decode_roi, encode_bitmap
from raytile.serve.validation import check
from raytile.udf import masks


def test_check_names_the_field():
    schema = {"type": "object", "additionalProperties": False, "required": ["a"],
              "properties": {"a": {"type": "array", "items": {"type": "integer", "minimum": 1}}}}
    assert check({"a": [1, 2]}, schema, "body") == {"a": [1, 2]}
    for value, field in [({}, "body.a"), ({"a": [1, 0]}, "body.a[1]"), ({"a": [1], "b": 2}, "body.b"),
                         ({"a": [True]}, "body.a[0]"), ([], "body")]:
        with pytest.raises(BadRequest) as e:
            check(value, schema, "body")
        assert e.value.field == field
    with pytest.raises(BadRequest, match="must be a number"):
        check(float("nan"), {"type": "number"}, "x")  # JSON has no NaN


def test_mask_shapes_equal_the_mask_functions():
    spec = {"shape": "ring", "cy": 7.5, "cx": 8, "ri": 2, "ro": 5}
    check(spec, MASK_SCHEMA, "m")
    np.testing.assert_array_equal(MaskShape.from_json(spec, (16, 16))(), masks.ring(7.5, 8, 2, 5, (16, 16)))
    np.testing.assert_array_equal(MaskShape.from_json({"shape": "point", "cy": 3, "cx": 4}, (8, 8))(),
                                  masks.point(3, 4, (8, 8)))
    with pytest.raises(BadRequest) as e:
        check({"shape": "disk", "cy": 1, "cx": 1}, MASK_SCHEMA, "m")
    assert e.value.field == "m.r"


def test_paths_stay_inside_the_roots(tmp_path):
    root, out = tmp_path / "root", tmp_path / "out"
    (root / "d").mkdir(parents=True)
    out.mkdir()
    (root / "d" / "a.raw").write_bytes(b"x")
    (out / "s.raw").write_bytes(b"y")
    os.symlink(out / "s.raw", root / "link.raw")
    os.symlink(root / "d" / "a.raw", root / "inner.raw")
    roots = DataRoots([str(root)])
    real = os.path.realpath(root / "d" / "a.raw")
    assert roots.resolve("d/a.raw", "p") == real
    assert roots.resolve(real, "p") == real
    assert roots.resolve("inner.raw", "p") == real  # a link inside the root is fine
    for bad in ["../out/s.raw", str(out / "s.raw"), "link.raw", "d/../../out/s.raw", "/etc/passwd"]:
        with pytest.raises(Forbidden):
            roots.resolve(bad, "p")
    assert roots.resolve_many("d/*.raw", "p") == [real]
    with pytest.raises(Forbidden):
        roots.resolve_many(str(out / "*.raw"), "p")
    assert {f["relpath"] for f in roots.listing()} == {os.path.join("d", "a.raw"), "inner.raw"}


def test_roi_forms():
    rng = np.random.default_rng(1)
    roi = rng.random((5, 7)) > 0.5
    np.testing.assert_array_equal(decode_roi({"bitmap": encode_bitmap(roi)}, (5, 7), 1 << 20), roi)
    ref = np.zeros((5, 7), bool)
    ref[1:3, 2:6] = True
    ref[4, 0] = True
    np.testing.assert_array_equal(decode_roi({"rects": [[1, 2, 3, 6], [4, 0, 5, 1]]}, (5, 7), 1 << 20), ref)
    assert decode_roi(None, (5, 7), 10) is None
    with pytest.raises(PayloadTooLarge):
        decode_roi({"rects": [[0, 0, 1, 1]] * 10}, (5, 7), 50)
    with pytest.raises(BadRequest):
        decode_roi({"bitmap": encode_bitmap(roi), "rects": []}, (5, 7), 1 << 20)


def test_dataset_cache_reopens_changed_files(tmp_path):
    f = tmp_path / "a.npy"
    np.save(f, np.zeros(3))
    cache = DataSetCache(size=2)
    opened = []

    def opener():
        opened.append(object())
        return opened[-1]

    key = ("npy", {"path": str(f)})
    first = cache.get(key, opener)
    assert cache.get(key, opener) is first and cache.hits == 1
    np.save(f, np.zeros(5))  # another size: opened again
    assert cache.get(key, opener) is not first
    cache.get(("npy", {"path": "b"}), opener)
    cache.get(("npy", {"path": "c"}), opener)
    assert len(opened) == 4 and cache.get(key, opener) is not opened[1]  # LRU: the oldest went


def test_encodings_round_trip():
    a = np.arange(12, dtype=">u2").reshape(3, 4)
    np.testing.assert_array_equal(decode_npy(base64.b64encode(npy_bytes(a)).decode()), a)
    msg = {"seq": 3, "final": True}
    assert json.loads(ndjson(msg)) == msg
    event = sse(msg).decode().split("\n")
    assert event[:2] == ["id: 3", "event: final"] and json.loads(event[2][len("data: "):]) == msg


def test_retry_after_is_the_typical_run_left_in_whole_seconds():
    from raytile.serve.errors import TooManyRuns
    from raytile.serve.registry import MAX_RETRY_AFTER_S, retry_after_s

    assert retry_after_s([0.5, 2.0], [10.0, 6.0, 8.0]) == 6  # median 8 s, the oldest ran 2 s
    assert retry_after_s([9.5], [10.0]) == 1  # 0.5 s left: at least one second
    assert retry_after_s([], []) == 1  # nothing known: a second
    assert retry_after_s([1.0], [3600.0]) == MAX_RETRY_AFTER_S
    err = TooManyRuns(None, "full", retry_after_s=7)
    assert (err.status, err.headers()) == (429, {"Retry-After": "7"})
    assert TooManyRuns(None, "full").headers() == {"Retry-After": "1"}


def test_socket_backlog_sees_what_a_client_has_not_read():
    """A real TCP connection on 127.0.0.1: what the server sent and the client did not read is the backlog."""
    import socket

    from raytile.serve.backlog import FREE_BYTES, SocketBacklog

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(listener.getsockname())
        conn, peer = listener.accept()
        try:
            backlog = SocketBacklog(conn.getsockname(), peer)
            assert backlog.bytes() == 0 and backlog.free()
            conn.setblocking(False)
            sent = 0
            try:
                while sent < 4 << 20:
                    sent += conn.send(b"x" * 65536)
            except BlockingIOError:  # the socket is full
                pass
            assert backlog.bytes() > FREE_BYTES and not backlog.free()
            client.settimeout(10)
            got = 0
            while got < sent:
                got += len(client.recv(1 << 20))
            assert got == sent
            deadline = time.monotonic() + 10
            while backlog.bytes() and time.monotonic() < deadline:  # the last ACK is on its way
                time.sleep(0.01)
            assert backlog.bytes() == 0 and backlog.free()
            assert SocketBacklog(conn.getsockname(), ("127.0.0.1", 1)).bytes() is None  # no such connection
            assert SocketBacklog(None, peer).free()  # unknown: never holds a message back
        finally:
            conn.close()
            client.close()


def test_served_run_is_a_plain_viewer_of_its_run():
    """ServedRun shows the run's own newest result (no copy of its own), numbers messages by the results the
    run gave plus its end, and learns the coordinator's release from one join (no sleep-poll of ``done``)."""
    import asyncio

    import raytile as rt
    from raytile.serve.registry import RELEASE_TIMEOUT_S, STATUS_FINISHED, ServedRun

    data = np.random.default_rng(5).random((4, 6, 8, 8), dtype=np.float32)
    ctx = rt.Context(executor="inline")
    try:
        ds = ctx.load("memory", data=data, sig_dims=2, num_partitions=4)
        run = ctx.run_udf_iter(dataset=ds, udf=rt.udf.SumUDF(), sync=False)
        joins: list[float | None] = []
        real_join = run.join

        def join(timeout: float | None = None) -> bool:
            joins.append(timeout)
            return real_join(timeout)

        run.join = join  # type: ignore[method-assign]
        served = ServedRun(run, ["sum"], rate_hz=10.0)

        async def follow() -> list[int]:
            served.start()
            seqs = [served.seq]
            while not served.over:
                await served.wait_newer(seqs[-1])
                seqs.append(served.seq)
                assert served.latest is run.last  # the run's own result, not a copy
            await served._follower  # type: ignore[misc]
            return seqs

        seqs = asyncio.run(follow())
    finally:
        ctx.close()
    assert served.status == STATUS_FINISHED and served.released
    assert seqs == sorted(seqs) and seqs[-1] == run.taken + 1 and run.taken >= 1
    np.testing.assert_allclose(served.latest.buffers[0]["intensity"].data, data.sum(axis=(0, 1)), rtol=1e-5)
    assert joins == [RELEASE_TIMEOUT_S]
    assert "latest" not in vars(served) and "seq" not in vars(served)
