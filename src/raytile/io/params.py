"""Data set parameters: one validation path for ``Context.load``, direct construction and JSON.

A format declares its constructor parameters in ``params_schema``, a dict
``name -> {"type": kind, "required": bool, "min": int, "max": int, "choices": [...],
"deprecated_for": name}`` (an old name of another parameter, LiberTEM's ``scan_size``)
with ``kind`` one of :data:`CHECKS`. ``"required": "by_format"`` marks a parameter
the format needs but checks itself (to raise its own exception, as LiberTEM's
``MemoryDataSet`` without ``data``): validation lets it be missing. :func:`validate_params` checks the given
values against a schema before the constructor runs and converts them to one
canonical form (``int``, tuples of ``int``, ``str`` paths, ``np.dtype``), so
constructors only ever see valid values. Python values (tuples, numpy
integers, ``pathlib.Path``, ``np.dtype``) and their JSON forms (lists,
strings) are both accepted; nothing is truncated or guessed (``7.5`` is not a
shape entry, ``None`` is not a dtype). ``None`` stands for "not given", as
JSON ``null`` does. Every error is a
:class:`~raytile.common.errors.ConfigValidationError` naming the format, the
parameter and the value.
"""

from __future__ import annotations

import difflib
import math
import os
import reprlib
from typing import Any, Callable

import numpy as np

from raytile.common.errors import ConfigValidationError, MissingParameterError
from raytile.common.shape import Shape
from raytile.io.corrections import CorrectionSet

__all__ = ["validate_params", "json_schema", "ParamSpec", "show", "CHECKS", "JSON_FORMS", "INT64_MAX", "INT64_MIN"]

#: Largest byte offset, frame count or element count the read code (int64 arithmetic) handles.
INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = int(np.iinfo(np.int64).min)

ParamSpec = dict[str, Any]

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 120
_repr.maxlist = _repr.maxtuple = 8


def show(value: Any) -> str:
    """``repr(value)`` cut to a readable length (a rejected value may be a huge list)."""
    return _repr.repr(value)


class _Invalid(Exception):
    """Raised by a check with what the value should have been; :func:`validate_params` words the error."""


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(value: Any, spec: ParamSpec) -> int:
    """An integer (Python or numpy, not bool, not float) within ``spec``'s min/max and int64."""
    lo, hi = spec.get("min", INT64_MIN), spec.get("max", INT64_MAX)
    if not _is_int(value) or not lo <= int(value) <= hi:
        bounds = " and ".join(b for b in (f">= {lo}" if "min" in spec else "", f"<= {hi}" if "max" in spec else "") if b)
        raise _Invalid(f"a 64-bit integer {bounds}".rstrip())
    return int(value)


def check_shape(value: Any, spec: ParamSpec) -> tuple[int, ...]:
    """A non-empty sequence (list, tuple, 1-D array, Shape) of positive integers whose product fits int64."""
    what = "a non-empty list of positive integers"
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise _Invalid(what)
    if not isinstance(value, (list, tuple, np.ndarray, Shape)) or len(value) == 0:
        raise _Invalid(what)
    if not all(_is_int(v) and int(v) > 0 for v in value):
        raise _Invalid(what)
    dims = tuple(int(v) for v in value)
    if math.prod(dims) > INT64_MAX:
        raise _Invalid(f"{what} whose product is at most {INT64_MAX}")
    return dims


def check_dtype(value: Any, spec: ParamSpec) -> np.dtype:
    """A numeric numpy dtype given by name (``"uint16"``, ``">f4"``), ``np.dtype`` or type (``np.uint16``)."""
    what = "a numeric dtype such as 'uint16', '>f4' or np.float32"
    if not isinstance(value, (str, np.dtype, type)):
        raise _Invalid(what)
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise _Invalid(what) from None
    if dtype.kind not in "biufc":
        raise _Invalid(what)
    return dtype


def check_bool(value: Any, spec: ParamSpec) -> bool:
    """``True`` or ``False`` (Python or numpy bool; not 0/1, not a string)."""
    if not isinstance(value, (bool, np.bool_)):
        raise _Invalid("True or False")
    return bool(value)


