"""The viewer as a place to work (issue 35), in headless chromium against the serve app's routes.

The app runs under uvicorn in a thread with an inline Context (no Ray: the page and the HTTP API are
what is tested here; tests/test_serve.py drives the viewer through Ray Serve too). Every image the page
draws is compared on its pixels with numpy on the same data; downloads are read back with numpy and PIL.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import threading
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

import raytile as rt  # noqa: E402
from raytile.runtime.inline import InlineExecutor  # noqa: E402
from raytile.serve.config import ServeConfig  # noqa: E402
from raytile.serve.routes import make_api  # noqa: E402
from raytile.serve.service import Service  # noqa: E402
from raytile.viz.colourwheel import rgb_from_2dvector  # noqa: E402

from _browser import canvas_gray, chromium_page  # noqa: E402

TOKEN = "viewer-token"
NAV, SIG = (6, 10), (24, 24)
RAW_NAV = (4, 5)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data root: a scan (.npy) of a disk that moves with the scan position, a raw file, a text file."""
    root = tmp_path_factory.mktemp("viewer")
    rng = np.random.default_rng(35)
    yy, xx = np.mgrid[:SIG[0], :SIG[1]]
    scan = np.empty(NAV + SIG, np.float32)
    for y in range(NAV[0]):
        for x in range(NAV[1]):
            d = np.hypot(yy - 11 - 0.6 * y, xx - 12 + 0.4 * x)
            scan[y, x] = 50 * (d < 6) + rng.random(SIG) * 20
    np.save(root / "scan.npy", scan)
    raw = rng.integers(0, 1000, size=RAW_NAV + SIG, dtype=np.uint16)
    (root / "sub").mkdir()
    raw.tofile(root / "sub" / "frames.raw")
    (root / "notes.txt").write_text("not a data set")
    return {"root": root, "scan": scan, "raw": raw}


