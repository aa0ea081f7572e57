"""One way for a test to drive the viewer in a real browser: Debian's chromium through Playwright.

    with chromium_page() as (page, errors):
        page.goto(url)
        ...
    assert not errors, errors          # JavaScript errors the page raised

Skips the test when chromium or Playwright is missing (``.ci/run`` installs both).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from typing import Any, Iterator

import numpy as np
import pytest

__all__ = ["chromium_page", "canvas_gray"]


@contextlib.contextmanager
def chromium_page() -> Iterator[tuple[Any, list[str]]]:
    """A fresh page of a headless chromium, and the list its page errors are appended to."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors
        finally:
            browser.close()


def canvas_gray(page: Any, canvas_id: str) -> np.ndarray:
    """The red channel of a canvas's pixels (the viewer draws gray), shape (height, width)."""
    h, w, px = page.evaluate(f"""() => {{ const c = document.getElementById({json.dumps(canvas_id)});
        return [c.height, c.width, Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)]; }}""")
    return np.array(px, dtype=np.uint8).reshape(h, w, 4)[..., 0]
