"""`DataSetCache`: opened data sets kept for the next run on the same files (LRU).

Opening a file data set reads its headers on a worker (a round trip per
run). A request for the same format and parameters, on files whose size
and modification time have not changed, gets the opened data set again.

>>> cache = DataSetCache(size=8)
>>> ds = cache.get(("npy", {"path": "/data/a.npy"}), lambda: ctx.load("npy", path="/data/a.npy"))
"""

from __future__ import annotations

import collections
import json
import os
import threading
from typing import Any, Callable

from raytile.io.dataset import DataSet
from raytile.io.store import is_url

__all__ = ["DataSetCache"]


def _paths(params: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("path",):
        value = params.get(key)
        out.extend([value] if isinstance(value, str) else list(value or ()))
    return out


def _stamp(path: str) -> tuple[str, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (path, -1, -1)
    return (path, st.st_mtime_ns, st.st_size)


class DataSetCache:
    """At most ``size`` opened data sets, keyed by format, parameters and their files' stamps."""

    def __init__(self, size: int = 8):
        self.size = size
        self._items: collections.OrderedDict[Any, DataSet] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, resolved: tuple[str, dict[str, Any]], opener: Callable[[], DataSet]) -> DataSet:
        """The cached data set for ``resolved`` (format, params), else ``opener()`` (then kept)."""
        name, params = resolved
        if any(is_url(p) for p in _paths(params)):
            return opener()  # objects have no cheap stamp here: open again (the headers are a few GETs)
        key = (name, json.dumps(params, sort_keys=True, default=str), tuple(_stamp(p) for p in _paths(params)))
        with self._lock:
            ds = self._items.get(key)
            if ds is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return ds
        ds = opener()
        with self._lock:
            self._items[key] = ds
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return ds
