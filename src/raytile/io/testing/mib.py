"""Write Quantum Detectors Merlin MIB acquisitions (``.hdr`` + ``.mib`` files) from frames.

Made from the MIB layout of the Merlin manual (frame header fields, U08/U16/U32
big-endian pixels, raw ``R64`` 64-bit big-endian words, the 24-bit raw pair
of 12-bit frames, the raw quad chip order), with LiberTEM's reader as the
reference for the raw quad arrangement; it never calls raytile's reader.

>>> hdr = write_mib(tmp_path / "scan", frames, mode="R12", nav_shape=(8, 8))   # doctest: +SKIP
>>> ctx.load("mib", path=hdr)                                                  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["MODES", "mib_header", "encode_frame_data", "write_mib", "write_hdr"]

#: Writable modes: integer (already decoded, big-endian) and raw (counter depth 1/6/12/24).
MODES = ("U08", "U16", "U32", "R1", "R6", "R12", "R24")

_THRESHOLDS = ",".join(["1.200000E+2", "5.110000E+2"] + ["0.000000E+0"] * 6)
_DACS = ("175,511,000,000,000,000,000,000,125,255,125,125,100,100,082,100,087,030,128,004,255,129,128,176,"
         "168,511,511")


def mib_header(sequence: int, header_bytes: int, num_chips: int, x: int, y: int, pixel_depth: str,
               layout: str, counter_depth: int) -> bytes:
    """One frame header: the manual's comma-separated fields, NUL-padded to ``header_bytes``."""
    fields = [
        "MQ1", f"{sequence:06d}", f"{header_bytes:05d}", f"{num_chips:02d}", f"{x:04d}", f"{y:04d}",
        pixel_depth, f"{layout:>6}", "0F" if num_chips == 4 else "01", "2020-05-18 16:51:49.971626", "0.001000",
        "0", "0", "0", _THRESHOLDS, ",".join(["3RX," + _DACS] * num_chips), "MQ1A",
        "2020-05-18T14:51:49.971626178Z", "1000000ns", str(counter_depth),
    ]
    text = (",".join(fields) + ",").encode("ascii")
    if len(text) > header_bytes:
        raise ValueError(f"header of {len(text)} bytes does not fit {header_bytes}")
    return text + b"\0" * (header_bytes - len(text))


