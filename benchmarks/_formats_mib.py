"""bench_formats cases: Merlin MIB, raw 12-bit (R12) and U16, 256x256 single-chip frames, one file."""

from __future__ import annotations

import os

import numpy as np

from _formats_case import FormatCase

SIG = (256, 256)
HEADER = 384
STRIDE = HEADER + SIG[0] * SIG[1] * 2
SCAN_X = 128
CHUNK = 256  # frames per write / per numpy reduction step


def _frames_for(nbytes: int) -> int:
    return max(SCAN_X, nbytes // STRIDE // SCAN_X * SCAN_X)


def _write(prefix: str, mode: str, nbytes: int) -> None:
    from raytile.io.testing.mib import encode_frame_data, mib_header, write_hdr

    n = _frames_for(nbytes)
    path = prefix + ".mib"
    if os.path.exists(path) and os.path.getsize(path) == n * STRIDE:
        return
    rng = np.random.default_rng(7)
    base = rng.poisson(20.0, size=SIG).astype(np.int64)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        for c0 in range(0, n, CHUNK):
            k = min(CHUNK, n - c0)
            frames = (base[None] + np.arange(c0, c0 + k)[:, None, None]) % 4096
            data, x, y = encode_frame_data(frames, mode)
            for i, d in enumerate(data):
                f.write(mib_header(c0 + i + 1, HEADER, 1, x, y, "R64" if mode == "R12" else mode, "1x1", 12))
                f.write(d)
    os.replace(tmp, path)
    write_hdr(prefix + ".hdr", n, SCAN_X, 12)


def _numpy_sum(path: str, mode: str):
    def run() -> np.ndarray:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        n = raw.shape[0] // STRIDE
        frames = raw[:n * STRIDE].reshape(n, STRIDE)[:, HEADER:]
        acc = np.zeros(SIG, dtype=np.float64)
        for c0 in range(0, n, CHUNK):
            words = frames[c0:c0 + CHUNK].view(">u2")
            if mode == "R12":  # 64-bit big-endian words of 4 pixels, pixel 0 in the low 16 bits
                words = words.reshape(-1, SIG[0], SIG[1] // 4, 4)[..., ::-1]
            acc += words.reshape(-1, *SIG).sum(axis=0, dtype=np.float64)
        return acc
    return run


def cases(tmpdir: str) -> list[FormatCase]:
    out = []
    for mode, name in (("R12", "mib_r12"), ("U16", "mib_u16")):
        prefix = os.path.join(tmpdir, name)
        out.append(FormatCase(
            name=name,
            make=lambda nbytes, prefix=prefix, mode=mode: _write(prefix, mode, nbytes),
            files=lambda prefix=prefix: [prefix + ".mib"],
            raytile=("mib", {"path": prefix + ".hdr"}),
            libertem=("mib", {"path": prefix + ".hdr"}),
            numpy_sum=_numpy_sum(prefix + ".mib", mode),
            decoded=True,
            notes="raw 12-bit: word shuffle + byte swap" if mode == "R12" else "big-endian: byte swap",
        ))
    return out