@contextlib.contextmanager
def _serving(ctx, data):
    """The app under uvicorn on 127.0.0.1 (a free port) with ``ctx``; its URL; stopped at the end."""
    service = Service(ServeConfig.make([str(data["root"])], token=TOKEN), ctx=ctx)
    api = make_api()
    api.state.service = service
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(api, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(30)
    sock.close()
    service.close()
    assert not thread.is_alive()


@pytest.fixture(scope="module")
def server(data):
    """The app with an inline Context."""
    with _serving(rt.Context(executor="inline"), data) as url:
        yield url


class _SlowInline(InlineExecutor):
    """The inline executor, each partition's result held back 0.25 s: a run that is still going when the
    page patches it."""

    def result(self, handle):
        time.sleep(0.25)
        return super().result(handle)


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
        yield c


# -- numpy references ---------------------------------------------------------------------------------------

def _dist2(cy, cx):
    yy, xx = np.mgrid[:SIG[0], :SIG[1]]
    return (yy - cy) ** 2 + (xx - cx) ** 2


def ring_ref(scan, cy, cx, ri, ro):
    d2 = _dist2(cy, cx)
    return np.einsum("yxab,ab->yx", scan.astype(np.float64), ((d2 > ri ** 2) & (d2 <= ro ** 2)).astype(np.float64))


def disk_ref(scan, cy, cx, r):
    return np.einsum("yxab,ab->yx", scan.astype(np.float64), (_dist2(cy, cx) <= r ** 2).astype(np.float64))


def com_ref(scan, cy, cx, r):
    """(y, x) shifts of each frame's centre of mass within the disk d <= r of (cy, cx)."""
    region = (_dist2(cy, cx) <= r ** 2).astype(np.float64)
    yy, xx = np.mgrid[:SIG[0], :SIG[1]]
    f = scan.astype(np.float64) * region
    s = f.sum(axis=(2, 3))
    return (f * yy).sum(axis=(2, 3)) / s - cy, (f * xx).sum(axis=(2, 3)) / s - cx


def gray(v):
    """The viewer's gray levels: linear from the finite minimum to the maximum, NaN black."""
    v = np.asarray(v, np.float64)
    ok = np.isfinite(v)
    lo, hi = v[ok].min(), v[ok].max()
    return np.where(ok, np.round(255 * (np.where(ok, v, lo) - lo) / (hi - lo)), 0)


# -- driving the page ---------------------------------------------------------------------------------------

def analysis(page, n, key):
    return page.evaluate(f"window.raytileViewer.analyses[{n}][{json.dumps(key)}]")


def wait_final(page, n, not_run=None, timeout=60_000):
    """Until analysis ``n`` shows the final message of its current run (another than ``not_run``)."""
    other = f"&& a.runId !== {json.dumps(not_run)}" if not_run else ""
    page.wait_for_function(f"""() => {{ const a = window.raytileViewer.analyses[{n}];
        return a && !a.starting && !a.restart && !a.patchTimer && a.last && a.last.final
               && a.last.run_id === a.runId {other}; }}""", timeout=timeout)


def add(page, kind) -> int:
    page.select_option("#new_type", kind)
    page.click("#add")
    return page.evaluate("window.raytileViewer.analyses.length") - 1


def open_scan(page, server, data):
    page.goto(f"{server}/?token={TOKEN}")
    page.wait_for_function("document.getElementById('dataset').options.length > 0", timeout=30_000)
    page.select_option("#dataset", os.path.realpath(data["root"] / "scan.npy"))
    page.wait_for_function(f"document.getElementById('sig_shape').value === '{SIG[0]},{SIG[1]}'", timeout=30_000)


def scan_point(page, n, y, x, nav=NAV):
    """Page coordinates of scan position (y, x) of analysis ``n``."""
    box = page.locator(f"#a{n}-result_overlay").bounding_box()
    return box["x"] + (x + 0.5) * box["width"] / nav[1], box["y"] + (y + 0.5) * box["height"] / nav[0]


def detector_point(page, n, y, x):
    """Page coordinates of detector position (y, x) (pixel i spans [i, i + 1)) of analysis ``n``."""
    box = page.locator(f"#a{n}-detector_overlay").bounding_box()
    return box["x"] + (x + 0.5) * box["width"] / SIG[1], box["y"] + (y + 0.5) * box["height"] / SIG[0]


def test_listing_detection_and_a_clear_error_for_empty_raw_shapes(client, data):
    files = {f["relpath"]: f for f in client.get("/v1/datasets").json()["files"]}
    assert set(files) == {"scan.npy", os.path.join("sub", "frames.raw")}  # notes.txt is no data set
    assert files["scan.npy"]["format"] == "npy" and files[os.path.join("sub", "frames.raw")]["format"] == "raw"
    det = client.post("/v1/datasets/detect", json={"path": "scan.npy"}).json()
    assert (det["format"], det["nav_shape"], det["sig_shape"], det["dtype"]) == ("npy", list(NAV), list(SIG), "float32")
    raw = client.post("/v1/datasets/detect", json={"path": "sub/frames.raw"}).json()
    assert raw["format"] == "raw" and set(raw["needs"]) == {"nav_shape", "sig_shape", "dtype"}
    r = client.post("/v1/datasets/detect", json={"path": "notes.txt"})
    assert r.status_code == 400 and r.json()["field"] == "body.path"
    # a form's empty shape fields: the parameter named, and what to enter, not "must be an integer, got None"
    body = {"dataset": {"format": "raw", "params": {"path": "sub/frames.raw", "nav_shape": [None], "sig_shape": [24, 24],
                                                    "dtype": "uint16"}}, "udfs": [{"name": "sum"}]}
    r = client.post("/v1/runs", json=body)
    assert r.status_code == 400 and r.json()["field"] == "dataset.params.nav_shape", r.text
    assert "None" not in r.json()["detail"] and "e.g. [64, 64]" in r.json()["detail"]
    del body["dataset"]["params"]["dtype"]
    r = client.post("/v1/runs", json=body)
    assert r.status_code == 400 and r.json()["field"] == "dataset.params.nav_shape", r.text  # the first in the form
    body["dataset"]["params"]["nav_shape"] = list(RAW_NAV)
    r = client.post("/v1/runs", json=body)
    assert r.status_code == 400 and r.json()["field"] == "dataset.params.dtype" and "uint16" in r.json()["detail"]


def test_downloads_equal_numpy(client, data):
    from PIL import Image

    scan = data["scan"]
    body = {"dataset": {"format": "npy", "params": {"path": "scan.npy"}},
            "udfs": [{"name": "masks", "params": {"masks": [{"shape": "ring", "cy": 11, "cx": 12.5, "ri": 3, "ro": 8}]}},
                     {"name": "com", "params": {"cy": 11, "cx": 12, "r": 9}}, {"name": "max"}],
            "roi": {"rects": [[1, 2, 5, 9]]}}
    with client.stream("POST", "/v1/runs", params={"stream": "true"}, json=body) as resp:
        assert resp.status_code == 201
        run = resp.headers["x-raytile-run-id"]
        assert json.loads(list(resp.iter_lines())[-1])["status"] == "finished"
    roi = np.zeros(NAV, bool)
    roi[1:5, 2:9] = True
    ring = np.where(roi, ring_ref(scan, 11, 12.5, 3, 8), np.nan)
    r = client.get(f"/v1/runs/{run}/results/0.npz")
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    npz = np.load(io.BytesIO(r.content))
    assert set(npz.files) == {"intensity"}
    np.testing.assert_allclose(npz["intensity"][..., 0], ring, rtol=1e-5)
    png = np.asarray(Image.open(io.BytesIO(client.get(f"/v1/runs/{run}/results/0/intensity.png").content)))
    assert png.shape == NAV and png.dtype == np.uint8
    np.testing.assert_allclose(png, gray(ring), atol=1)
    com = np.load(io.BytesIO(client.get(f"/v1/runs/{run}/results/com.npz").content))
    fy, fx = com_ref(scan, 11, 12, 9)
    np.testing.assert_allclose(com["field"][roi], np.stack([fy, fx], -1)[roi], rtol=1e-6, atol=1e-9)
    div = np.asarray(Image.open(io.BytesIO(client.get(f"/v1/runs/{run}/results/1/divergence.png").content)))
    full_fy, full_fx = np.where(roi, fy, np.nan), np.where(roi, fx, np.nan)
    np.testing.assert_allclose(div, gray(np.gradient(full_fy, axis=0) + np.gradient(full_fx, axis=1)), atol=1)
    field = np.asarray(Image.open(io.BytesIO(client.get(f"/v1/runs/{run}/results/1/field.png",
                                                        params={"colour": "true"}).content)))
    assert field.shape == NAV + (3,) and (field[roi].std(axis=0) > 5).all()  # hues vary with the direction
    mx = np.asarray(Image.open(io.BytesIO(client.get(f"/v1/runs/{run}/results/max/intensity.png").content)))
    np.testing.assert_allclose(mx, gray(scan[roi].max(axis=0)), atol=1)
    assert client.get(f"/v1/runs/{run}/results/1/regression.png").status_code == 400  # not an image
    assert client.get(f"/v1/runs/{run}/results/0/intensity.png", params={"index": 1}).status_code == 400
    assert client.get(f"/v1/runs/{run}/results/7.npz").status_code == 404


def test_each_analysis_in_chromium(server, data, tmp_path_factory):
    """Issue 35's viewer: every analysis against numpy on pixels, a ring's centre moved, a frame picked with
    its marker, a ROI drawn, results downloaded, two analyses side by side, all of it kept over a reload."""
    shots = os.environ.get("RAYTILE_ARTIFACTS") or str(tmp_path_factory.mktemp("viewer-shots"))
    scan, sig_c = data["scan"], (SIG[0] - 1) / 2
    with chromium_page() as (page, errors):
        page.set_viewport_size({"width": 1500, "height": 1000})
        open_scan(page, server, data)
        options = page.eval_on_selector_all("#dataset option", "els => els.map((e) => e.textContent)")
        assert [o.split()[0] for o in options] == ["scan.npy", os.path.join("sub", "frames.raw")]
        assert (page.input_value("#nav_shape"), page.input_value("#dtype")) == ("6,10", "float32")  # detected
        # the first analysis, a ring, at the frame's centre
        assert analysis(page, 0, "type") == "ring"
        ri, ro = analysis(page, 0, "ri"), analysis(page, 0, "ro")
        assert (analysis(page, 0, "cy"), analysis(page, 0, "cx"), ri, ro) == (sig_c, sig_c, 3.0, 9.0)
        page.fill("#a0-ro", "8")
        page.dispatch_event("#a0-ro", "change")
        page.fill("#partitions", "3")
        page.click("#a0-start")
        wait_final(page, 0)
        first = analysis(page, 0, "runId")
        np.testing.assert_allclose(canvas_gray(page, "a0-result"), gray(ring_ref(scan, sig_c, sig_c, ri, 8)), atol=1)
        np.testing.assert_allclose(canvas_gray(page, "a0-detector"), gray(scan.sum(axis=(0, 1))), atol=1)
        rng = page.evaluate("Object.assign({}, document.getElementById('a0-result_range').dataset)")
        assert rng["units"] == "counts" and float(rng["hi"]) == pytest.approx(ring_ref(scan, sig_c, sig_c, ri, 8).max())
        ticks = page.eval_on_selector_all("#a0-result_x span", "els => els.map((e) => e.textContent)")
        assert ticks[-1] == "x (scan px)" and ticks[0] == "0" and all(int(t) < NAV[1] for t in ticks[:-1])
        # drag the ring's centre by (+2, -3) detector pixels: a new virtual image, equal to numpy's
        page.mouse.move(*detector_point(page, 0, sig_c, sig_c))
        page.mouse.down()
        for t in np.linspace(0, 1, 5):
            page.mouse.move(*detector_point(page, 0, sig_c + 2 * t, sig_c - 3 * t))
        page.mouse.up()
        wait_final(page, 0, not_run=first)
        cy, cx = analysis(page, 0, "cy"), analysis(page, 0, "cx")
        assert (cy, cx) == pytest.approx((sig_c + 2, sig_c - 3), abs=0.11) and analysis(page, 0, "ro") == 8
        assert page.input_value("#a0-cy") == str(cy)
        moved = canvas_gray(page, "a0-result")
        np.testing.assert_allclose(moved, gray(ring_ref(scan, cy, cx, ri, 8)), atol=1)
        assert (moved != gray(ring_ref(scan, sig_c, sig_c, ri, 8))).any()
        # pick a frame: its pixels in the detector panel, a marker on the scan at that position
        page.mouse.click(*scan_point(page, 0, 4, 7))
        page.wait_for_function("window.raytileViewer.analyses[0].picks === 1", timeout=60_000)
        assert analysis(page, 0, "picked") == [4, 7]
        np.testing.assert_allclose(canvas_gray(page, "a0-detector"), gray(scan[4, 7]), atol=1)
        assert "y 4, x 7" in page.inner_text("#a0-detector_title")
        h, w, ink = page.evaluate("""() => { const o = document.getElementById('a0-result_overlay');
            return [o.height, o.width, Array.from(o.getContext('2d').getImageData(0, 0, o.width, o.height).data)]; }""")
        ys, xs = np.nonzero(np.array(ink).reshape(h, w, 4)[..., 3])
        assert len(ys) > 20  # the marker: a box and a cross centred on the picked position
        assert (ys.mean() * NAV[0] / h, xs.mean() * NAV[1] / w) == pytest.approx((4.5, 7.5), abs=0.3)
        # a second analysis beside it: a disk (virtual bright field), with a rectangle ROI drawn on its scan
        n = add(page, "disk")
        page.click(f"#a{n}-start")
        wait_final(page, n)
        r = analysis(page, n, "ro")
        np.testing.assert_allclose(canvas_gray(page, f"a{n}-result"), gray(disk_ref(scan, sig_c, sig_c, r)), atol=1)
        boxes = [page.locator(f"#a{i}").bounding_box() for i in (0, n)]
        assert boxes[1]["x"] > boxes[0]["x"] + boxes[0]["width"] - 1 and abs(boxes[1]["y"] - boxes[0]["y"]) < 2
        page.screenshot(path=os.path.join(shots, "viewer-two-analyses.png"))
        before = analysis(page, n, "runId")
        page.select_option(f"#a{n}-roitool", "rect")
        page.mouse.move(*scan_point(page, n, 1.1, 2.1))
        page.mouse.down()
        page.mouse.move(*scan_point(page, n, 3, 5))
        page.mouse.move(*scan_point(page, n, 4.9, 8.9))
        page.mouse.up()
        wait_final(page, n, not_run=before)
        assert analysis(page, n, "roi") == {"kind": "rect", "y0": 1, "x0": 2, "y1": 6, "x1": 10}
        roi = np.zeros(NAV, bool)
        roi[1:6, 2:10] = True
        want = gray(np.where(roi, disk_ref(scan, sig_c, sig_c, r), np.nan))
        np.testing.assert_allclose(canvas_gray(page, f"a{n}-result"), want, atol=1)
        # downloads: the disk's result as .npz and as PNG, read back with numpy and PIL
        with page.expect_download(timeout=30_000) as dl:
            page.click(f"#a{n}-npz")
        path = os.path.join(shots, "disk.npz")
        dl.value.save_as(path)
        got = np.load(path)["intensity"][..., 0]
        np.testing.assert_allclose(got[roi], disk_ref(scan, sig_c, sig_c, r)[roi], rtol=1e-5)
        assert np.isnan(got[~roi]).all()
        with page.expect_download(timeout=30_000) as dl:
            page.click(f"#a{n}-png")
        from PIL import Image

        png = np.asarray(Image.open(dl.value.path()))
        np.testing.assert_allclose(png, want, atol=1)
        # the other analyses, one card each
        n_point = add(page, "point")
        page.click(f"#a{n_point}-start")
        wait_final(page, n_point)
        iy, ix = int(round(sig_c)), int(round(sig_c))
        np.testing.assert_allclose(canvas_gray(page, f"a{n_point}-result"), gray(scan[:, :, iy, ix]), atol=1)
        n_com = add(page, "com")
        page.fill(f"#a{n_com}-ri", "0")
        page.dispatch_event(f"#a{n_com}-ri", "change")
        page.click(f"#a{n_com}-start")
        wait_final(page, n_com)
        ro_com = analysis(page, n_com, "ro")
        fy, fx = com_ref(scan, sig_c, sig_c, ro_com)
        shown = {}
        for show, want_com in [("magnitude", np.hypot(fy, fx)),
                               ("divergence", np.gradient(fy, axis=0) + np.gradient(fx, axis=1)),
                               ("curl", np.gradient(fy, axis=1) - np.gradient(fx, axis=0))]:
            page.select_option(f"#a{n_com}-show", show)
            shown[show] = canvas_gray(page, f"a{n_com}-result")
            np.testing.assert_allclose(shown[show], gray(want_com), atol=1, err_msg=show)
        assert page.evaluate(f"document.getElementById('a{n_com}-result_range').dataset.units") == "px / scan px"
        page.select_option(f"#a{n_com}-show", "field")
        rgb = page.evaluate(f"""() => {{ const c = document.getElementById('a{n_com}-result');
            return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data); }}""")
        rgb = np.array(rgb).reshape(NAV + (4,))[..., :3]
        assert (rgb.std(axis=(0, 1)) > 5).all()  # a colour field, not gray
        # LiberTEM's colours, as rgb_from_2dvector gives them for the field the page drew (to a byte: the
        # browser's pow and sums round on their own)
        drawn = page.evaluate(f"Array.from(bufferOf(window.raytileViewer.analyses[{n_com}], [0, 'field']).data)")
        drawn = np.array(drawn, np.float64).reshape(NAV + (2,))
        np.testing.assert_allclose(drawn, np.stack([fy, fx], -1), rtol=1e-5, atol=1e-6)
        want_rgb = rgb_from_2dvector(y=drawn[..., 0], x=drawn[..., 1])
        assert np.abs(rgb - want_rgb.astype(int)).max() <= 1
        page.select_option(f"#a{n_com}-show", "arrows")
        ink = page.evaluate(f"""() => {{ const o = document.getElementById('a{n_com}-result_overlay');
            return Array.from(o.getContext('2d').getImageData(0, 0, o.width, o.height).data).filter((v, i) => i % 4 === 3 && v > 0).length; }}""")
        assert ink > 50  # arrows drawn over the magnitude
        for kind, scan_want, det_want in [("sumsig", scan.sum(axis=(2, 3)), scan.sum(axis=(0, 1))),
                                          ("sum", scan.sum(axis=(2, 3)), scan.sum(axis=(0, 1))),
                                          ("max", scan.sum(axis=(2, 3)), scan.max(axis=(0, 1)))]:
            k = add(page, kind)
            page.click(f"#a{k}-start")
            wait_final(page, k)
            np.testing.assert_allclose(canvas_gray(page, f"a{k}-result"), gray(scan_want), atol=1, err_msg=kind)
            np.testing.assert_allclose(canvas_gray(page, f"a{k}-detector"), gray(det_want), atol=1, err_msg=kind)
        assert not errors, errors
        page.screenshot(path=os.path.join(shots, "viewer-every-analysis.png"), full_page=True)
        # a reload: the data set and every analysis come back (geometry, ROI, display) and run again
        kept = page.evaluate("""window.raytileViewer.analyses.map((a) => ({type: a.type, cy: a.cy, cx: a.cx, ri: a.ri,
                                 ro: a.ro, roi: a.roi, show: a.show}))""")
        page.reload()
        page.wait_for_function(f"window.raytileViewer.analyses.length === {len(kept)}", timeout=30_000)
        for i in range(len(kept)):
            wait_final(page, i)
        again = page.evaluate("""window.raytileViewer.analyses.map((a) => ({type: a.type, cy: a.cy, cx: a.cx, ri: a.ri,
                                  ro: a.ro, roi: a.roi, show: a.show}))""")
        assert again == kept
        assert page.input_value("#dataset") == os.path.realpath(data["root"] / "scan.npy")
        np.testing.assert_allclose(canvas_gray(page, "a0-result"), gray(ring_ref(scan, cy, cx, ri, 8)), atol=1)
        np.testing.assert_allclose(canvas_gray(page, f"a{n}-result"), want, atol=1)
        assert not errors, errors


def test_raw_file_fields_and_token_edit_keep_the_data_set(server, data):
    raw = data["raw"].astype(np.float64)
    with chromium_page() as (page, errors):
        page.set_viewport_size({"width": 1500, "height": 1200})
        page.goto(f"{server}/?token={TOKEN}")
        page.wait_for_function("document.getElementById('dataset').options.length > 0", timeout=30_000)
        page.select_option("#dataset", os.path.realpath(data["root"] / "sub" / "frames.raw"))
        page.wait_for_function("document.getElementById('format').value === 'raw'")
        assert [page.input_value(f"#{k}") for k in ("nav_shape", "sig_shape", "dtype")] == ["", "", ""]
        assert "enter nav shape" in page.inner_text("#data_hint")  # what to enter, no greyed example values
        page.click("#a0-start")
        page.wait_for_function("document.getElementById('a0-status').textContent.includes('enter the nav shape')")
        assert analysis(page, 0, "runId") is None  # nothing sent: no "400 ... got None"
        page.fill("#nav_shape", "4,5")
        page.fill("#sig_shape", "24,24")
        page.dispatch_event("#sig_shape", "change")
        page.fill("#dtype", "uint16")
        page.dispatch_event("#dtype", "change")
        page.select_option("#a0-type", "sumsig")
        page.click("#a0-start")
        wait_final(page, 0)
        np.testing.assert_allclose(canvas_gray(page, "a0-result"), gray(raw.sum(axis=(2, 3))), atol=1)
        # a disk ROI dragged on the scan: sent as a bitmap (np.packbits order), the sums inside it only
        first = analysis(page, 0, "runId")
        page.select_option("#a0-roitool", "disk")
        page.mouse.move(*scan_point(page, 0, 1, 2, nav=RAW_NAV))
        page.mouse.down()
        page.mouse.move(*scan_point(page, 0, 1, 3, nav=RAW_NAV))
        page.mouse.move(*scan_point(page, 0, 1, 3.6, nav=RAW_NAV))
        page.mouse.up()
        wait_final(page, 0, not_run=first)
        assert analysis(page, 0, "roi") == {"kind": "disk", "cy": 1, "cx": 2, "r": 1.6, "nav": list(RAW_NAV)}
        yy, xx = np.mgrid[:RAW_NAV[0], :RAW_NAV[1]]
        inside = np.hypot(yy - 1, xx - 2) <= 1.6
        assert 0 < inside.sum() < inside.size
        want = gray(np.where(inside, raw.sum(axis=(2, 3)), np.nan))
        np.testing.assert_allclose(canvas_gray(page, "a0-result"), want, atol=1)
        # a token edited again: the lists are read again, the data set and its fields stay
        page.fill("#token", TOKEN)
        page.dispatch_event("#token", "change")
        page.wait_for_timeout(500)
        assert page.input_value("#dataset") == os.path.realpath(data["root"] / "sub" / "frames.raw")
        assert [page.input_value(f"#{k}") for k in ("nav_shape", "sig_shape", "dtype")] == ["4,5", "24,24", "uint16"]
        # and a reload keeps them too
        page.reload()
        wait_final(page, 0)
        assert page.input_value("#dataset") == os.path.realpath(data["root"] / "sub" / "frames.raw")
        assert analysis(page, 0, "type") == "sumsig"
        np.testing.assert_allclose(canvas_gray(page, "a0-result"), want, atol=1)  # the ROI kept too
        assert not errors, errors


def test_a_ring_moved_while_its_run_goes_on_is_patched_into_that_run(data):
    """Dragging a ring's centre while its run is still going patches that run (no new run) with
    recompute: the final image is numpy's for the new centre, every partition at the new version."""
    scan, sig_c = data["scan"], (SIG[0] - 1) / 2
    with _serving(rt.Context(executor=_SlowInline()), data) as url, chromium_page() as (page, errors):
        page.set_viewport_size({"width": 1500, "height": 1000})
        open_scan(page, url, data)
        page.fill("#partitions", "24")  # 24 x 0.25 s: about 6 s of run
        page.check("#a0-recompute")
        page.click("#a0-start")
        page.wait_for_function("""() => { const a = window.raytileViewer.analyses[0];
            return a.last && !a.last.final && a.last.partitions_done >= 1; }""", timeout=60_000)
        run_id = analysis(page, 0, "runId")
        before = max(analysis(page, 0, "last")["param_versions"].values())
        page.mouse.move(*detector_point(page, 0, sig_c, sig_c))
        page.mouse.down()
        for t in np.linspace(0, 1, 5):
            page.mouse.move(*detector_point(page, 0, sig_c + 2 * t, sig_c - 3 * t))
        page.mouse.up()
        wait_final(page, 0)
        last = analysis(page, 0, "last")
        assert analysis(page, 0, "runId") == run_id and last["run_id"] == run_id  # patched, not started again
        assert last["status"] == "finished" and last["partitions_done"] == last["partitions_total"]
        versions = set(last["param_versions"].values())
        assert len(last["param_versions"]) == last["partitions_total"] and len(versions) == 1 and versions.pop() > before
        cy, cx, ri, ro = (analysis(page, 0, k) for k in ("cy", "cx", "ri", "ro"))
        assert (cy, cx) == pytest.approx((sig_c + 2, sig_c - 3), abs=0.11)
        np.testing.assert_allclose(canvas_gray(page, "a0-result"), gray(ring_ref(scan, cy, cx, ri, ro)), atol=1)
        assert not errors, errors
