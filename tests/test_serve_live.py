"""Serving live runs: the serve app with a Merlin connection configured; a client starts a run on the
next acquisition, watches it grow over HTTP and gets numpy's result at the end. A live run coordinated
by an actor is seen by ``ctx.attach`` viewers. Simulators stop with their context managers; the app
is deleted at the end of the module."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
from typing import Iterator

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

from _browser import canvas_gray, chromium_page  # noqa: E402
from _wait import wait_until  # noqa: E402

NAV, SIG = (8, 8), (32, 32)


def frames_for(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 0x1000, size=(int(np.prod(NAV)),) + SIG).astype(np.uint32)


@contextlib.contextmanager
def merlin_sim(seed: int, **kwargs) -> Iterator[MerlinSimulator]:
    """A U16 Merlin simulator of ``frames_for(seed)``, which it keeps as ``.frames`` for the checks."""
    frames = frames_for(seed)
    with MerlinSimulator(frames, mode="U16", nav_shape=NAV, **kwargs) as s:
        s.frames = frames
        yield s


@pytest.fixture(scope="module")
def sim():
    """Two acquisitions of 64 frames at 40 frames/s (1.6 s each: partial results have time to show, also when
    the run starts late on a busy machine)."""
    with merlin_sim(11, frame_rate=40.0, acquisitions=2) as s:
        yield s


@pytest.fixture(scope="module")
def viewer_sim():
    """One slower acquisition for the viewer in chromium."""
    with merlin_sim(13, frame_rate=80.0) as s:
        yield s


@pytest.fixture(scope="module")
def follow_sim():
    """Three acquisitions for the viewer following a source (1.6 s each)."""
    with merlin_sim(16, frame_rate=40.0, acquisitions=3) as s:
        yield s


@pytest.fixture(scope="module")
def dying_sim():
    """A sender that closes the connection after 20 of 64 frames."""
    with merlin_sim(14, frame_rate=400.0, die_after=20) as s:
        yield s


@pytest.fixture(scope="module")
def binned_sim():
    """One acquisition for a source with a preprocessing pipeline (dark, gain, 2x2 binning)."""
    with merlin_sim(15) as s:
        yield s


DARK, GAIN = 20.0, 0.5


def preproc_yaml(path) -> str:
    import yaml

    h, w = SIG
    config = {"name": "calib_bin", "streams": {
        "frame": {"shape": [h, w], "dtype": "uint16"}, "dark": {"shape": [h, w], "dtype": "float32"},
        "gain": {"shape": [h, w], "dtype": "float32"}, "cal": {"shape": [h, w], "dtype": "float32"},
        "binned": {"shape": [h // 2, w // 2], "dtype": "float32"}}, "stages": [
        {"name": "camera", "kind": "sh_frames", "output": "frame", "params": {"n_sub": 4, "frames": 1}},
        {"name": "dark", "kind": "constant", "output": "dark", "params": {"value": DARK}},
        {"name": "gain", "kind": "constant", "output": "gain", "params": {"value": GAIN}},
        {"name": "correct", "kind": "calibrate", "input": "frame", "auxiliary": ["dark", "gain"], "output": "cal"},
        {"name": "bin", "kind": "binning", "input": "cal", "output": "binned", "params": {"factor": 2}}]}
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture(scope="module")
def server(serve_url, sim, viewer_sim, follow_sim, dying_sim, binned_sim, tmp_path_factory, ray_context):
    from ray import serve

    from raytile.serve import build_app

    root = tmp_path_factory.mktemp("serve_live")
    pipeline = preproc_yaml(root / "calib_bin.yaml")
    app = build_app([str(root)], live=[f"merlin://127.0.0.1:{sim.data_port}?api_port={sim.api_port}",
                                       f"viewer=merlin://127.0.0.1:{viewer_sim.data_port}?api_port={viewer_sim.api_port}",
                                       f"dying=merlin://127.0.0.1:{dying_sim.data_port}?api_port={dying_sim.api_port}",
                                       f"binned=merlin://127.0.0.1:{binned_sim.data_port}?api_port={binned_sim.api_port}"
                                       f"&preprocess={pipeline}",
                                       f"follow=merlin://127.0.0.1:{follow_sim.data_port}?api_port={follow_sim.api_port}"],
                    max_rate_hz=50.0, workers=2)
    alive_before = _alive_actors()
    serve.run(app, name="raytile", route_prefix="/")
    yield serve_url
    serve.delete("raytile")
    # the replica's Context actors (and its detector connections) end with it
    wait_until(lambda: _alive_actors() <= alive_before, timeout=60, interval=0.2, what="the replica's actors ended")


def _alive_actors() -> int:
    import ray

    return sum(1 for a in ray._private.state.state.actor_table(None).values() if a["State"] == "ALIVE")


def arrays(message) -> list[dict[str, np.ndarray]]:
    return [{k: decode_npy(v["npy"]) for k, v in u["buffers"].items()} for u in message["buffers"]]


def test_live_run_over_http_grows_and_equals_numpy(server, sim):
    with httpx.Client(base_url=server, timeout=60) as client:
        listed = client.get("/v1/live").json()["sources"]
        assert [(s["name"], s["detector"], s["busy"]) for s in listed] == [("merlin", "merlin", False),
                                                                            ("viewer", "merlin", False),
                                                                            ("dying", "merlin", False),
                                                                            ("binned", "merlin", False),
                                                                            ("follow", "merlin", False)]
        for first in (True, False):  # two acquisitions in a row on the server's one connection; the second
            # may be sent whole (into the receiver's slab) before its run starts: it is checked for its values
            r = client.post("/v1/live/merlin/runs", json={"udfs": [{"name": "sum"}, {"name": "sumsig"}],
                                                          "frames_per_partition": 8, "timeout": 20})
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]
            if first:
                busy = client.post("/v1/live/merlin/runs", json={"udfs": [{"name": "sum"}]})
                assert busy.status_code == 409 and busy.json()["field"] == "name"
            with client.stream("GET", f"/v1/runs/{run_id}/stream", params={"max_rate_hz": 50}) as resp:
                messages = [json.loads(line) for line in resp.iter_lines() if line]
            fractions = [m["damage_fraction"] for m in messages]
            assert fractions == sorted(fractions) and fractions[-1] == 1.0
            assert any(0.0 < f < 1.0 for f in fractions) or not first, fractions  # seen while it grew
            final = messages[-1]
            assert final["final"] and final["status"] == "finished"
            total, per_frame = arrays(final)
            assert np.allclose(total["intensity"], sim.frames.sum(axis=0), rtol=1e-5)
            assert np.allclose(per_frame["intensity"], sim.frames.sum(axis=(1, 2)).reshape(NAV), rtol=1e-5)
        timeout = client.post("/v1/live/merlin/runs", json={"udfs": [{"name": "sum"}], "timeout": 0.5})
        assert timeout.status_code == 504, timeout.text  # the simulator sent its two acquisitions
        assert client.post("/v1/live/nope/runs", json={"udfs": [{"name": "sum"}]}).status_code == 404


def test_a_sender_killed_mid_scan_ends_the_served_run_with_its_error(server):
    with httpx.Client(base_url=server, timeout=60) as client:
        r = client.post("/v1/live/dying/runs", json={"udfs": [{"name": "sum"}], "frames_per_partition": 8})
        assert r.status_code == 201, r.text
        with client.stream("GET", f"/v1/runs/{r.json()['run_id']}/stream") as resp:
            final = [json.loads(line) for line in resp.iter_lines() if line][-1]
        assert final["final"] and final["status"] == "error"
        assert final["error"]["type"] == "AcquisitionError" and "after 20 of 64 frames" in final["error"]["message"]
        dying = [s for s in client.get("/v1/live").json()["sources"] if s["name"] == "dying"][0]
        assert not dying["busy"]  # the source is free for the next run


def test_a_source_with_a_preprocessing_pipeline(server, binned_sim):
    """The server's pipeline (dark, gain, 2x2 binning) runs on the workers in front of the client's UDFs."""
    with httpx.Client(base_url=server, timeout=60) as client:
        listed = {s["name"]: s for s in client.get("/v1/live").json()["sources"]}
        assert listed["binned"]["preprocess"].startswith("frame [32, 32] uint16 -> correct -> bin -> binned [16, 16]")
        r = client.post("/v1/live/binned/runs?stream=true", json={"udfs": [{"name": "sum"}, {"name": "sumsig"}],
                                                                  "frames_per_partition": 16})
        assert r.status_code == 201, r.text
        final = [json.loads(line) for line in r.text.splitlines() if line][-1]
    assert final["final"] and final["status"] == "finished", final.get("error")
    total, per_frame = arrays(final)
    cal = (binned_sim.frames.astype(np.float32) - np.float32(DARK)) * np.float32(GAIN)
    binned = cal.astype(np.float64).reshape(-1, 16, 2, 16, 2).sum(axis=(2, 4))
    assert total["intensity"].shape == (16, 16)
    assert np.allclose(total["intensity"], binned.sum(axis=0), rtol=1e-5)
    assert np.allclose(per_frame["intensity"], binned.sum(axis=(1, 2)).reshape(NAV), rtol=1e-5)


def test_live_sources_parse_and_refuse_bad_urls():
    src = LiveSource.parse("merlin://10.0.0.5:7000?api_port=7001&timeout=2.5")
    assert src.params == {"api_host": "10.0.0.5", "data_host": "10.0.0.5", "data_port": 7000, "api_port": 7001,
                          "timeout": 2.5}
    assert LiveSource.parse("dectris://dcu:8080?data_port=9999").params["api_port"] == 8080
    for bad, what in [("camera://h:1", "unknown detector"), ("merlin://:6342", "needs a host"),
                      ("merlin://h:99999", "not a TCP port"), ("merlin://h:1?preprocess=/nope.yaml", "cannot read")]:
        with pytest.raises(ConfigValidationError, match=what):
            LiveSource.parse(bad)


def test_raytile_serve_refuses_a_bad_live_url_before_ray_starts(tmp_path):
    out = subprocess.run([sys.executable, "-m", "raytile.cli", "serve", "--data-root", str(tmp_path),
                          "--live", "camera://127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "unknown detector 'camera'" in out.stderr, out.stderr


def test_attach_viewer_sees_a_live_run_grow(ray_context):
    frames = frames_for(12)
    alive_before = _alive_actors()
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
    wait_until(lambda: _alive_actors() <= alive_before, timeout=60, interval=0.2, what="the run's actors ended")


def open_live_panel(page, server: str, source: str) -> None:
    """The viewer, with ``source`` chosen in its live panel and the per-frame sum as the analysis."""
    page.goto(server + "/")
    page.wait_for_function(f"""Array.from(document.getElementById('live_source').options)
                              .some((o) => o.value === '{source}')""")
    page.select_option("#live_source", source)
    page.select_option("#a0-type", "sumsig")


def assert_scan_drawn(gray: np.ndarray, frames: np.ndarray) -> None:
    """The scan image drawn (gray, scaled to 0..255) is numpy's per-frame sum of ``frames``."""
    v = frames.sum(axis=(1, 2)).reshape(NAV).astype(np.float64)
    np.testing.assert_allclose(gray, np.round(255 * (v - v.min()) / (v.max() - v.min())), atol=1)


