"""Stage classes by ``kind``: the built-ins, classes registered at import, and entry points.

Third-party packages declare stages in the entry point group
``raytile.pipeline.stages``; each entry point loads a :class:`Stage` subclass,
registered under its ``kind``.

>>> @register_stage
... class MyKernel(Kernel):
...     kind = "mypackage.double"
...     def compute_into(self, x, out, aux):
...         np.multiply(x, 2, out=out)
>>> get_stage_class("mypackage.double") is MyKernel
True
"""

from __future__ import annotations

import threading
from importlib.metadata import entry_points
from typing import TypeVar

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.stage import Stage

__all__ = ["register_stage", "get_stage_class", "known_kinds", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "raytile.pipeline.stages"

_REGISTRY: dict[str, type[Stage]] = {}
_LOCK = threading.Lock()
_loaded = False

S = TypeVar("S", bound=type[Stage])


def register_stage(cls: S) -> S:
    """Register ``cls`` under ``cls.kind`` (a decorator). Re-registering a kind replaces it."""
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        raise ConfigValidationError(f"register_stage: {cls!r} is not a Stage subclass")
    if not isinstance(cls.kind, str) or not cls.kind or cls.kind in ("stage.base", "kernel.base"):
        raise ConfigValidationError(f"register_stage: {cls.__name__} needs its own 'kind', got {cls.kind!r}")
    _REGISTRY[cls.kind] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _LOCK:
        if _loaded:
            return
        import raytile.pipeline.kernels  # noqa: F401  (registers the built-ins)

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                cls = ep.load()
            except Exception as e:
                raise ConfigValidationError(f"entry point {ep.name!r} in {ENTRY_POINT_GROUP!r} "
                                            f"({ep.value}) failed to load: {e}") from e
            register_stage(cls)
        _loaded = True


def get_stage_class(kind: str) -> type[Stage]:
    """The class registered for ``kind``; ConfigValidationError names the kind and the known ones."""
    _load()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise ConfigValidationError(f"unknown stage kind {kind!r} (known: {', '.join(sorted(_REGISTRY))})") from None


def known_kinds() -> list[str]:
    _load()
    return sorted(_REGISTRY)
