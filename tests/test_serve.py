"""The serve app over HTTP (httpx) on the session's Ray cluster: every endpoint, streamed results
against ``ctx.run_udf`` / numpy, live patches, cancel by DELETE and by disconnect, bad inputs and
limits, 8 concurrent streamed runs, a failing run, and the DeploymentHandle stream."""

from __future__ import annotations

import base64
import json
import os
import threading
import time

import numpy as np
import pytest

pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

from raytile.serve.encoding import decode_npy  # noqa: E402
from raytile.serve.roi import encode_bitmap  # noqa: E402
from raytile.udf import ApplyMasksUDF, SumSigUDF, SumUDF, masks  # noqa: E402

from _browser import canvas_gray, chromium_page  # noqa: E402
from _wait import wait_until  # noqa: E402

pytestmark = pytest.mark.ray

TOKEN = "test-token"
NAV, SIG = (16, 16), (32, 32)
SLOW = "test_serve_udfs.SlowSumSigUDF"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data root with an .npy and a raw file, a subfolder, and a symlink pointing out of the root."""
    base = tmp_path_factory.mktemp("serve")
    root, outside = base / "root", base / "outside"
    root.mkdir(), outside.mkdir()
    rng = np.random.default_rng(7)
    scan = rng.random(NAV + SIG, dtype=np.float32)
    np.save(root / "scan.npy", scan)
    raw = rng.integers(0, 1000, size=(8, 8) + SIG, dtype=np.uint16)
    (root / "sub").mkdir()
    raw.tofile(root / "sub" / "scan.raw")
    np.save(outside / "secret.npy", scan)
    os.symlink(outside / "secret.npy", root / "link.npy")
    return {"root": root, "outside": outside, "scan": scan, "raw": raw}


@pytest.fixture(scope="module")
def server(serve_url, data, ray_context):
    from ray import serve

    from raytile.serve import build_app

    app = build_app([str(data["root"])], token=TOKEN, max_runs=8, udf_modules=["test_serve_udfs"],
                    max_result_bytes=64 << 20, max_roi_bytes=4096, max_rate_hz=50.0, workers=2)
    alive_before = _alive_actors()
    serve.run(app, name="raytile", route_prefix="/")
    yield serve_url
    serve.delete("raytile")
    # the replica's Context actors end with it; later tests (test_soak counts actors) find none left
    wait_until(lambda: _alive_actors() <= alive_before, timeout=60, interval=0.2, what="the replica's actors ended")
    assert _alive_actors() <= alive_before


def _alive_actors() -> int:
    import ray

    return sum(1 for a in ray._private.state.state.actor_table(None).values() if a["State"] == "ALIVE")


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
        yield c


def npy_body(udfs, num_partitions=8, **extra):
    return {"dataset": {"format": "npy", "params": {"path": "scan.npy", "num_partitions": num_partitions}},
            "udfs": udfs, **extra}


def start(client, body) -> str:
    r = client.post("/v1/runs", json=body)
    assert r.status_code == 201, r.text
    return r.json()["run_id"]


def stream(client, run_id, **params) -> list[dict]:
    with client.stream("GET", f"/v1/runs/{run_id}/stream", params=params) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in resp.iter_lines() if line]


def arrays(message) -> list[dict[str, np.ndarray]]:
    return [{k: decode_npy(v["npy"]) for k, v in u["buffers"].items()} for u in message["buffers"]]


def wait_released(client, run_id, timeout=20.0) -> dict:
    def released() -> dict | None:
        st = client.get(f"/v1/runs/{run_id}").json()
        return st if st["released"] else None

    return wait_until(released, timeout=timeout, what=f"run {run_id} to release its coordinator")


RING = {"shape": "ring", "cy": 16, "cx": 16, "ri": 4, "ro": 10}


def ring_ref(scan, ri, ro):
    m = masks.ring(16, 16, ri, ro, SIG)
    return np.einsum("yxab,ab->yx", scan.astype(np.float64), m)


# -- catalogue ---------------------------------------------------------------------------------------

def test_healthz_formats_udfs_datasets(server, client, data):
    assert httpx.get(f"{server}/v1/healthz").json()["status"] == "ok"  # no token needed
    formats = {f["name"]: f["params"] for f in client.get("/v1/formats").json()["formats"]}
    assert "memory" not in formats  # needs an array: not offered over HTTP
    assert formats["raw"]["required"] == ["dtype", "nav_shape", "path", "sig_shape"]
    assert formats["raw"]["properties"]["io_backend"]["enum"] == ["buffered", "direct", "mmap"]
    udfs = {u["name"]: u["params"] for u in client.get("/v1/udfs").json()["udfs"]}
    assert {"sum", "sumsig", "masks", "com", SLOW} <= set(udfs)
    shapes = {b["properties"]["shape"]["const"] for b in udfs["masks"]["properties"]["masks"]["items"]["oneOf"]}
    assert shapes == {"ring", "disk", "point"}
    listing = client.get("/v1/datasets").json()
    rel = {f["relpath"] for f in listing["files"]}
    assert rel == {"scan.npy", os.path.join("sub", "scan.raw")}  # the symlink out of the root is not listed
    sizes = {f["relpath"]: f["bytes"] for f in listing["files"]}
    assert sizes["scan.npy"] == os.path.getsize(data["root"] / "scan.npy")
    # the viewer's colour wheel: a direction's entry, scaled as the page scales it, gives rgb_from_2dvector's bytes
    from raytile.viz.colourwheel import luv_to_rgb, rgb_from_2dvector

    wheel = client.get("/v1/colourwheel").json()
    assert len(wheel["luv"]) == 256
    for y, x, length in [(0.0, 1.0, 1.0), (1.0, 0.0, 0.5), (-0.6, -0.8, 0.25)]:
        t = (np.arctan2(-y, -x) + np.pi) / (2 * np.pi)
        lightness, u, v = wheel["luv"][min(255, int(np.floor(t * 256)))]
        s = length * wheel["chroma"]
        want = rgb_from_2dvector(y=np.array([y * length, y]), x=np.array([x * length, x]))[0]
        np.testing.assert_array_equal((luv_to_rgb([lightness, u * s, v * s]) * 255).astype(np.uint8), want)


def test_token_required(server):
    bare = httpx.Client(base_url=server, timeout=30)
    assert bare.get("/v1/formats").status_code == 401
    assert bare.get("/v1/colourwheel").status_code == 401
    r = bare.post("/v1/runs", json=npy_body([{"name": "sum"}]))
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    wrong = bare.get("/v1/udfs", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


# -- streamed results -------------------------------------------------------------------------------

def test_ndjson_stream_equals_run_udf(client, data, ray_context):
    body = npy_body([{"name": "sum"}, {"name": "sumsig"}, {"name": "masks", "params": {"masks": [RING]}}])
    msgs = stream(client, start(client, body))
    assert [m["seq"] for m in msgs] == sorted(m["seq"] for m in msgs)
    assert all(not m["final"] for m in msgs[:-1]) and msgs[-1]["final"] and msgs[-1]["status"] == "finished"
    done = [m["partitions_done"] for m in msgs]
    assert done == sorted(done) and done[-1] == msgs[-1]["partitions_total"] == 8
    assert msgs[-1]["damage_fraction"] == 1.0 and set(msgs[-1]["param_versions"].values()) == {0}
    got = arrays(msgs[-1])
    ds = ray_context.load("npy", path=str(data["root"] / "scan.npy"))
    ring = ApplyMasksUDF(mask_factories=[lambda: masks.ring(16, 16, 4, 10, SIG)])
    ref = ray_context.run_udf(dataset=ds, udf=[SumUDF(), SumSigUDF(), ring])
    np.testing.assert_allclose(got[0]["intensity"], ref[0]["intensity"].data, rtol=1e-5)
    np.testing.assert_allclose(got[1]["intensity"], ref[1]["intensity"].data, rtol=1e-5)
    np.testing.assert_allclose(got[2]["intensity"], ref[2]["intensity"].data, rtol=1e-5)
    np.testing.assert_allclose(got[2]["intensity"][..., 0], ring_ref(data["scan"], 4, 10), rtol=1e-4)


def test_sse_stream_raw_file_with_roi(client, data, ray_context):
    roi = np.zeros((8, 8), bool)
    roi[1:5, 2:7] = True
    body = {"dataset": {"format": "raw", "params": {"path": "sub/scan.raw", "nav_shape": [8, 8],
                                                    "sig_shape": list(SIG), "dtype": "uint16"}},
            "udfs": [{"name": "sumsig"}], "roi": {"rects": [[1, 2, 5, 7]]}}
    run_id = start(client, body)
    events = []
    with client.stream("GET", f"/v1/runs/{run_id}/stream", headers={"Accept": "text/event-stream"}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        event = {}
        for line in resp.iter_lines():
            if not line:
                events.append(event)
                event = {}
            else:
                key, _, value = line.partition(": ")
                event[key] = value
    assert [e["event"] for e in events][-1] == "final"
    assert all(e["event"] == "partial" for e in events[:-1])
    last = json.loads(events[-1]["data"])
    got = arrays(last)[0]["intensity"]
    ds = ray_context.load("raw", path=str(data["root"] / "sub" / "scan.raw"), nav_shape=(8, 8), sig_shape=SIG,
                          dtype="uint16")
    ref = ray_context.run_udf(dataset=ds, udf=SumSigUDF(), roi=roi)["intensity"].data
    np.testing.assert_allclose(got, ref, rtol=1e-6)  # outside the ROI both are NaN (float results)
    np.testing.assert_allclose(got[roi], data["raw"].reshape(8, 8, -1).sum(axis=-1, dtype=np.int64)[roi], rtol=1e-6)
    # the same ROI as a bitmap gives the same result
    body["roi"] = {"bitmap": encode_bitmap(roi)}
    msgs = stream(client, start(client, body))
    np.testing.assert_array_equal(arrays(msgs[-1])[0]["intensity"], got)


def test_stream_names_a_raw_file_larger_than_its_shapes(client, data):
    # 64 frames in the file, nav_shape reads 32: the run works, and every message says so (issue 20)
    body = {"dataset": {"format": "raw", "params": {"path": "sub/scan.raw", "nav_shape": [4, 8],
                                                    "sig_shape": list(SIG), "dtype": "uint16"}},
            "udfs": [{"name": "sumsig"}]}
    msgs = stream(client, start(client, body))
    assert msgs[-1]["status"] == "finished" and all(m.get("warnings") == msgs[0]["warnings"] for m in msgs)
    (warning,) = msgs[0]["warnings"]
    assert "scan.raw" in warning and f"{data['raw'].nbytes} bytes" in warning and "first 32" in warning
    ref = data["raw"].reshape(64, -1)[:32].sum(axis=-1, dtype=np.int64).reshape(4, 8)
    np.testing.assert_allclose(arrays(msgs[-1])[0]["intensity"], ref, rtol=1e-6)


def test_buffers_as_urls_and_results_endpoint(client, data):
    run_id = start(client, npy_body([{"name": "sum"}, {"name": "sumsig"}]))
    msgs = stream(client, run_id, buffers="url")
    item = msgs[-1]["buffers"][1]["buffers"]["intensity"]
    assert "npy" not in item and item["shape"] == list(NAV)
    r = client.get(item["url"])
    assert r.status_code == 200 and r.headers["x-raytile-status"] == "finished"
    import io
    by_url = np.load(io.BytesIO(r.content))
    by_name = np.load(io.BytesIO(client.get(f"/v1/runs/{run_id}/results/sum/intensity.npy").content))
    np.testing.assert_allclose(by_url, data["scan"].sum(axis=(2, 3)), rtol=1e-5)
    np.testing.assert_allclose(by_name, data["scan"].sum(axis=(0, 1)), rtol=1e-4)
    assert client.get(f"/v1/runs/{run_id}/results/sum/nope.npy").status_code == 404
    assert client.get(f"/v1/runs/{run_id}/results/7/intensity.npy").status_code == 404


def test_rate_limit_latest_wins(client):
    run_id = start(client, npy_body([{"name": SLOW, "params": {"delay": 0.05}}], num_partitions=32,
                                    max_rate_hz=5))
    t0 = time.monotonic()
    stamps, msgs = [], []
    with client.stream("GET", f"/v1/runs/{run_id}/stream") as resp:
        for line in resp.iter_lines():
            stamps.append(time.monotonic() - t0)
            msgs.append(json.loads(line))
    assert msgs[-1]["status"] == "finished" and msgs[-1]["partitions_done"] == 32
    # at most 5 partial messages a second (the server spaces them; arrival times here jitter, so count
    # over the run); the final one follows the run's end at once
    assert 3 <= len(msgs) - 1 <= 1 + 5 * (stamps[-2] - stamps[0]) * 1.1, stamps
    done = [m["partitions_done"] for m in msgs]
    assert max(np.diff(done)) > 1  # later messages fold several partitions in: latest wins


# -- live patches ---------------------------------------------------------------------------------

def _patched_run(client, data, recompute: bool):
    body = npy_body([{"name": "masks", "params": {"masks": [RING]}},
                     {"name": SLOW, "params": {"delay": 0.1}}], num_partitions=16, max_rate_hz=50)
    run_id = start(client, body)
    msgs = []
    with client.stream("GET", f"/v1/runs/{run_id}/stream") as resp:
        for line in resp.iter_lines():
            msgs.append(json.loads(line))
            if len(msgs) == 1:
                r = client.patch(f"/v1/runs/{run_id}", json={
                    "params": [{"masks": [dict(RING, ri=0, ro=6)]}, {}], "recompute": recompute})
                assert r.status_code == 200, r.text
    assert msgs[-1]["status"] == "finished"
    return msgs[-1]


def test_live_patch_without_recompute(client, data):
    last = _patched_run(client, data, recompute=False)
    versions = set(last["param_versions"].values())
    assert versions == {0, 1}  # partitions before the patch kept the old ring
    got = arrays(last)[0]["intensity"][..., 0]
    old, new = ring_ref(data["scan"], 4, 10), ring_ref(data["scan"], 0, 6)
    is_old, is_new = np.isclose(got, old, rtol=1e-4), np.isclose(got, new, rtol=1e-4)
    assert (is_old | is_new).all() and is_old.any() and is_new.any()


def test_live_patch_with_recompute(client, data):
    last = _patched_run(client, data, recompute=True)
    assert set(last["param_versions"].values()) == {1}
    np.testing.assert_allclose(arrays(last)[0]["intensity"][..., 0], ring_ref(data["scan"], 0, 6), rtol=1e-4)
    np.testing.assert_allclose(arrays(last)[1]["intensity"], data["scan"].sum(axis=(2, 3)), rtol=1e-5)


# -- one run id ----------------------------------------------------------------------------------

def test_a_served_run_is_listed_and_attached_by_its_id(client, data):
    """A run started over HTTP is the same run everywhere: `Context.runs()` (what `raytile runs`
    prints) lists it under the id the server gave, and `Context.attach` views it to its end."""
    import raytile as rt

    run_id = start(client, npy_body([{"name": SLOW, "params": {"delay": 0.2}}], num_partitions=32))
    viewer = rt.Context(coordinator="actor")  # another process's view of the cluster: no workers of its own
    try:
        listed = {r["run_id"]: r for r in viewer.runs()}
        assert run_id in listed, sorted(listed)
        assert listed[run_id]["udfs"] == ["SlowSumSigUDF"] and not listed[run_id]["over"]
        run = viewer.attach(run_id)
        assert run.run_id == run_id
        parts = list(run)
    finally:
        viewer.close()
    final = parts[-1]
    assert final.finished and final.partitions_done == 32
    expected = data["scan"].reshape(NAV + (-1,)).sum(axis=-1, dtype=np.float64)
    np.testing.assert_allclose(final.buffers[0]["intensity"].data, expected, rtol=1e-5)
    st = client.get(f"/v1/runs/{run_id}").json()
    assert st["run_id"] == run_id and st["status"] == "finished"


# -- cancel ---------------------------------------------------------------------------------------

def test_cancel_by_delete(client):
    run_id = start(client, npy_body([{"name": SLOW, "params": {"delay": 0.2}}], num_partitions=32))
    r = client.delete(f"/v1/runs/{run_id}")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    msgs = stream(client, run_id)
    assert msgs[-1]["final"] and msgs[-1]["status"] == "cancelled"
    st = wait_released(client, run_id)
    assert st["partitions_done"] < 32
    assert client.patch(f"/v1/runs/{run_id}", json={"params": [{}]}).status_code == 409


def test_disconnect_cancels_the_run(client):
    run_id = start(client, npy_body([{"name": SLOW, "params": {"delay": 0.2}}], num_partitions=32))
    with client.stream("GET", f"/v1/runs/{run_id}/stream") as resp:
        for _ in resp.iter_lines():
            break  # leave after the first message: the connection closes
    st = wait_released(client, run_id)
    assert st["status"] == "cancelled" and st["cancel_reason"] == "the client disconnected"
    assert st["partitions_done"] < 32
    assert client.get("/v1/healthz").json()["active_runs"] == 0  # no orphan run left


# -- bad input and limits ----------------------------------------------------------------------------

BAD = [
    ({"dataset": {"format": "nope", "params": {}}, "udfs": [{"name": "sum"}]}, 400, "dataset.format"),
    (npy_body([{"name": "nope"}]), 400, "udfs[0].name"),
    (npy_body([{"name": "masks", "params": {"masks": [dict(RING, ro="x")]}}]), 400, "udfs[0].params.masks[0].ro"),
    (npy_body([{"name": "masks", "params": {"masks": [{"shape": "star", "cy": 1, "cx": 1}]}}]), 400,
     "udfs[0].params.masks[0].shape"),
    (npy_body([{"name": "masks", "params": {"masks": [dict(RING, ri=9, ro=3)]}}]), 400, "udfs[0].params"),
    (npy_body([{"name": "sum", "params": {"code": "import os"}}]), 400, "udfs[0].params.code"),
    (npy_body([{"name": "sum"}], num_partitions=0), 400, "dataset.params.num_partitions"),
    ({"dataset": {"format": "raw", "params": {"path": "sub/scan.raw", "nav_shape": [0, 8], "sig_shape": [32, 32],
                                              "dtype": "uint16"}}, "udfs": [{"name": "sum"}]}, 400,
     "dataset.params.nav_shape[0]"),
    ({"dataset": {"format": "raw", "params": {"path": "sub/scan.raw", "nav_shape": [8, 8], "sig_shape": [32, 32],
                                              "dtype": "object"}}, "udfs": [{"name": "sum"}]}, 400,
     "dataset.params.dtype"),
    (dict(npy_body([{"name": "sum"}]), pickle="gASV"), 400, "body.pickle"),
    ({"dataset": {"format": "npy", "params": {"path": "../outside/secret.npy"}}, "udfs": [{"name": "sum"}]}, 403,
     "dataset.params.path"),
    ({"dataset": {"format": "npy", "params": {"path": "/etc/passwd"}}, "udfs": [{"name": "sum"}]}, 403,
     "dataset.params.path"),
    ({"dataset": {"format": "npy", "params": {"path": "link.npy"}}, "udfs": [{"name": "sum"}]}, 403,
     "dataset.params.path"),
    ({"dataset": {"format": "raw", "params": {"path": ["sub/scan.raw", "../outside/secret.npy"], "nav_shape": [8, 8],
                                              "sig_shape": [32, 32], "dtype": "uint16"}}, "udfs": [{"name": "sum"}]},
     403, "dataset.params.path[1]"),
    (npy_body([{"name": "sumsig"}], roi={"rects": [[0, 0, 1, 1]] * 400}), 413, "roi"),
    (npy_body([{"name": "sumsig"}], roi={"rects": [[0, 0, 99, 1]]}), 400, "roi.rects[0]"),
    (npy_body([{"name": "sumsig"}], roi={"bitmap": "AAAA"}), 400, "roi.bitmap"),
    (npy_body([{"name": "test_serve_udfs.BigResultUDF", "params": {"n": 32768}}]), 413, "udfs"),
]


@pytest.mark.parametrize("body,status,field", BAD, ids=[f"{s}-{f}" for _, s, f in BAD])
def test_bad_requests(client, body, status, field):
    r = client.post("/v1/runs", json=body)
    assert r.status_code == status, r.text
    out = r.json()
    assert set(out) >= {"error", "detail"} and out["field"] == field, out


def test_bad_json_unknown_run_and_patch_errors(client):
    r = client.post("/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "body"
    assert client.get("/v1/runs/feedbeef").status_code == 404
    assert client.get("/v1/runs/feedbeef/stream").status_code == 404
    assert client.delete("/v1/runs/feedbeef").status_code == 404
    run_id = start(client, npy_body([{"name": SLOW, "params": {"delay": 0.1}}], num_partitions=16))
    r = client.patch(f"/v1/runs/{run_id}", json={"params": [{"delay": "slow"}]})
    assert r.status_code == 400 and r.json()["field"] == "body.params[0].delay"
    r = client.patch(f"/v1/runs/{run_id}", json={"params": [{}, {}]})
    assert r.status_code == 400 and r.json()["field"] == "body.params"
    assert client.get(f"/v1/runs/{run_id}/stream", params={"buffers": "pickle"}).status_code == 400
    client.delete(f"/v1/runs/{run_id}")
    wait_released(client, run_id)


def test_too_many_runs(client):
    ids = [start(client, npy_body([{"name": SLOW, "params": {"delay": 0.1}}], num_partitions=64))
           for _ in range(8)]
    try:
        r = client.post("/v1/runs", json=npy_body([{"name": "sum"}]))
        assert r.status_code == 429 and r.json()["error"] == "too_many_runs"
        assert 1 <= int(r.headers["retry-after"]) <= 30, r.headers  # RFC 9110 delay-seconds
    finally:
        for run_id in ids:
            assert client.delete(f"/v1/runs/{run_id}").status_code == 200
    for run_id in ids:
        wait_released(client, run_id)
    assert client.get("/v1/healthz").json()["active_runs"] == 0
    stream(client, start(client, npy_body([{"name": "sumsig"}])))  # room again


def test_eight_concurrent_streamed_runs(server, data):
    radii = [2, 3, 4, 5, 6, 7, 8, 9]
    results: dict[int, dict] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
                disk = {"shape": "disk", "cy": 16, "cx": 16, "r": radii[i]}
                results[i] = stream(c, start(c, npy_body([{"name": "masks", "params": {"masks": [disk]}}])))[-1]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    scan = data["scan"].astype(np.float64)
    for i, last in results.items():
        assert last["status"] == "finished"
        ref = np.einsum("yxab,ab->yx", scan, masks.disk(16, 16, radii[i], SIG))
        np.testing.assert_allclose(arrays(last)[0]["intensity"][..., 0], ref, rtol=1e-4)
    assert len(results) == 8


# -- errors inside a run ------------------------------------------------------------------------------

def test_error_in_run_reaches_client_and_server_stays_up(client, data):
    run_id = start(client, npy_body([{"name": "test_serve_udfs.FailingUDF", "params": {"fail_at": 64}}],
                                    num_partitions=8))
    last = stream(client, run_id)[-1]
    assert last["final"] and last["status"] == "error"
    err = last["error"]
    assert err["udf"] == "FailingUDF" and err["partition"] == 2 and "boom on purpose" in err["message"]
    assert client.get("/v1/healthz").json()["status"] == "ok"
    msgs = stream(client, start(client, npy_body([{"name": "sumsig"}])))
    np.testing.assert_allclose(arrays(msgs[-1])[0]["intensity"], data["scan"].sum(axis=(2, 3)), rtol=1e-5)


# -- through a DeploymentHandle ----------------------------------------------------------------------

def test_deployment_handle_stream(server, data):
    from ray import serve

    handle = serve.get_app_handle("raytile")
    gen = handle.options(stream=True).stream_run.remote(npy_body([{"name": "sumsig"}]))
    msgs = list(gen)
    assert msgs[-1]["final"] and msgs[-1]["status"] == "finished"
    np.testing.assert_allclose(arrays(msgs[-1])[0]["intensity"], data["scan"].sum(axis=(2, 3)), rtol=1e-5)


# -- WebSocket and the viewer page ------------------------------------------------------------------

def _ws_url(server, run_id, token=TOKEN):
    q = f"?token={token}" if token else ""
    return f"{server.replace('http://', 'ws://')}/v1/runs/{run_id}/ws{q}"


def test_websocket_stream_with_live_patch(server, client, data):
    ws_client = pytest.importorskip("websockets.sync.client")
    body = npy_body([{"name": "masks", "params": {"masks": [RING]}}, {"name": SLOW, "params": {"delay": 0.1}}],
                    num_partitions=16, max_rate_hz=50)
    run_id = start(client, body)
    msgs, replies = [], []
    with ws_client.connect(_ws_url(server, run_id), max_size=None) as ws:
        for frame in ws:
            m = json.loads(frame)
            if m["type"] != "message":
                replies.append(m)
                continue
            msgs.append(m)
            if len(msgs) == 1:
                ws.send(json.dumps({"type": "patch", "params": [{"masks": [{"shape": "disk"}]}, {}]}))
                ws.send(json.dumps({"type": "patch", "params": [{"masks": [dict(RING, ri=0, ro=6)]}, {}],
                                    "recompute": True}))
            if m["final"]:
                break
    assert replies[0]["type"] == "error" and replies[0]["status"] == 400
    assert replies[0]["field"] == "body.params[0].masks[0].cy"
    assert replies[1]["type"] == "patched" and replies[1]["recompute"] is True
    last = msgs[-1]
    assert last["status"] == "finished" and set(last["param_versions"].values()) == {1}
    np.testing.assert_allclose(arrays(last)[0]["intensity"][..., 0], ring_ref(data["scan"], 0, 6), rtol=1e-4)


def test_websocket_close_cancels_and_token_is_checked(server, client):
    ws_client = pytest.importorskip("websockets.sync.client")
    run_id = start(client, npy_body([{"name": SLOW, "params": {"delay": 0.2}}], num_partitions=32))
    from websockets.exceptions import ConnectionClosed

    for url, code in [(_ws_url(server, run_id, token="wrong"), 4401), (_ws_url(server, "feedbeef"), 4404),
                      (_ws_url(server, run_id) + "&buffers=pickle", 4400)]:
        with ws_client.connect(url) as ws:
            with pytest.raises(ConnectionClosed) as e:
                ws.recv(timeout=10)
        assert e.value.rcvd.code == code
    with ws_client.connect(_ws_url(server, run_id), max_size=None) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "message"
    st = wait_released(client, run_id)
    assert st["status"] == "cancelled" and st["cancel_reason"] == "the client disconnected"
    assert client.get("/v1/healthz").json()["active_runs"] == 0


def test_viewer_page_is_self_contained(server, client):
    r = httpx.get(f"{server}/", timeout=30)  # the page itself needs no token; its API calls do
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert '<canvas id="a${n}-${p}"' in page and "new WebSocket(" in page  # each analysis's panels
    assert "http://" not in page and "https://" not in page  # nothing fetched from the internet
    files = {f["relpath"]: f for f in client.get("/v1/datasets").json()["files"]}
    assert files["scan.npy"]["shape"] == list(NAV + SIG) and files["scan.npy"]["format"] == "npy"


def _expected_gray(scan, ri, ro) -> np.ndarray:
    v = np.einsum("yxab,ab->yx", scan.astype(np.float64), masks.ring(15.5, 15.5, ri, ro, SIG))
    return np.round(255 * (v - v.min()) / (v.max() - v.min()))


def test_viewer_in_headless_chromium(server, data, tmp_path_factory):
    shots = os.environ.get("RAYTILE_ARTIFACTS") or str(tmp_path_factory.mktemp("viewer"))
    with chromium_page() as (page, errors):
        page.goto(f"{server}/?token={TOKEN}")
        page.wait_for_function("document.getElementById('dataset').options.length > 0")
        page.select_option("#dataset", os.path.realpath(data["root"] / "scan.npy"))
        page.wait_for_function(f"document.getElementById('sig_shape').value === '{SIG[0]},{SIG[1]}'", timeout=30_000)
        page.select_option("#a0-type", "ring")
        page.fill("#partitions", "4")
        page.click("#a0-start")
        page.wait_for_function("""() => { const s = window.raytileViewer;
            return s.last && s.last.final && document.getElementById('a0-result').width > 1; }""", timeout=60_000)
        first_run = page.evaluate("window.raytileViewer.runId")
        ri, ro = float(page.input_value("#a0-ri")), float(page.input_value("#a0-ro"))
        before = canvas_gray(page, "a0-result")
        assert not errors, errors
        np.testing.assert_allclose(before, _expected_gray(data["scan"], ri, ro), atol=1)
        page.screenshot(path=os.path.join(shots, "viewer-before.png"), full_page=True)
        # drag on the detector from the inner radius inwards: the ring's inner radius follows the mouse
        box = page.locator("#a0-detector_overlay").bounding_box()
        scale = box["width"] / SIG[1]
        cx, cy = box["x"] + 16 * scale, box["y"] + 16 * scale  # the centre of pixel 15.5 (pixel i spans [i, i + 1))
        page.mouse.move(cx + ri * scale, cy)
        page.mouse.down()
        for r in np.linspace(ri, 2, 6):
            page.mouse.move(cx + r * scale, cy)
        page.mouse.up()
        page.wait_for_function(f"""() => {{ const s = window.raytileViewer;
            const a = s.analyses[0];
            return s.runId !== {json.dumps(first_run)} && !a.patchTimer && !a.starting && !a.restart
                   && s.last && s.last.run_id === s.runId && s.last.final; }}""",
                               timeout=60_000)
        ri2, ro2 = float(page.input_value("#a0-ri")), float(page.input_value("#a0-ro"))
        assert ri2 < ri and ro2 == ro
        after = canvas_gray(page, "a0-result")
        np.testing.assert_allclose(after, _expected_gray(data["scan"], ri2, ro2), atol=1)
        assert (after != before).any()
        assert page.evaluate("document.getElementById('a0-progress').value") == 1
        assert page.evaluate("window.raytileViewer.last.partitions_total") == 4
        page.screenshot(path=os.path.join(shots, "viewer-after.png"), full_page=True)
    assert os.path.getsize(os.path.join(shots, "viewer-after.png")) > 1000


def _linear_gray(img) -> np.ndarray:
    img = np.asarray(img, np.float64)
    return np.round(255 * (img - img.min()) / (img.max() - img.min()))


def _off_rings(shape, ri, ro, margin=2.0) -> np.ndarray:
    """Pixels of the detector panel that the drawn rings do not touch."""
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    d = np.hypot(yy - (shape[0] - 1) / 2, xx - (shape[1] - 1) / 2)
    return (np.abs(d - ri) > margin) & (np.abs(d - ro) > margin)


def test_viewer_detector_panel_aspect_colour_bar_log_scale_and_picked_frame(server, data, tmp_path_factory):
    # issue 20: a 4x16 scan keeps its aspect, the detector panel shows the sum frame (then a clicked position's
    # frame) under the ring, colour bars give their range, the log scale changes the pixels, radii fit the frame
    shots = os.environ.get("RAYTILE_ARTIFACTS") or str(tmp_path_factory.mktemp("viewer2"))
    frames = data["raw"].reshape(64, *SIG).astype(np.float64)  # the raw file read as a 4x16 scan
    with chromium_page() as (page, errors):
        page.set_viewport_size({"width": 1280, "height": 1100})  # the scan panel in view, to be clicked
        page.goto(f"{server}/?token={TOKEN}")
        page.wait_for_function("document.getElementById('dataset').options.length > 0")
        page.select_option("#dataset", os.path.realpath(data["root"] / "sub" / "scan.raw"))
        page.fill("#nav_shape", "4,16")
        page.fill("#sig_shape", "32,32")
        page.dispatch_event("#sig_shape", "change")
        page.fill("#dtype", "uint16")
        ri, ro = float(page.input_value("#a0-ri")), float(page.input_value("#a0-ro"))
        assert (ri, ro) == (4.0, 12.0)  # a quarter and three quarters of half the 32-pixel frame
        page.select_option("#a0-type", "ring")
        page.click("#a0-start")
        page.wait_for_function("""() => { const a = window.raytileViewer.analyses[0];
            return a.last && a.last.final && a.sum !== null; }""", timeout=60_000)
        assert not errors, errors
        # the scan image: its aspect kept, its colour bar's range the values' range
        box = page.locator("#a0-result").bounding_box()
        assert box["width"] / box["height"] == pytest.approx(16 / 4, rel=0.03)
        ring = np.einsum("nab,ab->n", frames, masks.ring(15.5, 15.5, ri, ro, SIG)).reshape(4, 16)
        rng = page.evaluate("Object.assign({}, document.getElementById('a0-result_range').dataset)")
        assert float(rng["lo"]) == pytest.approx(ring.min(), rel=1e-6)
        assert float(rng["hi"]) == pytest.approx(ring.max(), rel=1e-6) and rng["scale"] == "linear"
        np.testing.assert_allclose(canvas_gray(page, "a0-result"), _linear_gray(ring), atol=1)
        # the detector panel: the sum frame under the rings, not a black square
        det = canvas_gray(page, "a0-detector")
        off = _off_rings(SIG, ri, ro)
        assert det.std() > 10
        np.testing.assert_allclose(det[off], _linear_gray(frames.sum(axis=0))[off], atol=1)
        drng = page.evaluate("Object.assign({}, document.getElementById('a0-detector_range').dataset)")
        assert float(drng["hi"]) == pytest.approx(frames.sum(axis=0).max(), rel=1e-6)
        page.screenshot(path=os.path.join(shots, "viewer-sum-frame.png"), full_page=True)
        # the log scale changes what is shown, in both panels
        page.check("#a0-log")
        assert (canvas_gray(page, "a0-detector") != det).sum() > det.size // 4
        assert page.evaluate("document.getElementById('a0-detector_range').dataset.scale") == "log"
        assert (canvas_gray(page, "a0-result") != _linear_gray(ring)).any()
        page.uncheck("#a0-log")
        # a click on the scan image at (y 2, x 11): that position's frame in the detector panel
        page.mouse.click(box["x"] + (11 + 0.5) * box["width"] / 16, box["y"] + (2 + 0.5) * box["height"] / 4)
        page.wait_for_function("window.raytileViewer.analyses[0].picks === 1", timeout=60_000)
        assert page.evaluate("window.raytileViewer.analyses[0].frame.pos") == [2, 11]
        picked = canvas_gray(page, "a0-detector")
        np.testing.assert_allclose(picked[off], _linear_gray(frames[2 * 16 + 11])[off], atol=1)
        assert "y 2, x 11" in page.inner_text("#a0-detector_title")
        page.screenshot(path=os.path.join(shots, "viewer-picked-frame.png"), full_page=True)
        assert not errors, errors


def test_post_with_stream_is_one_request(client, data):
    body = npy_body([{"name": "sumsig"}])
    with client.stream("POST", "/v1/runs", params={"stream": "true"}, json=body) as resp:
        assert resp.status_code == 201 and resp.headers["content-type"].startswith("application/x-ndjson")
        run_id = resp.headers["x-raytile-run-id"]
        msgs = [json.loads(line) for line in resp.iter_lines() if line]
    assert msgs[-1]["final"] and msgs[-1]["status"] == "finished" and msgs[-1]["run_id"] == run_id
    np.testing.assert_allclose(arrays(msgs[-1])[0]["intensity"], data["scan"].sum(axis=(2, 3)), rtol=1e-5)
    active = client.get("/v1/healthz").json()["active_runs"]
    r = client.post("/v1/runs", params={"stream": "true", "buffers": "pickle"}, json=body)
    assert r.status_code == 400 and r.json()["field"] == "buffers"
    assert client.get("/v1/healthz").json()["active_runs"] == active  # refused before a run started


def _slow_read_stream(server_url: str, path: str, done, rate_bps: int = 8192) -> bytes:
    """The raw HTTP response of GET ``path``, read at ``rate_bps`` (with a small receive buffer, so the
    server's socket fills) until ``done()`` holds, then as fast as it comes until the server closes."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(server_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays small
    sock.settimeout(60)
    sock.connect((url.hostname, url.port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {TOKEN}\r\n"
                 "Connection: close\r\n\r\n".encode())
    out = bytearray()
    try:
        deadline = time.monotonic() + 120
        while not done() and time.monotonic() < deadline:  # slow: 1 KiB each 1/8 s
            chunk = sock.recv(rate_bps // 8)
            if not chunk:
                return bytes(out)
            out += chunk
            time.sleep(0.125)
        while chunk := sock.recv(1 << 20):
            out += chunk
    finally:
        sock.close()
    return bytes(out)


def test_a_slow_reader_gets_the_final_message_behind_few_partials(client, server, data):
    """A reader at 8 KiB/s of ~120 KB messages: partial states are skipped while its socket is full, so
    the final message waits behind about one message, not behind every partial (issue 37: it waited
    behind all of them, ~88 KB each, and never arrived)."""
    udfs = [{"name": SLOW, "params": {"delay": 0.1}}, {"name": "test_serve_udfs.BigResultUDF", "params": {"n": 22}}]
    run_id = start(client, npy_body(udfs, num_partitions=64))  # 64 partials at up to 50 Hz, over ~3 s
    over_at: list[float] = []

    def run_over_a_while_ago() -> bool:  # the slow reading goes on 2 s past the run's end
        if not over_at and client.get(f"/v1/runs/{run_id}").json()["status"] != "running":
            over_at.append(time.monotonic())
        return bool(over_at) and time.monotonic() - over_at[0] > 2.0

    raw = _slow_read_stream(server, f"/v1/runs/{run_id}/stream", run_over_a_while_ago)
    lines = [line for line in raw.split(b"\n") if b'"seq"' in line]
    finals = [line for line in lines if b'"final": true' in line]
    assert len(finals) == 1, raw[:300]
    partials = len(lines) - 1
    assert partials <= 8, f"{partials} partial messages were queued ahead of the final one"
    final = json.loads(finals[0][finals[0].index(b"{"):])
    assert final["status"] == "finished", final.get("error")
    np.testing.assert_allclose(arrays(final)[0]["intensity"], data["scan"].reshape(NAV[0] * NAV[1], -1)
                               .sum(axis=1).reshape(NAV), rtol=1e-5)
