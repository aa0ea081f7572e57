"""What a task carries to a worker actor, kept small: one pickled message, and shared values once.

Ray serialises every argument of an actor call on its own (cloudpickle, in
Python) and tracks every object ref in them: a top-level ref is resolved
before the call, a nested one makes the worker a borrower that reports back
when the task ends. Measured on 2 cores, that bookkeeping costs about 0.6 ms
per ref per task, and cloudpickling four small arguments about as much:
more than a tiny partition's whole compute. So a task travels as

- one ``bytes`` message (:func:`pack`): the partition task and the keys of
  the values it needs, pickled by the C pickler (cloudpickle only for what
  that cannot pickle by reference), which Ray passes on without pickling
  (a task or parameters holding Ray object refs or actor handles go through
  Ray's serializer as before, so that Ray tracks those refs);
- the values themselves only the first time an actor needs them: a run's
  parameters (per ``(run_id, version)``; packed bytes, or an object ref when
  they are large) and an in-memory partition's frames (an object ref: the
  worker reads them zero-copy). The driver keeps a :class:`Ledger` per
  actor of what it shipped there, the worker a :class:`ValueCache` (LRU) of
  what it resolved.

A worker may still lack a key the ledger lists: it evicted it, or the task
that carried the value was cancelled before it ran. Then :meth:`ValueCache.resolve`
raises :class:`CacheMiss`, the task does not run, and the executor forgets
the key in its ledger and submits the task again, this time with the value.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterable

from ray import cloudpickle

__all__ = ["pack", "unpack", "ValueCache", "Ledger", "CacheMiss"]


class CacheMiss(Exception):
    """A task named a cached value its worker does not hold (internal)."""

    def __init__(self, kind: str, key: Hashable):
        super().__init__(f"{kind} {key!r} is not cached on this worker")
        self.kind = kind
        self.key = key


#: Names in a pickle that mean it holds Ray object refs or actor handles. Pickled outside Ray's own
#: serializer they lose their ownership: the worker would not be registered as a borrower, and the
#: object could be freed while it still uses it. Such values go through Ray's serializer instead.
_RAY_HANDLES = (b"ObjectRef", b"ActorHandle")


def pack(obj: Any) -> bytes | None:
    """``obj`` pickled for a worker by the C pickler, or by cloudpickle where that is needed.

    Classes and functions of ``__main__`` (which the worker does not have)
    and local ones (which the C pickler refuses) go by value, through
    cloudpickle. Returns None if ``obj`` holds Ray object refs or actor
    handles: the caller passes it to Ray as it is.
    """
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        data = None
    if data is None or b"__main__" in data:
        data = cloudpickle.dumps(obj)
    if any(name in data for name in _RAY_HANDLES):
        return None
    return data


def unpack(data: bytes) -> Any:
    """The object :func:`pack` pickled."""
    return pickle.loads(data)


class ValueCache:
    """The worker's side: resolved values by key, least recently used dropped beyond ``capacity``."""

    def __init__(self, kind: str, capacity: int, fetch: Callable[[Any], Any]):
        self.kind = kind
        self.capacity = capacity
        self._fetch = fetch
        self._values: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, key: Hashable, shipped: Any = None) -> Any:
        """The value of ``key``: read from ``shipped`` (and kept) if given, else the kept one."""
        with self._lock:
            values = self._values
            if shipped is not None:
                value = values[key] = self._fetch(shipped)
            elif key in values:
                value = values[key]
            else:
                raise CacheMiss(self.kind, key)
            values.move_to_end(key)
            while len(values) > self.capacity:
                values.popitem(last=False)
            return value


    def forget(self, keys: Iterable[Hashable]) -> None:
        """Drop the values of ``keys`` (released on the driver)."""
        with self._lock:  # called from the actor's control thread, beside a running task
            for k in keys:
                self._values.pop(k, None)

    def __len__(self) -> int:
        return len(self._values)


class Ledger:
    """The driver's side, one per actor: which keys were shipped there (mirrors the worker's LRU)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._keys: "OrderedDict[Hashable, None]" = OrderedDict()

    def ship(self, key: Hashable) -> bool:
        """Note that a task for this actor uses ``key``; True if its value must go with the task."""
        keys = self._keys
        new = key not in keys
        keys[key] = None
        keys.move_to_end(key)
        while len(keys) > self.capacity:
            keys.popitem(last=False)
        return new

    def forget(self, key: Hashable) -> None:
        """Ship ``key``'s value again next time (the worker lacks it)."""
        self._keys.pop(key, None)

    def forget_all(self, keys: Iterable[Hashable]) -> list[Hashable]:
        """Forget ``keys``; returns those that were shipped (the worker may hold their values)."""
        held = [k for k in keys if k in self._keys]
        for k in held:
            del self._keys[k]
        return held