def _raw_words(raw: np.ndarray, counter_depth: int) -> bytes:
    """Raw pixel rows ``(n, rows, width)`` as 64-bit big-endian words, pixel j at bits [j*b, (j+1)*b)."""
    n, rows, width = raw.shape
    if counter_depth == 12:
        return raw.reshape(n, rows, width // 4, 4)[..., ::-1].astype(">u2").tobytes()
    if counter_depth == 6:
        return raw.reshape(n, rows, width // 8, 8)[..., ::-1].astype(np.uint8).tobytes()
    if counter_depth == 1:
        bits = (raw.reshape(n, rows, width // 64, 64) & 1).astype(np.uint8)
        little = np.packbits(bits, axis=-1, bitorder="little")  # byte k: pixels 8k..8k+7, pixel 8k at bit 0
        return little[..., ::-1].tobytes()  # most significant byte first
    raise ValueError(f"no raw encoding for counter depth {counter_depth}")


def encode_frame_data(frames: np.ndarray, mode: str, quad: bool = False) -> tuple[list[bytes], int, int]:
    """Pixel bytes of each frame ``(n, h, w)`` in ``mode``; returns ``(data, header_x, header_y)``."""
    frames = np.asarray(frames)
    n, h, w = frames.shape
    if mode.startswith("U"):
        data = frames.astype(f">u{int(mode[1:]) // 8}").reshape(n, -1)
        return [row.tobytes() for row in data], w, h
    depth = int(mode[1:])
    vals = frames.astype(np.int64)
    if quad:
        ch, cw = h // 2, w // 2
        bottom = vals[:, ::-1, ::-1][:, :ch]          # bottom chips turned by 180 degrees: [q4, q3]
        raw = np.concatenate([bottom, vals[:, :ch, cw:], vals[:, :ch, :cw]], axis=2)  # [q4, q3, q2, q1]
        header_x, header_y = 4 * cw, ch
    else:
        raw = vals
        header_x, header_y = w, h
    if depth == 24:
        hi = _raw_words(raw >> 12, 12)
        lo = _raw_words(raw & 0xFFF, 12)
        size = len(hi) // n
        return [hi[i * size:(i + 1) * size] + lo[i * size:(i + 1) * size] for i in range(n)], 2 * header_x, header_y
    enc = _raw_words(raw, depth)
    size = len(enc) // n
    return [enc[i * size:(i + 1) * size] for i in range(n)], header_x, header_y


def write_hdr(path: str | os.PathLike, num_frames: int, frames_per_trigger: int, counter_depth: int = 12,
              layout: str = "1x1", scan_xy: tuple[int, int] | None = None) -> str:
    """The acquisition's ``.hdr`` text file: ``Key:<TAB>value`` lines between ``HDR,`` and ``End``."""
    lines = [
        "HDR,\t",
        "Time and Date Stamp (day, mnth, yr, hr, min, s):\t18/05/2020 16:51:48",
        "Chip ID:\tW529_F5,-,-,-",
        "Chip Type (Medipix 3.0, Medipix 3.1, Medipix 3RX):\tMedipix 3RX",
        f"Assembly Size (NX1, 2X2):\t   {layout}",
        "Chip Mode  (SPM, CSM, CM, CSCM):\tSPM",
        f"Counter Depth (number):\t{counter_depth}",
        "Gain:\tSLGM",
        "Active Counters:\tAlternating",
        f"Thresholds (keV):\t{_THRESHOLDS}",
        "Acquisition Type (Normal, Th_scan, Config):\tNormal",
        f"Frames in Acquisition (Number):\t{num_frames}",
        f"Frames per Trigger (Number):\t{frames_per_trigger}",
        "Trigger Start (Positive, Negative, Internal):\tRising Edge",
        "Trigger Stop (Positive, Negative, Internal):\tInternal",
        "Sensor Bias (V):\t120 V",
        "Readout System:\tMerlin Quad",
        "Software Version:\t0.69.0.2",
    ]
    if scan_xy is not None:
        lines += [f"ScanX:\t{scan_xy[0]}", f"ScanY:\t{scan_xy[1]}"]
    lines.append("End\t")
    Path(path).write_text("\n".join(lines) + "\n", encoding="ascii")
    return os.fspath(path)


def write_mib(prefix: str | os.PathLike, frames: np.ndarray, mode: str = "U16", quad: bool = False,
              nav_shape: Sequence[int] | None = None, frames_per_file: int | None = None,
              first_sequence: int = 1, hdr: bool = True, scan_xy: tuple[int, int] | None = None) -> str:
    """Write ``frames`` (``(n, h, w)`` unsigned ints) as ``{prefix}.mib`` or ``{prefix}1.mib, {prefix}2.mib...``.

    ``mode``: one of :data:`MODES`; ``quad``: a 2x2 quad of four ``h/2 x w/2``
    chips (768 byte headers). With ``hdr`` also writes ``{prefix}.hdr`` (frames
    per trigger: ``nav_shape[-1]``, or ``scan_xy`` as ScanX/ScanY). Returns the
    ``.hdr`` path (or the first ``.mib`` path without ``hdr``).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    arr = np.asarray(frames)
    stack: np.ndarray = arr.reshape((-1, arr.shape[-2], arr.shape[-1]))
    n = int(stack.shape[0])
    depth = int(mode[1:])
    data, header_x, header_y = encode_frame_data(stack, mode, quad)
    chips = 4 if quad else 1
    header_bytes = 768 if quad else 384
    pixel_depth = "R64" if mode.startswith("R") else mode
    counter = depth if mode.startswith("R") else {8: 6, 16: 12, 32: 24}[depth]
    layout = "2x2" if quad else "1x1"
    per_file = frames_per_file or n
    num_files = max(1, math.ceil(n / per_file))
    prefix = os.fspath(prefix)
    paths = []
    for k in range(num_files):
        path = f"{prefix}.mib" if num_files == 1 else f"{prefix}{k + 1}.mib"
        with open(path, "wb") as f:
            for i in range(k * per_file, min(n, (k + 1) * per_file)):
                f.write(mib_header(first_sequence + i, header_bytes, chips, header_x, header_y, pixel_depth,
                                   layout, counter))
                f.write(data[i])
        paths.append(path)
    if not hdr:
        return paths[0]
    fpt = int(nav_shape[-1]) if nav_shape is not None else n
    total = math.prod(nav_shape) if nav_shape is not None else n
    return write_hdr(f"{prefix}.hdr", total, fpt, counter, layout, scan_xy)
