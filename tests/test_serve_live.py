"""Serving live runs: the serve app with a Merlin connection configured; a client starts a run on the
next acquisition, watches it grow over HTTP and gets numpy's result at the end. A live run coordinated
by an actor is seen by ``ctx.attach`` viewers. Simulators stop with their context managers; the app
is deleted at the end of the module."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

from raytile.common.errors import ConfigValidationError  # noqa: E402
from raytile.live import LiveContext  # noqa: E402
from raytile.live.detectors.merlin import MerlinSimulator  # noqa: E402
from raytile.live.sources import LiveSource  # noqa: E402
from raytile.serve.encoding import decode_npy  # noqa: E402
from raytile.udf import SumSigUDF, SumUDF  # noqa: E402

pytestmark = pytest.mark.ray

NAV, SIG = (8, 8), (32, 32)


def frames_for(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 0x1000, size=(int(np.prod(NAV)),) + SIG).astype(np.uint32)


@pytest.fixture(scope="module")
def sim():
    """Two acquisitions of 64 frames at 160 frames/s (0.4 s each: partial results have time to show)."""
    frames = frames_for(11)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, frame_rate=160.0, acquisitions=2) as s:
        s.frames = frames
        yield s


@pytest.fixture(scope="module")
def server(serve_url, sim, tmp_path_factory, ray_context):
    from ray import serve

    from raytile.serve import build_app

    root = tmp_path_factory.mktemp("serve_live")
    app = build_app([str(root)], live=[f"merlin://127.0.0.1:{sim.data_port}?api_port={sim.api_port}"],
                    max_rate_hz=50.0, workers=2)
    serve.run(app, name="raytile", route_prefix="/")
    yield serve_url
    serve.delete("raytile")


def arrays(message) -> list[dict[str, np.ndarray]]:
    return [{k: decode_npy(v["npy"]) for k, v in u["buffers"].items()} for u in message["buffers"]]


def test_live_run_over_http_grows_and_equals_numpy(server, sim):
    with httpx.Client(base_url=server, timeout=60) as client:
        listed = client.get("/v1/live").json()["sources"]
        assert [(s["name"], s["detector"], s["busy"]) for s in listed] == [("merlin", "merlin", False)]
        for _ in range(2):  # two acquisitions in a row on the server's one connection
            r = client.post("/v1/live/merlin/runs", json={"udfs": [{"name": "sum"}, {"name": "sumsig"}],
                                                          "frames_per_partition": 8, "timeout": 20})
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]
            busy = client.post("/v1/live/merlin/runs", json={"udfs": [{"name": "sum"}]})
            assert busy.status_code == 409 and busy.json()["field"] == "name"
            with client.stream("GET", f"/v1/runs/{run_id}/stream", params={"max_rate_hz": 50}) as resp:
                messages = [json.loads(line) for line in resp.iter_lines() if line]
            fractions = [m["damage_fraction"] for m in messages]
            assert fractions == sorted(fractions) and fractions[-1] == 1.0
            assert any(0.0 < f < 1.0 for f in fractions), fractions  # seen while it grew
            final = messages[-1]
            assert final["final"] and final["status"] == "finished"
            total, per_frame = arrays(final)
            assert np.allclose(total["intensity"], sim.frames.sum(axis=0), rtol=1e-5)
            assert np.allclose(per_frame["intensity"], sim.frames.sum(axis=(1, 2)).reshape(NAV), rtol=1e-5)
        timeout = client.post("/v1/live/merlin/runs", json={"udfs": [{"name": "sum"}], "timeout": 0.5})
        assert timeout.status_code == 504, timeout.text  # the simulator sent its two acquisitions
        assert client.post("/v1/live/nope/runs", json={"udfs": [{"name": "sum"}]}).status_code == 404


def test_live_sources_parse_and_refuse_bad_urls():
    src = LiveSource.parse("merlin://10.0.0.5:7000?api_port=7001&timeout=2.5")
    assert src.params == {"api_host": "10.0.0.5", "data_host": "10.0.0.5", "data_port": 7000, "api_port": 7001,
                          "timeout": 2.5}
    assert LiveSource.parse("dectris://dcu:8080?data_port=9999").params["api_port"] == 8080
    for bad, what in [("camera://h:1", "unknown detector"), ("merlin://:6342", "needs a host"),
                      ("merlin://h:99999", "not a TCP port")]:
        with pytest.raises(ConfigValidationError, match=what):
            LiveSource.parse(bad)


def test_attach_viewer_sees_a_live_run_grow(ray_context):
    frames = frames_for(12)
    ctx = LiveContext(coordinator="actor", cpus=2)
    try:
        with MerlinSimulator(frames, mode="R12", nav_shape=NAV, frame_rate=200.0) as s, \
                ctx.make_connection("merlin").open(data_host="127.0.0.1", data_port=s.data_port,
                                                   api_host="127.0.0.1", api_port=s.api_port) as conn:
            aq = ctx.make_acquisition(conn=conn, pending_aq=conn.wait_for_acquisition(10.0), frames_per_partition=8)
            run = ctx.run_udf_iter(dataset=aq, udf=[SumUDF(dtype="int64"), SumSigUDF()])
            seen: dict = {"fractions": []}

            def watch() -> None:
                for part in ctx.attach(run.run_id):
                    seen["fractions"].append(part.damage.fraction)
                    seen["last"] = part

            viewer = threading.Thread(target=watch)
            viewer.start()
            owner = list(run)
            viewer.join(30)
        assert not viewer.is_alive()
        assert seen["fractions"][-1] == 1.0 and len(seen["fractions"]) >= 2
        for res in (owner[-1], seen["last"]):
            assert np.array_equal(res.buffers[0]["intensity"].data, frames.sum(axis=0))
            assert np.allclose(res.buffers[1]["intensity"].data, frames.sum(axis=(1, 2)).reshape(NAV))
    finally:
        ctx.close()
