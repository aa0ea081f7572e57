"""Stream values, data objects and the inputs that read them (SPECULA's data objects, InputValue and InputList).

A :class:`StreamValue` is allocated once and refilled in place; its
``generation_time`` is the step that last refreshed it (``-1``: never). An
input remembers the generation it last consumed, so a stage can tell
whether anything new arrived.

>>> v = StreamValue("frame", np.zeros(4, np.float32))
>>> inp = InputValue(); inp.connect(v)
>>> inp.refreshed()
False
>>> v.value[:] = 1; v.generation_time = 0
>>> inp.refreshed(), inp.get()[0]
(True, 1.0)

Stages ported from SPECULA declare typed inputs in ``__init__``
(``self.inputs["in_slopes"] = InputValue(type=Slopes)``); connecting a
stream whose writer's output object is not a ``Slopes`` raises
ConfigValidationError naming the stage, the input and both types. A typed
input hands the stage the writer's output *object* (``local_inputs[...]``,
``get()``), as SPECULA does; an untyped input hands the array.

Output objects: a :class:`StreamValue` (what raytile allocates for declared
ports), a :class:`BaseValue` or any data object (a :class:`BaseDataObj`
subclass, or any object with ``generation_time``) holding the stream's array:
returned by its ``stream_array()`` method if it has one, else its ``value``
attribute, else its one array attribute of the stream's shape and dtype
(see :func:`stream_value_of`).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError, StreamRebound
from raytile.pipeline.device import resolve_device

__all__ = ["BaseDataObj", "BaseValue", "StreamValue", "ObjectStream", "InputValue", "InputList",
           "stream_value_of"]


class BaseDataObj:
    """A data object: arrays allocated with ``self.xp`` in ``self.dtype`` and a ``generation_time``
    (SPECULA's ``BaseDataObj``; ``precision`` is ``"single"``/``"double"`` or SPECULA's 1/0).

    >>> class Slopes(BaseDataObj):
    ...     def __init__(self, length, target_device_idx=None, precision=None):
    ...         super().__init__(target_device_idx=target_device_idx, precision=precision)
    ...         self.slopes = self.xp.zeros(length, dtype=self.dtype)
    """

    __slots__ = ("generation_time", "target_device_idx", "xp", "dtype", "complex_dtype", "__dict__")

    def __init__(self, target_device_idx: int | None = None, precision: Any = None):
        dev = resolve_device(target_device_idx, precision, where=type(self).__name__)
        self.target_device_idx = dev.idx
        self.xp = dev.xp
        self.dtype = dev.dtype
        self.complex_dtype = dev.complex_dtype
        self.generation_time = -1

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the array module (copies and pickles travel to delay lines and other actors)."""
        state = dict(getattr(self, "__dict__", {}))
        for klass in type(self).__mro__:
            for slot in getattr(klass, "__slots__", ()):
                if slot not in ("__dict__", "xp") and hasattr(self, slot):
                    state[slot] = getattr(self, slot)
        state.pop("xp", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
        idx = getattr(self, "target_device_idx", -1)
        if idx is not None and idx >= 0:
            import cupy

            self.xp = cupy
        else:
            self.xp = np


class BaseValue(BaseDataObj):
    """One array and a description (SPECULA's ``BaseValue``). Assign ``value`` once (in ``__init__``) and
    refill it in place afterwards: a pipeline reads the array it found at build time.

    >>> out = BaseValue("modes"); out.value = np.zeros(8, np.float32)
    """

    __slots__ = ("description", "_value")

    def __init__(self, description: str = "", value: Any = None, target_device_idx: int | None = None,
                 precision: Any = None):
        super().__init__(target_device_idx=target_device_idx, precision=precision)
        self.description = description
        self._value = value

    @property
    def value(self) -> Any:
        return self._value

    @value.setter
    def value(self, val: Any) -> None:
        self._value = val

    def get_value(self) -> Any:
        return self._value

    def set_value(self, val: Any) -> None:
        """Copy ``val`` into the array (allocate it on first use)."""
        if self._value is None:
            self._value = self.xp.array(val, copy=True)
        else:
            self._value[...] = val


class StreamValue(BaseValue):
    """A named array refilled in place each time its writer runs; ``value`` is never rebound."""

    __slots__ = ("name",)

    def __init__(self, name: str, value: Any):  # no device resolution: called for every stream
        self.name = name
        self.description = name
        self._value = value
        self.generation_time = -1
        self.target_device_idx = -1 if isinstance(value, np.ndarray) else int(getattr(value.device, "id", 0))

    @property
    def value(self) -> Any:
        return self._value

    @value.setter
    def value(self, val: Any) -> None:
        raise StreamRebound(f"stream {self.name!r}: its array is refilled in place by its writer, never "
                            "rebound: write into it (value[...] = ...) or use set_value")

    def __repr__(self) -> str:
        return f"StreamValue({self.name!r}, shape={tuple(self._value.shape)}, generation_time={self.generation_time})"


class ObjectStream(StreamValue):
    """A stream carried by a stage's own output object (``obj``): ``value`` is the object's array found at
    build time, ``generation_time`` is the object's."""

    __slots__ = ("obj", "attr")

    def __init__(self, name: str, obj: Any, attr: str | None, array: Any):
        super().__init__(name, array)
        self.obj = obj
        self.attr = attr  # None: the array comes from obj.stream_array()

    @property
    def generation_time(self) -> int:
        return self.obj.generation_time

    @generation_time.setter
    def generation_time(self, t: int) -> None:
        if hasattr(self, "obj"):
            self.obj.generation_time = t

    def current_array(self) -> Any:
        return self.obj.stream_array() if self.attr is None else getattr(self.obj, self.attr)

    def check_not_rebound(self, stage: str, port: str) -> None:
        """ConfigValidationError if the object's array is no longer the one the pipeline wired."""
        if self.current_array() is not self._value:
            where = f"the array of {type(self.obj).__name__}" + (f".{self.attr}" if self.attr else ".stream_array()")
            raise ConfigValidationError(f"stage {stage!r}: output {port!r} (stream {self.name!r}): {where} was "
                                        f"replaced by a new array; refill it in place (out[...] = x): readers "
                                        f"hold the array allocated at build time")

    def copy_object(self, name: str) -> "ObjectStream":
        """An independent copy (a delay line's), of the same type."""
        obj = copy.deepcopy(self.obj)
        return ObjectStream(name, obj, self.attr, obj.stream_array() if self.attr is None else getattr(obj, self.attr))

    def __repr__(self) -> str:
        return f"ObjectStream({self.name!r}, {type(self.obj).__name__}, generation_time={self.generation_time})"


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or (hasattr(x, "__cuda_array_interface__") and hasattr(x, "shape"))


def stream_value_of(obj: Any, name: str, shape: tuple[int, ...], dtype: np.dtype, where: str) -> StreamValue:
    """The :class:`StreamValue` through which the pipeline carries output object ``obj`` as stream ``name``.

    A StreamValue is used as it is. Any other object needs a ``generation_time`` attribute and an array of
    the stream's shape and dtype: ``obj.stream_array()``, else ``obj.value``, else its single array attribute
    of that shape and dtype. ConfigValidationError (naming ``where``) otherwise.
    """
    want = f"{list(shape)} {np.dtype(dtype)}"
    if isinstance(obj, StreamValue):
        arr, attr = obj.value, "value"
    else:
        if not hasattr(obj, "generation_time"):
            raise ConfigValidationError(f"{where}: {type(obj).__name__} has no 'generation_time' (derive output "
                                        f"objects from raytile.pipeline.BaseDataObj)")
        if callable(getattr(obj, "stream_array", None)):
            attr, arr = None, obj.stream_array()
        elif _is_array(getattr(obj, "value", None)):
            attr, arr = "value", obj.value
        else:
            found = [(k, v) for k, v in vars(obj).items()
                     if _is_array(v) and tuple(v.shape) == tuple(shape) and v.dtype == dtype]
            if len(found) != 1:
                seen = [f"{k} {list(v.shape)} {v.dtype}" for k, v in vars(obj).items() if _is_array(v)]
                raise ConfigValidationError(
                    f"{where}: {type(obj).__name__} has {'no' if not found else 'more than one'} array of the "
                    f"stream's shape and dtype {want} (arrays: {seen or 'none'}); give it a stream_array() "
                    f"method returning the one to carry")
            attr, arr = found[0]
    if not _is_array(arr) or tuple(arr.shape) != tuple(shape) or arr.dtype != dtype:
        got = f"{list(arr.shape)} {arr.dtype}" if _is_array(arr) else repr(type(arr).__name__)
        raise ConfigValidationError(f"{where}: {type(obj).__name__}.{attr or 'stream_array()'} is {got}, the "
                                    f"stream is declared {want}")
    if isinstance(obj, StreamValue):
        return obj
    return ObjectStream(name, obj, attr, arr)


def _type_name(t: Any) -> str:
    if isinstance(t, tuple):
        return " | ".join(_type_name(x) for x in t)
    return getattr(t, "__name__", repr(t))


def _carried(source: StreamValue) -> Any:
    """The object a typed input sees: the writer's own output object, or the StreamValue itself."""
    return source.obj if isinstance(source, ObjectStream) else source


def _check_type(wrapped_type: Any, source: StreamValue, where: str) -> None:
    if wrapped_type is None:
        return
    obj = _carried(source)
    if not isinstance(obj, wrapped_type):
        raise ConfigValidationError(f"{where}: expects {_type_name(wrapped_type)}, stream {source.name!r} "
                                    f"carries {type(obj).__name__}")


class InputValue:
    """One input of a stage. ``optional=True`` inputs may stay unconnected (``get()`` is then None).

    ``type`` (SPECULA's ``InputValue(type=...)``): the output object type this input accepts, checked when
    the pipeline connects it; such an input hands out the writer's object, an untyped one its array.
    """

    __slots__ = ("wrapped_type", "optional", "source", "last_seen")

    def __init__(self, type: Any = None, optional: bool = False):  # noqa: A002  (SPECULA's name)
        self.wrapped_type = type
        self.optional = optional
        self.source: StreamValue | None = None
        self.last_seen = -1

    def type(self) -> Any:
        """The declared type (None: any)."""
        return self.wrapped_type

    def connect(self, source: StreamValue, where: str = "input") -> None:
        """Read ``source`` from now on; ConfigValidationError naming ``where`` if its type does not fit."""
        _check_type(self.wrapped_type, source, where)
        self.source = source

    @property
    def connected(self) -> bool:
        return self.source is not None

    def get(self, target_device_idx: int | None = None) -> Any:
        """The writer's object (typed input) or array (untyped); None if unconnected."""
        s = self.source
        if s is None:
            return None
        return s.value if self.wrapped_type is None else _carried(s)

    def get_time(self) -> int | None:
        return None if self.source is None else self.source.generation_time

    def refreshed(self) -> bool:
        """True if the source was refreshed after the last :meth:`consume`."""
        s = self.source
        return s is not None and s.generation_time > self.last_seen

    def consume(self) -> None:
        if self.source is not None:
            self.last_seen = self.source.generation_time


class InputList:
    """An input taking a list of streams of one kind; ``get()`` returns their values (or objects) in order."""

    __slots__ = ("wrapped_type", "optional", "sources", "last_seen")

    def __init__(self, type: Any = None, optional: bool = False):  # noqa: A002
        self.wrapped_type = type
        self.optional = optional
        self.sources: list[StreamValue] = []
        self.last_seen: list[int] = []

    def type(self) -> Any:
        return self.wrapped_type

    def connect(self, source: StreamValue, where: str = "input") -> None:
        _check_type(self.wrapped_type, source, f"{where}[{len(self.sources)}]")
        self.sources.append(source)
        self.last_seen.append(-1)

    @property
    def connected(self) -> bool:
        return bool(self.sources)

    def get(self, target_device_idx: int | None = None) -> list[Any]:
        if self.wrapped_type is None:
            return [s.value for s in self.sources]
        return [_carried(s) for s in self.sources]

    def get_time(self) -> list[int]:
        return [s.generation_time for s in self.sources]

    def refreshed(self) -> bool:
        return any(s.generation_time > seen for s, seen in zip(self.sources, self.last_seen))

    def consume(self) -> None:
        self.last_seen = [s.generation_time for s in self.sources]
