"""bench_formats cases: EMPAD (float32 frames with footers) and MRC (uint16 stack), one file each.

Both store pixels as numpy uses them (nothing decoded): raytile reads them
"straight" from the file map, so the target is >= 0.8x the numpy read.
Files are written chunk by chunk with ``raytile.io.testing``'s layout helpers.
"""

from __future__ import annotations

import os

import numpy as np

from _formats_case import FormatCase

CHUNK = 512  # frames per write / per numpy reduction step
EMPAD_STRIDE = 130 * 128 * 4
MRC_SIG = (256, 256)


def _pattern(c0: int, k: int, sig: tuple[int, int]) -> np.ndarray:
    base = (np.arange(sig[0] * sig[1], dtype=np.int64).reshape(sig) * 7) % 1000
    return (base[None] + np.arange(c0, c0 + k)[:, None, None]) % 4096


def _write_empad(prefix: str, nbytes: int) -> None:
    from raytile.io.testing.empad import empad_frames, empad_xml

    side = max(16, int((nbytes // EMPAD_STRIDE) ** 0.5))
    n = side * side
    raw, xml = prefix + ".raw", prefix + ".xml"
    if os.path.exists(raw) and os.path.getsize(raw) == n * EMPAD_STRIDE and os.path.exists(xml):
        return
    with open(raw + ".part", "wb") as f:
        for c0 in range(0, n, CHUNK):
            f.write(empad_frames(_pattern(c0, min(CHUNK, n - c0), (128, 128)), c0).tobytes())
    os.replace(raw + ".part", raw)
    with open(xml, "w") as f:
        f.write(empad_xml(os.path.basename(raw), (side, side)))


def _write_mrc(path: str, nbytes: int) -> None:
    from raytile.io.testing.mrc import mrc_header

    frame = MRC_SIG[0] * MRC_SIG[1] * 2
    side = max(16, int((nbytes // frame) ** 0.5))
    n = side * side
    if os.path.exists(path) and os.path.getsize(path) == 1024 + n * frame:
        return
    with open(path + ".part", "wb") as f:
        f.write(mrc_header((n, MRC_SIG[0], MRC_SIG[1]), np.dtype("<u2")))
        for c0 in range(0, n, CHUNK):
            f.write(_pattern(c0, min(CHUNK, n - c0), MRC_SIG).astype("<u2").tobytes())
    os.replace(path + ".part", path)


def _numpy_sum(path: str, offset: int, stride: int, sig: tuple[int, int], dtype: str):
    def run() -> np.ndarray:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        n = (raw.shape[0] - offset) // stride
        rows = raw[offset:offset + n * stride].reshape(n, stride)
        nb = sig[0] * sig[1] * np.dtype(dtype).itemsize
        acc = np.zeros(sig, dtype=np.float64)
        for c0 in range(0, n, CHUNK):
            acc += np.ascontiguousarray(rows[c0:c0 + CHUNK, :nb]).view(dtype).reshape(-1, *sig).sum(
                axis=0, dtype=np.float64)
        return acc
    return run


def cases(tmpdir: str) -> list[FormatCase]:
    empad = os.path.join(tmpdir, "empad_scan")
    mrc = os.path.join(tmpdir, "mrc_u16.mrc")
    return [
        FormatCase(
            name="empad",
            make=lambda nbytes: _write_empad(empad, nbytes),
            files=lambda: [empad + ".raw"],
            raytile=("empad", {"path": empad + ".xml"}),
            libertem=("empad", {"path": empad + ".xml"}),
            numpy_sum=_numpy_sum(empad + ".raw", 0, EMPAD_STRIDE, (128, 128), "<f4"),
            decoded=False,
            notes="float32 frames with 1 KiB footers, read straight",
        ),
        FormatCase(
            name="mrc_u16",
            make=lambda nbytes: _write_mrc(mrc, nbytes),
            files=lambda: [mrc],
            raytile=("mrc", {"path": mrc}),
            libertem=("mrc", {"path": mrc}),
            numpy_sum=_numpy_sum(mrc, 1024, MRC_SIG[0] * MRC_SIG[1] * 2, MRC_SIG, "<u2"),
            decoded=False,
            notes="uint16 stack, read straight",
        ),
    ]
