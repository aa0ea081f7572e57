"""What the data roots hold, as ``auto`` sees it: the data-set listing and a file's detected shapes.

The listing (``GET /v1/datasets``) keeps the files that a format places
(:func:`raytile.io.formats.auto.detect_format`: magic bytes, extension,
header) and headerless raw files (:data:`RAW_SUFFIXES`), each with its
``format`` and the parameters detection found (``detected``); other files
(notes, images, a detector's side files) are left out. Detection reads a
few bytes a file; its answers are kept per file until its size or
modification time changes. Files under an object store prefix are listed
as the store lists them (detection reads local files only), with the
format their suffix names.

``POST /v1/datasets/detect`` (:func:`describe`) opens one file with the
detected format and returns its nav and signal shapes and dtype, which the
viewer fills its shape fields with; for a raw file it says which
parameters to enter instead.

>>> d = Detections()
>>> d.annotate([{"path": "/data/a.npy", "relpath": "a.npy", "bytes": 128}])  # doctest: +SKIP
[{'path': '/data/a.npy', 'relpath': 'a.npy', 'bytes': 128, 'format': 'npy', 'detected': {}}]
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSet
from raytile.io.formats.auto import detect_format
from raytile.io.store import is_url

__all__ = ["Detections", "RAW_SUFFIXES", "RAW_NEEDS", "describe"]

#: Suffixes of headerless raw files: listed as format ``raw`` (``auto`` cannot place them).
RAW_SUFFIXES = (".raw", ".bin", ".dat")

#: What a raw file needs besides its path, and what to enter for each (the viewer shows it).
RAW_NEEDS = {
    "nav_shape": "the scan's shape, integers separated by commas, e.g. 64,64",
    "sig_shape": "the frame's shape in pixels, e.g. 256,256",
    "dtype": "the pixel type, e.g. uint16 or float32",
}

#: Most answers kept (one per file; a file's answer is replaced when it changes).
MAX_KEPT = 20_000


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _public(params: dict[str, Any]) -> dict[str, Any]:
    """Detected parameters as JSON, without the path (the listing has it) and other non-JSON values."""
    out = {}
    for k, v in params.items():
        if k == "path":
            continue
        if isinstance(v, tuple):
            v = list(v)
        if v is None or isinstance(v, (bool, int, float, str)) or (
                isinstance(v, list) and all(isinstance(i, (int, float, str)) for i in v)):
            out[k] = v
    return out


def _detect(path: str) -> tuple[str, dict[str, Any]] | None:
    """``(format, detected parameters)`` of a local file, ``("raw", {})`` for a raw suffix, else None."""
    try:
        name, params = detect_format(path)
    except (DataSetException, OSError, ValueError):
        if path.lower().endswith(RAW_SUFFIXES):
            return "raw", {}
        return None
    return name, _public(params)


class Detections:
    """Detected formats of the files under the roots, each kept until its file changes."""

    def __init__(self, detect: Callable[[str], tuple[str, dict[str, Any]] | None] = _detect):
        self._detect = detect
        self._kept: dict[str, tuple[tuple[int, int], tuple[str, dict[str, Any]] | None]] = {}
        self._lock = threading.Lock()

    def of(self, path: str) -> tuple[str, dict[str, Any]] | None:
        """``(format, detected parameters)`` of the file at ``path``, or None if it holds no data set."""
        if is_url(path):
            return ("npy", {}) if path.endswith(".npy") else ("raw", {}) if path.lower().endswith(RAW_SUFFIXES) \
                else None
        stamp = _stamp(path)
        if stamp is None:
            return None
        with self._lock:
            kept = self._kept.get(path)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        found = self._detect(path)
        with self._lock:
            if len(self._kept) >= MAX_KEPT:
                self._kept.clear()
            self._kept[path] = (stamp, found)
        return found

    def annotate(self, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The data files of a listing, each with ``format`` and ``detected`` (parameters found)."""
        out = []
        for f in files:
            found = self.of(f["path"])
            if found is None:
                continue
            name, params = found
            entry = dict(f, format=name, detected=params)
            if name == "raw":
                entry["needs"] = dict(RAW_NEEDS)
            out.append(entry)
        return out


def describe(name: str, params: dict[str, Any], open_ds: Callable[[], DataSet]) -> dict[str, Any]:
    """``{"format", "params", "nav_shape", "sig_shape", "dtype"}`` of the file (opened by ``open_ds``)."""
    ds = open_ds()
    return {"format": name, "params": _public(params), "nav_shape": list(ds.shape.nav),
            "sig_shape": list(ds.shape.sig), "dtype": str(ds.dtype)}
