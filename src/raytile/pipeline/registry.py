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

A class written for another framework, without a ``kind`` of its own
(a SPECULA processing object), is registered with ``register_stage(Cls,
kind="mylab.modalrec")``, or named in a config by its import path,
``kind: "mylab.reconstruction:Modalrec"``.
"""

from __future__ import annotations

import importlib
import threading
from importlib.metadata import entry_points
from typing import Any, TypeVar

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.stage import Stage

__all__ = ["register_stage", "get_stage_class", "known_kinds", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "raytile.pipeline.stages"

_REGISTRY: dict[str, type[Stage]] = {}
_LOCK = threading.Lock()
_loaded = False

S = TypeVar("S", bound=type[Stage])


def register_stage(cls: S, kind: str | None = None) -> S:
    """Register ``cls`` under ``cls.kind`` (a decorator), or under ``kind`` (which then becomes the class's
    ``kind``). Re-registering a kind replaces it."""
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        raise ConfigValidationError(f"register_stage: {cls!r} is not a Stage subclass")
    if kind is not None:
        if not isinstance(kind, str) or not kind:
            raise ConfigValidationError(f"register_stage: kind must be a non-empty string, got {kind!r}")
        cls.kind = kind
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
        if isinstance(kind, str) and ":" in kind:
            return _import_stage(kind)
        raise ConfigValidationError(f"unknown stage kind {kind!r} (known: {', '.join(sorted(_REGISTRY))})") from None


def known_kinds() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def _import_stage(path: str) -> type[Stage]:
    """The Stage subclass named ``"module:Class"``, registered under that path."""
    mod_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ConfigValidationError(f"stage kind {path!r}: cannot import it: {type(e).__name__}: {e}") from None
    if not (isinstance(obj, type) and issubclass(obj, Stage)):
        raise ConfigValidationError(f"stage kind {path!r}: {obj!r} is not a raytile.pipeline.Stage subclass")
    if obj.kind in ("stage.base", "kernel.base"):
        obj.kind = path
    _REGISTRY[path] = obj
    return obj
