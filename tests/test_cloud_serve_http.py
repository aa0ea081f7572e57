"""Ray Serve over HTTP with an object store data root (moto S3 on 127.0.0.1): a run started and streamed
over HTTP reads ``s3://`` objects in the workers and gives numpy's result; a missing key, a path outside
the root and a client's own credentials are clear HTTP errors that name the URL and never the secret."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("s3fs")
httpx = pytest.importorskip("httpx")

from raytile.serve.encoding import decode_npy  # noqa: E402
from _s3 import SECRET, moto_s3  # noqa: E402
from _wait import wait_until  # noqa: E402

pytestmark = pytest.mark.ray

TOKEN = "s3-test-token"
ROOT = "s3://serve-http-bucket/lab"
NAV, SIG = (6, 8), (16, 16)


@pytest.fixture(scope="module")
def s3_data():
    with moto_s3() as s:
        rng = np.random.default_rng(11)
        s.scan = rng.integers(0, 3000, NAV + SIG, dtype=np.uint16)
        s.put(f"{ROOT}/runs/scan.raw", s.scan.tobytes())
        s.put("s3://serve-http-bucket/elsewhere/scan.raw", s.scan.tobytes())
        yield s


@pytest.fixture(scope="module")
def server(serve_url, s3_data, ray_context):
    from ray import serve

    from raytile.serve import build_app

    app = build_app([ROOT], token=TOKEN, max_runs=4, storage_options=s3_data.options, workers=2)
    serve.run(app, name="raytile-s3", route_prefix="/")
    try:
        yield serve_url
    finally:
        serve.delete("raytile-s3")


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as c:
        yield c


def raw_body(path: str, **params) -> dict:
    return {"dataset": {"format": "raw", "params": {"path": path, "nav_shape": list(NAV), "sig_shape": list(SIG),
                                                    "dtype": "uint16", "num_partitions": 3, **params}},
            "udfs": [{"name": "sum"}, {"name": "sumsig"}]}


def test_run_over_http_reads_the_object_store(client, s3_data):
    listing = client.get("/v1/datasets").json()
    assert listing["roots"] == [ROOT]
    assert {f["relpath"]: f["bytes"] for f in listing["files"]} == {"runs/scan.raw": s3_data.scan.nbytes}
    r = client.post("/v1/runs", json=raw_body("runs/scan.raw"))
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]
    with client.stream("GET", f"/v1/runs/{run_id}/stream") as resp:
        assert resp.status_code == 200
        msgs = [json.loads(line) for line in resp.iter_lines() if line]
    last = msgs[-1]
    assert last["final"] and last["status"] == "finished", last.get("error")
    got = [{k: decode_npy(v["npy"]) for k, v in u["buffers"].items()} for u in last["buffers"]]
    flat = s3_data.scan.reshape(-1, *SIG).astype(np.float64)
    np.testing.assert_allclose(got[0]["intensity"], flat.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(got[1]["intensity"], flat.sum(axis=(1, 2)).reshape(NAV), rtol=1e-6)
    wait_until(lambda: client.get(f"/v1/runs/{run_id}").json()["released"], timeout=30, what="the run released")


def test_wrong_key_or_url_is_a_clear_http_error_without_secrets(client):
    r = client.post("/v1/runs", json=raw_body("runs/missing.raw"))
    assert r.status_code == 400, r.text
    assert f"{ROOT}/runs/missing.raw" in r.text and "not found" in r.text
    for outside in ("s3://serve-http-bucket/elsewhere/scan.raw", "../elsewhere/scan.raw", "s3://other/scan.raw"):
        r2 = client.post("/v1/runs", json=raw_body(outside))
        assert r2.status_code == 403, r2.text
    # a client may not bring its own credentials or endpoint
    r3 = client.post("/v1/runs", json=raw_body("runs/scan.raw", storage_options={"endpoint_url": "http://evil:1"}))
    assert r3.status_code == 400 and "storage_options" in r3.text
    for resp in (r, r2, r3):
        assert SECRET not in resp.text