def check_str(value: Any, spec: ParamSpec) -> str:
    if not isinstance(value, str):
        raise _Invalid("a string")
    return value


def check_path(value: Any, spec: ParamSpec) -> str:
    """A file path: ``str`` or ``os.PathLike`` (``pathlib.Path``)."""
    if not isinstance(value, (str, os.PathLike)):
        raise _Invalid("a path (str or pathlib.Path)")
    path = os.fspath(value)
    if not isinstance(path, str) or not path:
        raise _Invalid("a non-empty path (str or pathlib.Path)")
    return path


def check_paths(value: Any, spec: ParamSpec) -> str | list[str]:
    """A path or glob pattern, or a non-empty list of paths (kept as a list: its order is the frame order)."""
    what = "a path, a glob pattern or a non-empty list of paths"
    if isinstance(value, (list, tuple)):
        if not value:
            raise _Invalid(what)
        try:
            return [check_path(v, spec) for v in value]
        except _Invalid:
            raise _Invalid(what) from None
    try:
        return check_path(value, spec)
    except _Invalid:
        raise _Invalid(what) from None


def check_storage_options(value: Any, spec: ParamSpec) -> Any:
    """fsspec ``storage_options`` of a URL path: a mapping of string keys (``endpoint_url``, ``key``,
    ``secret``, ``anon``, ``region``, ...), kept as a :class:`~raytile.io.store.StorageOptions` whose
    repr hides secrets."""
    from collections.abc import Mapping

    from raytile.io.store import StorageOptions

    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Invalid("a dict of fsspec storage options with string keys (endpoint_url, key, secret, anon, "
                       "region, ...)")
    return value if isinstance(value, StorageOptions) else StorageOptions(value)


def check_choice(value: Any, spec: ParamSpec) -> str:
    """One of ``spec["choices"]`` (strings, compared exactly)."""
    if not isinstance(value, str) or value not in spec["choices"]:
        raise _Invalid(f"one of {list(spec['choices'])}")
    return value


def check_io_backend(value: Any, spec: ParamSpec) -> Any:
    """An IO backend's name (one of ``spec["choices"]``), given by name or as a backend object
    (``io_backend=MMapBackend()``, as LiberTEM takes it). An object of another :class:`IOBackend`
    subclass (a user's backend, as LiberTEM takes any) is kept as it is: the partitions read with it."""
    from raytile.io.backends import IOBackend, backend_name, is_own_backend

    if isinstance(value, IOBackend):
        if not is_own_backend(value):
            return value
        value = backend_name(value)
    return check_choice(value, spec)


def check_array(value: Any, spec: ParamSpec) -> Any:
    """An array with ``shape`` and ``dtype`` (numpy, CuPy, sparse, scipy.sparse), kept as it is."""
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise _Invalid("an array (numpy, CuPy, sparse or scipy.sparse)")
    return value


def check_iterable(value: Any, spec: ParamSpec) -> Any:
    """An iterable or async iterable (a generator, a list of arrays), kept as it is."""
    if isinstance(value, (str, bytes)) or not (hasattr(value, "__iter__") or hasattr(value, "__aiter__")):
        raise _Invalid("an iterable or async iterable of numpy arrays")
    return value


def check_callable(value: Any, spec: ParamSpec) -> Any:
    """A callable object (a frame transform), kept as it is."""
    if not callable(value):
        raise _Invalid("a callable (e.g. a raytile.pipeline.frame_stacks.FrameStackPipeline)")
    return value


def check_corrections(value: Any, spec: ParamSpec) -> CorrectionSet:
    if not isinstance(value, CorrectionSet):
        raise _Invalid("a raytile.io.CorrectionSet")
    return value


#: Parameter kinds and their checks: each returns the canonical value or raises ``_Invalid``.
CHECKS: dict[str, Callable[[Any, ParamSpec], Any]] = {
    "int": check_int,
    "bool": check_bool,
    "shape": check_shape,
    "dtype": check_dtype,
    "str": check_str,
    "path": check_path,
    "paths": check_paths,
    "choice": check_choice,
    "storage_options": check_storage_options,
    "io_backend": check_io_backend,
    "array": check_array,
    "iterable": check_iterable,
    "callable": check_callable,
    "corrections": check_corrections,
}


