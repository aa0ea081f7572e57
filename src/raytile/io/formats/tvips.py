"""The ``tvips`` format: TVIPS camera series, ``name_000.tvips``, ``name_001.tvips``, ...

Layout (little-endian): the first file (suffix 000) starts with a 256-byte
series header of i32 fields ``ISize`` (256), ``IVersion`` (1 or 2),
``IXDim``, ``IYDim``, ``IBPP`` (8 or 16), offsets, binning, pixel size,
high tension, magnification and ``IImgHeaderBytes`` (at byte 48; version
1 uses 12). Every frame, in all files, is an image header of that size and
``IYDim x IXDim`` unsigned pixels; files are cut at frame boundaries. Any
file of the series may be given as ``path``: all files with the same name
stem and a numeric suffix are read, in suffix order.

4D STEM scans: the version-2 image header holds the scan position
(``Scan_x``, ``Scan_y``, float32 at bytes 68/72). As LiberTEM 0.16 does,
``sync_offset`` (default: detected) is the frame before the first scan
position (0, 1) that follows a (0, 0), and the nav shape (default:
detected) is ``(count // width, width)`` with ``width`` the largest
``Scan_x`` + 1 before it wraps; both are searched within the first 4096
frames (of all files: LiberTEM looks in the first file only), and without
a scan the data set is a series ``(count,)`` at offset 0.

Example::

    ds = ctx.load("tvips", path="scan_000.tvips")
"""

from __future__ import annotations

import glob
import math
import os
import re
import struct
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSetMeta
from raytile.io.fileset import File
from raytile.io.formats.framefiles import FrameFileDataSet, FrameLayout, read_exact

__all__ = ["TVIPSDataSet", "read_tvips_header", "tvips_files", "get_filenames", "detect_scan", "TVIPS_HEADER_BYTES"]

TVIPS_HEADER_BYTES = 256
_MAX_SCAN_IDX = 4096
_SUFFIX = re.compile(r"^(.*?)(\d+)\.tvips$", re.IGNORECASE)


def read_tvips_header(path: str) -> dict[str, int]:
    """The series header of a first (suffix 000) TVIPS file (DataSetException if it is not one)."""
    values = struct.unpack("<13i", read_exact(path, 0, 52, "TVIPS series header"))
    h = dict(zip(("size", "version", "xdim", "ydim", "bpp", "xoff", "yoff", "xbin", "ybin", "pixel_size", "ht",
                  "mag", "img_header_bytes"), values))
    if h["size"] != TVIPS_HEADER_BYTES:
        raise DataSetException(f"{path}: not a TVIPS series: header size field {h['size']} (expected 256)")
    if h["version"] not in (1, 2):
        raise DataSetException(f"{path}: unknown TVIPS header version {h['version']} (expected 1 or 2)")
    if h["bpp"] not in (8, 16):
        raise DataSetException(f"{path}: TVIPS bits per pixel {h['bpp']} is not 8 or 16")
    if h["xdim"] <= 0 or h["ydim"] <= 0:
        raise DataSetException(f"{path}: TVIPS frames of {h['ydim']} x {h['xdim']} are empty (corrupt header)")
    if h["version"] == 1:
        h["img_header_bytes"] = 12
    if h["img_header_bytes"] < 0:
        raise DataSetException(f"{path}: TVIPS image header size {h['img_header_bytes']} is negative")
    return h


def _series(path: str) -> tuple[str, list[tuple[int, str]]]:
    """``(the series' stem, [(suffix, file) ...] in suffix order)`` of the series ``path`` belongs to."""
    m = _SUFFIX.match(os.path.basename(path))
    if m is None:
        raise DataSetException(f"{path}: a TVIPS file is named <name><number>.tvips, e.g. scan_000.tvips")
    stem = os.path.join(os.path.dirname(path), m.group(1))
    found = []
    for p in glob.glob(glob.escape(stem) + "*.tvips") + glob.glob(glob.escape(stem) + "*.TVIPS"):
        mm = _SUFFIX.match(os.path.basename(p))
        if mm is not None and mm.group(1) == m.group(1):
            found.append((int(mm.group(2)), p))
    found.sort()
    return stem, found


def get_filenames(path: str | os.PathLike) -> list[str]:
    """The files of the series ``path`` belongs to (same stem, numeric suffix), in suffix order, as found
    (no check that the series is whole: :func:`tvips_files` checks). LiberTEM's ``tvips.get_filenames``."""
    return [p for _, p in _series(os.fspath(path))[1]]


def tvips_files(path: str) -> list[str]:
    """All files of the series ``path`` belongs to (same stem, numeric suffix), in suffix order; a series
    without its first file or with a gap raises DataSetException."""
    stem, found = _series(path)
    if not found or found[0][0] != 0:
        raise DataSetException(f"{path}: the series' first file {stem}000.tvips (with the series header) is missing")
    suffixes = [s for s, _ in found]
    if suffixes != list(range(len(found))):
        missing = sorted(set(range(suffixes[-1] + 1)) - set(suffixes))
        raise DataSetException(f"{path}: TVIPS series files missing: suffixes {missing} of {stem}NNN.tvips")
    return [p for _, p in found]


