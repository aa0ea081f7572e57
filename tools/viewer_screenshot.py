"""Regenerate docs/img/serve_two_analyses.png: the serve viewer with two analyses side by side.

    python tools/viewer_screenshot.py [--out docs/img/serve_two_analyses.png]

Writes a small synthetic 4D-STEM scan (a bright disk that the scan position shifts, on a diffuse
background) into a temporary data root, serves the app under uvicorn on 127.0.0.1 with an inline
Context (no Ray), opens the viewer in Debian's chromium (Playwright), runs an annular dark field (ring,
its centre on the disk) beside a centre-of-mass field, picks a frame and saves the screenshot of both.
Needs the ``serve`` and ``test`` extras and ``chromium`` (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import threading
import time

import numpy as np


def make_scan(path: str, nav: tuple[int, int] = (24, 32), sig: tuple[int, int] = (48, 48)) -> None:
    """A scan whose disk moves with the position (a smooth shift field) over Poisson noise."""
    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[:sig[0], :sig[1]]
    data = np.empty(nav + sig, np.float32)
    for y in range(nav[0]):
        for x in range(nav[1]):
            dy, dx = 2.5 * np.sin(2 * np.pi * x / nav[1]), 2.5 * np.cos(2 * np.pi * y / nav[0])
            d = np.hypot(yy - 22 - dy, xx - 25 - dx)
            halo = 10 * np.exp(-d / 12) * (1 + np.sin(x / 3) * np.cos(y / 4))
            data[y, x] = 100 * (d < 8) + halo + rng.poisson(2, sig)
    np.save(path, data)


def main() -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "docs", "img", "serve_two_analyses.png"))
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs Debian's chromium (apt-get install chromium)")
    import uvicorn
    from playwright.sync_api import sync_playwright

    import raytile as rt
    from raytile.serve.config import ServeConfig
    from raytile.serve.routes import make_api
    from raytile.serve.service import Service

    with tempfile.TemporaryDirectory() as root:
        make_scan(os.path.join(root, "scan.npy"))
        service = Service(ServeConfig.make([root]), ctx=rt.Context(executor="inline"))
        api = make_api()
        api.state.service = service
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(api, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not server.started:
                if time.monotonic() > deadline:
                    sys.exit("uvicorn did not start")
                time.sleep(0.05)
            url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 900})
                    page.goto(url)
                    page.wait_for_function("window.raytileViewer.analyses.length === 1", timeout=30_000)
                    a = "window.raytileViewer.analyses"
                    for key, value in {"cy": 22, "cx": 25, "ri": 10, "ro": 18}.items():
                        page.fill(f"#a0-{key}", str(value))
                        page.dispatch_event(f"#a0-{key}", "change")
                    page.select_option("#new_type", "com")
                    page.click("#add")
                    for key, value in {"cy": 22, "cx": 25, "ri": 0, "ro": 10}.items():
                        page.fill(f"#a1-{key}", str(value))
                        page.dispatch_event(f"#a1-{key}", "change")
                    page.click("#start_all")
                    page.wait_for_function(f"{a}.every((x) => x.last && x.last.final)", timeout=60_000)
                    box = page.locator("#a0-result_overlay").bounding_box()
                    page.mouse.click(box["x"] + 8.5 * box["width"] / 32, box["y"] + 5.5 * box["height"] / 24)
                    page.wait_for_function(f"{a}[0].picks === 1", timeout=30_000)
                    cards = [page.locator(f"#a{i}").bounding_box() for i in (0, 1)]
                    x0, y0 = min(c["x"] for c in cards) - 4, min(c["y"] for c in cards) - 4
                    x1 = max(c["x"] + c["width"] for c in cards) + 4
                    y1 = max(c["y"] + c["height"] for c in cards) + 4
                    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
                    page.screenshot(path=args.out, clip={"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0})
                finally:
                    browser.close()
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()
            service.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