def _json_int(spec: ParamSpec) -> dict[str, Any]:
    return {"type": "integer", "minimum": spec.get("min", INT64_MIN), "maximum": spec.get("max", INT64_MAX)}


def _json_path(spec: ParamSpec) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": 4096, "format": "path"}


#: Each parameter kind's JSON schema as a client sends it (Serve builds a format's request schema from
#: these and the format's ``params_schema``), or None for kinds only Python can give (a kind missing
#: here counts as such). A new kind is declared here beside its check; a new format needs no change in
#: serve/.
JSON_FORMS: dict[str, Callable[[ParamSpec], dict[str, Any]] | None] = {
    "int": _json_int,
    "bool": lambda spec: {"type": "boolean"},
    "shape": lambda spec: {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1,
                           "maxItems": 8},
    "dtype": lambda spec: {"type": "string", "minLength": 1, "maxLength": 16,
                           "description": "numpy dtype, e.g. 'uint16', '>f4'"},
    "str": lambda spec: {"type": "string", "minLength": 1, "maxLength": 4096},
    "path": _json_path,
    "paths": lambda spec: {"type": ["string", "array"], "items": {"type": "string", "minLength": 1,
                                                                  "maxLength": 4096},
                           "minItems": 1, "maxItems": 100_000, "format": "path"},
    "choice": lambda spec: {"type": "string", "enum": list(spec["choices"])},
    "io_backend": lambda spec: {"type": "string", "enum": list(spec["choices"])},  # by name over HTTP
    "storage_options": None,  # credentials: a server's own (serve's storage_options), never a client's
    "array": None,
    "iterable": None,
    "callable": None,
    "corrections": None,
}


def json_schema(spec: ParamSpec) -> dict[str, Any] | None:
    """The JSON schema of one declared parameter as a client sends it, or None if only Python can give
    it (arrays, iterables, correction sets, kinds without an entry in :data:`JSON_FORMS`).

    >>> json_schema({"type": "int", "min": 1})["minimum"]
    1
    """
    form = JSON_FORMS.get(spec["type"])
    return None if form is None else form(spec)


def _given_by_old_name(schema: dict[str, ParamSpec], params: dict[str, Any], name: str) -> bool:
    """Whether ``name`` came under an old name of it (a parameter declared ``"deprecated_for": name``,
    such as LiberTEM's ``scan_size`` for ``nav_shape``), which the format maps to it."""
    return any(params.get(old) is not None for old, spec in schema.items() if spec.get("deprecated_for") == name)


def validate_params(owner: str, schema: dict[str, ParamSpec], params: dict[str, Any]) -> dict[str, Any]:
    """Check ``params`` against ``schema``; return the given (non-None) ones in canonical form.

    ``owner`` names the format in messages. Unknown names, missing required
    parameters and values of the wrong kind raise ConfigValidationError.
    """
    unknown = sorted(set(params) - set(schema))
    if unknown:
        hints = [f"{u!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(u, schema, 1))
                 else repr(u) for u in unknown]
        raise ConfigValidationError(
            f"{owner}: unknown parameter {', '.join(hints)}; known parameters: {', '.join(sorted(schema))}"
        )
    out = {}
    for name, spec in schema.items():
        value = params.get(name)
        if value is None:
            if spec.get("required") is True and not _given_by_old_name(schema, params, name):
                if name in params:
                    raise ConfigValidationError(f"{owner}: parameter {name!r} is required, got None")
                raise MissingParameterError(f"{owner}: parameter {name!r} is required "
                                            f"(missing 1 required argument: {name!r})")
            continue
        check = CHECKS.get(spec["type"])
        if check is None:
            raise ConfigValidationError(f"{owner}: parameter {name!r} has unknown schema type {spec['type']!r}")
        try:
            out[name] = check(value, spec)
        except _Invalid as e:
            got = "a value of type " + type(value).__name__ if spec["type"] == "storage_options" else show(value)
            raise ConfigValidationError(f"{owner}: parameter {name!r} must be {e}, got {got}") from None
    return out