def test_viewer_shows_a_live_run_growing_in_headless_chromium(server, viewer_sim):
    with chromium_page() as (page, errors):
        open_live_panel(page, server, "viewer")
        page.click("#start_live")
        progress = []
        page.expose_function("noteProgress", lambda v: progress.append(v))
        page.evaluate("""() => new MutationObserver(() => noteProgress(document.getElementById('a0-status').textContent))
            .observe(document.getElementById('a0-status'), {childList: true, characterData: true, subtree: true})""")
        page.wait_for_function("() => { const s = window.raytileViewer; return s.last && s.last.final; }",
                               timeout=60_000)
        gray = canvas_gray(page, "a0-result")
        draws = page.evaluate("window.raytileViewer.draws")
        sig = page.evaluate("window.raytileViewer.sig")
    assert not errors, errors
    merged = [int(m) for t in progress for m in re.findall(r"merged (\d+)%", t)]
    assert draws >= 2 and any(0 < m < 100 for m in merged) and merged[-1] == 100, progress  # seen growing
    assert sig == list(SIG)  # learnt from the live run's sum frame
    assert_scan_drawn(gray, viewer_sim.frames)


def test_viewer_follows_a_source_from_acquisition_to_acquisition(server, follow_sim):
    """"follow" starts a run on each acquisition as the last one ends; unticked, the viewer stops after the
    run it shows."""
    with chromium_page() as (page, errors):
        open_live_panel(page, server, "follow")
        page.check("#live_follow")
        page.click("#start_live")
        page.wait_for_function("() => window.raytileViewer.liveRuns.length === 3", timeout=90_000)
        page.uncheck("#live_follow")  # the third acquisition is the simulator's last
        page.wait_for_function("""() => { const s = window.raytileViewer;
                                          return s.runId === s.liveRuns[2] && s.last && s.last.final; }""",
                               timeout=60_000)
        page.wait_for_timeout(500)
        runs = page.evaluate("window.raytileViewer.liveRuns")
        gray = canvas_gray(page, "a0-result")
    assert not errors, errors
    assert len(set(runs)) == 3, runs  # one run an acquisition, and none after the follow was unticked
    with httpx.Client(base_url=server, timeout=30) as client:
        statuses = [client.get(f"/v1/runs/{run}").json()["status"] for run in runs]
    assert statuses == ["finished"] * 3, statuses
    assert_scan_drawn(gray, follow_sim.frames)
