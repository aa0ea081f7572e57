"""Paths from clients, resolved inside the data roots only; the listing of what the roots hold.

A client path is relative to a data root (``"scans/a.raw"``) or absolute
inside one. It is resolved with every symlink followed (``os.path.realpath``)
and must then still lie inside a root: ``..`` out of the root, an absolute
path elsewhere and a symlink pointing out all raise :class:`Forbidden` (403).
Glob patterns (for formats taking several files) are expanded here, each
match checked the same way.

>>> roots = DataRoots(["/data"])
>>> roots.resolve("scans/a.raw", "dataset.params.path")
'/data/scans/a.raw'
"""

from __future__ import annotations

import glob
import os
from typing import Any, Iterator, Sequence

from raytile.serve.errors import BadRequest, Forbidden

__all__ = ["DataRoots", "GLOB_CHARS"]

#: Characters that make a client path a glob pattern.
GLOB_CHARS = frozenset("*?[")

#: Most files one listing returns (a root with millions of files must not stall the app).
MAX_LISTED = 10_000


class DataRoots:
    """The directories clients may read from (real paths, symlinks resolved)."""

    def __init__(self, roots: Sequence[str]):
        self.roots = tuple(os.path.realpath(r) for r in roots)

    def contains(self, real: str) -> bool:
        """Whether the real path ``real`` lies inside (or is) one of the roots."""
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def resolve(self, path: Any, field: str) -> str:
        """The real path of ``path`` if it lies inside a root; raises Forbidden (403) otherwise."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise BadRequest(field, f"must be a non-empty path string, got {path!r}")
        if os.path.isabs(path):
            real = os.path.realpath(path)
            if not self.contains(real):
                raise Forbidden(field, f"{path!r} is outside the data roots")
            return real
        candidates = [os.path.realpath(os.path.join(r, path)) for r in self.roots]
        inside = [c for c in candidates if self.contains(c)]
        if not inside:
            raise Forbidden(field, f"{path!r} leads outside the data roots")
        existing = [c for c in inside if os.path.exists(c)]
        return (existing or inside)[0]

    def resolve_many(self, value: Any, field: str) -> str | list[str]:
        """A path, a glob pattern (expanded here, each match checked) or a list of paths."""
        if isinstance(value, list):
            if not value:
                raise BadRequest(field, "must be a path or a non-empty list of paths")
            return [self.resolve(v, f"{field}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str) and GLOB_CHARS & set(value):
            matches: list[str] = []
            for root in self.roots:
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
        for root in self.roots:
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