def detect_scan(files: list[File], h: dict[str, int]) -> tuple[int, tuple[int, ...]] | None:
    """``(sync_offset, nav_shape)`` from the scan positions in the image headers (version 2), or None."""
    if h["version"] != 2 or h["img_header_bytes"] < 76 or not files:
        return None
    count = files[-1].end_idx
    stride = h["img_header_bytes"] + h["xdim"] * h["ydim"] * h["bpp"] // 8
    n = min(count, _MAX_SCAN_IDX)
    scan: list[tuple[int, int]] = []
    for f in files:
        if len(scan) >= n:
            break
        k = min(f.num_frames, n - len(scan))
        if k <= 0:
            continue
        if os.path.getsize(f.path) < f.file_header + k * stride:
            raise DataSetException(f"{f.path}: TVIPS file too short for its image headers (truncated?)")
        # a map of the file: only the pages holding the 8 bytes of each image header are read
        raw = np.memmap(f.path, dtype=np.uint8, mode="r", offset=f.file_header, shape=(k * stride,))
        xy = np.ascontiguousarray(raw.reshape(k, stride)[:, 68:76]).view("<f4").reshape(k, 2)
        del raw
        xy = np.where(np.isfinite(xy), xy, -1.0)  # NaN/inf: not a scan position
        scan += [(int(y), int(x)) for x, y in xy.tolist()]
    sync = None
    last_was_zero = False
    idx = 0
    while idx < n:
        if last_was_zero and scan[idx] == (0, 1):
            sync = idx - 1
            break
        if scan[idx] == (0, 0):
            last_was_zero = True
        idx += 1
    if sync is None:
        return None
    max_x = 0
    while idx < n:
        max_x = max(max_x, scan[idx][1])
        if scan[idx][1] < max_x:
            return sync, ((count - sync) // (max_x + 1), max_x + 1)
        idx += 1
    return sync, (count,)


class TVIPSDataSet(FrameFileDataSet):
    """TVIPS series; ``sync_offset`` and ``nav_shape`` default to what the scan positions say."""

    format_name = "tvips"
    file_extensions = ("tvips",)

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, sync_offset: int | None = None, **kwargs: Any):
        super().__init__(path, nav_shape, sig_shape, 0 if sync_offset is None else sync_offset, **kwargs)
        self._sync_given = sync_offset is not None

    def _read_layout(self) -> FrameLayout:
        paths = tvips_files(self._path)
        h = read_tvips_header(paths[0])
        pixels = h["xdim"] * h["ydim"] * h["bpp"] // 8
        stride = h["img_header_bytes"] + pixels
        files, start = [], 0
        for i, p in enumerate(paths):
            head = TVIPS_HEADER_BYTES if i == 0 else 0
            size = self._check_path(p) - head
            if size < 0 or size % stride:
                raise DataSetException(
                    f"{p}: TVIPS file of {size + head} bytes does not hold whole frames of {stride} bytes "
                    f"({h['img_header_bytes']} header + {h['ydim']} x {h['xdim']} x {h['bpp']} bits) after its "
                    f"{head} byte header; truncated?"
                )
            files.append(File(p, start, start + size // stride, head))
            start += size // stride
        nav: tuple[int, ...] = (start,)
        found = detect_scan(files, h)
        if found is not None:
            if not self._sync_given:
                self._sync_offset = found[0]
            nav = found[1]
        return FrameLayout(files=files, sig_shape=(h["ydim"], h["xdim"]), dtype=np.dtype(f"<u{h['bpp'] // 8}"),
                           nav_shape=nav, frame_header=h["img_header_bytes"],
                           info={"TVIPS version": str(h["version"]), "TVIPS files": str(len(paths)),
                                 "detected scan": "none" if found is None else f"sync_offset {found[0]}, {found[1]}"})

    def _do_initialize(self) -> DataSetMeta:
        meta = super()._do_initialize()
        # A detected sync_offset is where the scan starts, not a request for blank frames (only a given
        # one is): with it the base's check of nav_shape against the files does not apply, so check here.
        assert self._layout is not None
        n_nav, n_file, sync = math.prod(meta.shape.nav), self._layout.num_frames, self._sync_offset
        if not self._sync_given and sync + n_nav > n_file:
            paths = self._layout.files
            where = paths[0].path if len(paths) == 1 else f"{paths[0].path} (+{len(paths) - 1} files)"
            raise DataSetException(
                f"{where}: the files hold {n_file} frames of {tuple(self._layout.sig_shape)}; the scan starts at "
                f"frame {sync} (detected sync_offset), so nav_shape {tuple(meta.shape.nav)} needs {sync + n_nav}; "
                f"nav_shape is too large (at most {n_file - sync} positions), or give sync_offset "
                "(sync_offset=0 reads from the first frame)"
            )
        return meta

    @classmethod
    def _detect_params(cls, path: str) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape", "sync_offset"}`` of a TVIPS series, else None."""
        probe = cls._probe(path, tuple("." + e for e in cls.file_extensions))
        if probe is None:
            return None
        ds, layout = probe
        nav = layout.nav_shape
        if math.prod(nav) + max(ds._sync_offset, 0) > layout.num_frames:
            nav = (layout.num_frames - max(ds._sync_offset, 0),)
        return {"path": path, "nav_shape": nav, "sig_shape": layout.sig_shape, "sync_offset": ds._sync_offset}
