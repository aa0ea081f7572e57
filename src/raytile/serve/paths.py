"""Paths from clients, resolved inside the data roots only; the listing of what the roots hold.

A client path is relative to a data root (``"scans/a.raw"``) or absolute
inside one. It is resolved with every symlink followed (``os.path.realpath``)
and must then still lie inside a root: ``..`` out of the root, an absolute
path elsewhere and a symlink pointing out all raise :class:`Forbidden` (403).
Glob patterns (for formats taking several files) are expanded here, each
match checked the same way.

A root may also be an object store prefix (``s3://bucket/prefix``, read with
the server's ``storage_options`` or the environment's credentials; clients
never send credentials). The same rules hold for prefixes: a client path
under a URL root may not hold ``.``, ``..`` or empty segments (an object
key may literally contain ``..``: it is refused rather than interpreted),
and an absolute URL must lie under a root prefix at a ``/`` boundary
(``s3://bucket/prefix-other`` is not under ``s3://bucket/prefix``).

>>> roots = DataRoots(["/data"])
>>> roots.resolve("scans/a.raw", "dataset.params.path")
'/data/scans/a.raw'
"""

from __future__ import annotations

import glob
import os
from typing import Any, Iterator, Sequence

from raytile.common.errors import DataSetException
from raytile.io.store import ObjectStore, StorageOptions, display_url, is_url, store_for
from raytile.serve.errors import BadRequest, Forbidden

__all__ = ["DataRoots", "GLOB_CHARS"]

#: Characters that make a client path a glob pattern.
GLOB_CHARS = frozenset("*?[")

#: Most files one listing returns (a root with millions of files must not stall the app).
MAX_LISTED = 10_000


def _clean_key(path: str, field: str) -> str:
    """``path`` as object key segments below a prefix: no ``.``, ``..`` or empty segment (Forbidden)."""
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise Forbidden(field, f"{path!r} is not a plain key below the data roots (no '.', '..' or '//')")
    return path


class DataRoots:
    """The directories (real paths, symlinks resolved) and object store prefixes clients may read from."""

    def __init__(self, roots: Sequence[str], storage_options: Any = None):
        self.url_roots = tuple(r.rstrip("/") for r in roots if is_url(r))
        self.roots = tuple(os.path.realpath(r) for r in roots if not is_url(r)) + self.url_roots
        self.local_roots = tuple(r for r in self.roots if not is_url(r))
        self.storage_options = StorageOptions(storage_options)
        self.stores = {r: store_for(r, self.storage_options) for r in self.url_roots}

    def contains(self, real: str) -> bool:
        """Whether the real path ``real`` (or URL) lies inside (or is) one of the roots."""
        if is_url(real):
            return any(real == r or real.startswith(r + "/") for r in self.url_roots)
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.local_roots)

    def store_of(self, url: str) -> ObjectStore | None:
        """The store of a URL under a root (None for local paths)."""
        for r, store in self.stores.items():
            if url == r or url.startswith(r + "/"):
                return store
        return None

    def _resolve_url(self, path: str, field: str) -> str:
        for r in self.url_roots:
            if path.startswith(r + "/"):
                return r + "/" + _clean_key(path[len(r) + 1:], field)
        raise Forbidden(field, f"{display_url(path)!r} is outside the data roots")

    def _exists(self, url: str) -> bool:
        store = self.store_of(url)
        try:
            return store is not None and store.exists(url)
        except DataSetException:
            return False

    def resolve(self, path: Any, field: str) -> str:
        """The real path of ``path`` if it lies inside a root; raises Forbidden (403) otherwise."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise BadRequest(field, f"must be a non-empty path string, got {path!r}")
        if is_url(path):
            return self._resolve_url(path, field)
        if os.path.isabs(path) and not self.local_roots:
            raise Forbidden(field, f"{path!r} is outside the data roots")
        if not os.path.isabs(path) and not self.local_roots:
            key = _clean_key(path, field)
            urls = [r + "/" + key for r in self.url_roots]
            return next((u for u in urls if len(urls) == 1 or self._exists(u)), urls[0])
        if os.path.isabs(path):
            real = os.path.realpath(path)
            if not self.contains(real):
                raise Forbidden(field, f"{path!r} is outside the data roots")
            return real
        candidates = [os.path.realpath(os.path.join(r, path)) for r in self.local_roots]
        inside = [c for c in candidates if self.contains(c)]
        if not inside:
            raise Forbidden(field, f"{path!r} leads outside the data roots")
        existing = [c for c in inside if os.path.exists(c)]
        if not existing and self.url_roots:
            try:
                key = _clean_key(path, field)
            except Forbidden:
                return inside[0]
            urls = [u for u in (r + "/" + key for r in self.url_roots) if self._exists(u)]
            if urls:
                return urls[0]
        return (existing or inside)[0]

    def resolve_many(self, value: Any, field: str) -> str | list[str]:
        """A path, a glob pattern (expanded here, each match checked) or a list of paths."""
        if isinstance(value, list):
            if not value:
                raise BadRequest(field, "must be a path or a non-empty list of paths")
            return [self.resolve(v, f"{field}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str) and GLOB_CHARS & set(value):
            matches: list[str] = []
            for root, store in self.stores.items():
                if is_url(value) and not value.startswith(root + "/"):
                    continue
                key = _clean_key(value[len(root) + 1:] if is_url(value) else value, field)
                assert store is not None
                try:
                    matches.extend(store.glob(root + "/" + key))
                except DataSetException as e:
                    raise BadRequest(field, str(e)) from None
            for root in self.local_roots:
                if is_url(value):
                    continue
                pattern = value if os.path.isabs(value) else os.path.join(root, value)
                matches.extend(sorted(glob.glob(pattern)))
            resolved = [self.resolve(m, field) for m in matches]
            if not resolved:
                raise BadRequest(field, f"the pattern {value!r} matches no file in the data roots")
            return resolved
        return self.resolve(value, field)

    def listing(self) -> list[dict[str, Any]]:
        """Files under the roots: ``{"path", "root", "relpath", "bytes"}``; links out are left out."""
        out: list[dict[str, Any]] = []
        for root, store in self.stores.items():
            assert store is not None
            found = store.call(root, "list", lambda: store.fs.find(root, detail=True, maxdepth=None))
            for name in sorted(found):
                url = store.url(name)
                if not url.startswith(root + "/") or any(p.startswith(".") for p in url[len(root) + 1:].split("/")):
                    continue
                out.append({"path": url, "root": root, "relpath": url[len(root) + 1:],
                            "bytes": int(found[name].get("size") or 0)})
                if len(out) >= MAX_LISTED:
                    return out
        for root in self.local_roots:
            for real, rel in self._walk(root):
                try:
                    size = os.path.getsize(real)
                except OSError:
                    continue
                out.append({"path": real, "root": root, "relpath": rel, "bytes": size})
                if len(out) >= MAX_LISTED:
                    return out
        return out

    def _walk(self, root: str) -> Iterator[tuple[str, str]]:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                full = os.path.join(dirpath, name)
                real = os.path.realpath(full)
                if self.contains(real) and os.path.isfile(real):
                    yield real, os.path.relpath(full, root)
