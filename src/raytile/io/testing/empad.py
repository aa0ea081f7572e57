"""Write EMPAD scans: an ``.xml`` description and a ``.raw`` file of 128 x 130 float32 frames.

Layout (EMPAD acquisition software, as LiberTEM documents it): every frame
is 130 rows of 128 little-endian float32 values; rows 0..127 are the
detector image, rows 128 and 129 hold per-frame metadata (written here as
a frame counter and a marker, so a reader that does not skip them sees
wrong values). The ``.xml`` names the raw file and the scan.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

__all__ = ["write_empad", "empad_xml", "empad_frames"]


def empad_xml(raw_name: str, nav_shape: Sequence[int], series: bool = False,
              search_shape: Sequence[int] | None = None) -> str:
    """The ``.xml`` text of an EMPAD acquisition of ``nav_shape`` (``(y, x)``, or ``(n,)`` frames) in ``raw_name``."""
    nav = tuple(int(v) for v in nav_shape)
    if series:
        body = f"  <type>series</type>\n  <count>{nav[0] if len(nav) == 1 else nav[0] * nav[1]}</count>\n"
    else:
        y, x = (nav[0], 1) if len(nav) == 1 else nav[:2]
        body = "  <type>scan</type>\n"
        if search_shape is not None:
            sy, sx = search_shape
            body += ("  <scan_parameters mode=\"search\">\n"
                     f"    <scan_resolution_x>{sx}</scan_resolution_x>\n"
                     f"    <scan_resolution_y>{sy}</scan_resolution_y>\n"
                     "  </scan_parameters>\n")
        body += ("  <scan_parameters mode=\"acquire\">\n"
                 f"    <scan_resolution_x>{x}</scan_resolution_x>\n"
                 f"    <scan_resolution_y>{y}</scan_resolution_y>\n"
                 "  </scan_parameters>\n")
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<root>\n"
            "  <timestamp>2026-11-25 04:00:00</timestamp>\n"
            f"  <raw_file filename=\"{raw_name}\"/>\n"
            f"{body}</root>\n")


def empad_frames(frames: np.ndarray, first_index: int = 0) -> np.ndarray:
    """``(n, 128, 128)`` images as stored: ``(n, 130, 128)`` little-endian float32 with the two metadata rows."""
    flat = np.asarray(frames, dtype=np.float32).reshape(-1, 128, 128)
    stored = np.zeros((len(flat), 130, 128), dtype="<f4")
    stored[:, :128] = flat
    stored[:, 128, 0] = np.arange(first_index, first_index + len(flat))
    stored[:, 129, :] = -12345.0
    return stored


def write_empad(directory: str | os.PathLike, frames: np.ndarray, nav_shape: Sequence[int] | None = None,
                name: str = "scan", series: bool = False,
                search_shape: Sequence[int] | None = None) -> tuple[str, str]:
    """Write ``frames`` (``(n, 128, 128)`` or nav x (128, 128)) as ``name.xml`` + ``name.raw``; their paths.

    ``nav_shape`` (``(y, x)``) goes into the "acquire" scan parameters
    (default: the leading dims of ``frames``); ``series=True`` writes a
    series of ``n`` frames instead; ``search_shape`` adds "search" scan
    parameters.
    """
    frames = np.asarray(frames, dtype=np.float32)
    nav = tuple(nav_shape) if nav_shape is not None else frames.shape[:-2]
    stored = empad_frames(frames)
    raw = os.path.join(os.fspath(directory), f"{name}.raw")
    xml = os.path.join(os.fspath(directory), f"{name}.xml")
    stored.tofile(raw)
    with open(xml, "w") as f:
        f.write(empad_xml(f"{name}.raw", (len(stored),) if series else nav, series, search_shape))
    return xml, raw
