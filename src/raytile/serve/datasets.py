"""Data sets from JSON: each format's parameter schema as JSON schema, and opening one inside the data roots.

Parameters that only Python can give (arrays, correction sets) are left
out, so formats that need them (``memory``) are not offered over HTTP.
Path parameters are resolved by :class:`~raytile.serve.paths.DataRoots`
before the format sees them.

>>> schema = format_json_schema("raw")
>>> schema["properties"]["nav_shape"]
{'type': 'array', 'items': {'type': 'integer', 'minimum': 1}, 'minItems': 1, 'maxItems': 8}
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.io.dataset import DataSet
from raytile.io.formats import get_format, known_formats
from raytile.io.params import json_schema
from raytile.io.store import is_url, scrub
from raytile.serve.detection import RAW_NEEDS
from raytile.serve.errors import BadRequest
from raytile.serve.paths import DataRoots
from raytile.serve.validation import Schema, check

__all__ = ["format_json_schema", "served_formats", "resolve_dataset", "open_dataset", "npy_header", "DATASET_SCHEMA"]

#: The ``dataset`` field of ``POST /v1/runs``.
DATASET_SCHEMA: Schema = {
    "type": "object",
    "required": ["format"],
    "additionalProperties": False,
    "properties": {"format": {"type": "string", "minLength": 1, "maxLength": 64},
                   "params": {"type": "object"}},
}


def format_json_schema(name: str) -> Schema:
    """The JSON schema of format ``name``'s parameters as clients send them, built from the format's
    declared ``params_schema`` (each kind's JSON form: :data:`raytile.io.params.JSON_FORMS`)."""
    schema = get_format(name).get_params_schema()
    # LiberTEM's deprecated names (``"deprecated_for"``) are for ported Python code, not offered to clients
    forms = {k: json_schema(s) for k, s in schema.items() if not s.get("deprecated_for")}
    props = {k: form for k, form in forms.items() if form is not None}
    required = sorted(k for k, s in schema.items() if s.get("required") and k in props)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def served_formats() -> dict[str, Schema]:
    """Formats a client can open (every required parameter has a JSON form), with their schemas."""
    out = {}
    for name in known_formats():
        schema = get_format(name).get_params_schema()
        if any(s.get("required") and json_schema(s) is None for s in schema.values()):
            continue
        out[name] = format_json_schema(name)
    return out


_PARAM_IN_MESSAGE = re.compile(r"parameter '(\w+)'")


def resolve_dataset(spec: Any, roots: DataRoots, field: str = "dataset",
                    formats: dict[str, Schema] | None = None) -> tuple[str, dict[str, Any]]:
    """The format name and its parameters from ``{"format", "params"}``: validated against the format's
    schema (``formats``: :func:`served_formats`, computed once by the caller), paths resolved inside
    ``roots`` (BadRequest 400, Forbidden 403)."""
    check(spec, DATASET_SCHEMA, field)
    formats = served_formats() if formats is None else formats
    name = spec["format"].lower()
    if name not in formats:
        raise BadRequest(f"{field}.format", f"unknown format {spec['format']!r}; known: {', '.join(sorted(formats))}")
    schema = formats[name]
    _refuse_empty(name, spec.get("params", {}), schema, f"{field}.params")
    params = dict(check(spec.get("params", {}), schema, f"{field}.params"))
    for key, sub in schema["properties"].items():
        if key in params and sub.get("format") == "path":
            where = f"{field}.params.{key}"
            params[key] = roots.resolve_many(params[key], where) if isinstance(sub["type"], list) \
                else roots.resolve(params[key], where)
            first = params[key] if isinstance(params[key], str) else params[key][0]
            if is_url(first) and "storage_options" in get_format(name).get_params_schema():
                params["storage_options"] = roots.storage_options  # the server's, never the client's
    return name, params


def _what_to_enter(key: str, sub: Schema) -> str:
    """What a client should give for parameter ``key`` (schema ``sub``), for a message."""
    if key in RAW_NEEDS:
        return RAW_NEEDS[key].replace("integers separated by commas", "a list of integers").replace(
            "e.g. 64,64", "e.g. [64, 64]").replace("e.g. 256,256", "e.g. [256, 256]")
    items = sub.get("items", {})
    if sub.get("type") == "array" and items.get("type") == "integer":
        return "a list of integers, e.g. [64, 64]"
    kinds = sub.get("type")
    return f"a value of type {kinds}" if kinds else "a value"


def _refuse_empty(name: str, params: Any, schema: Schema, field: str) -> None:
    """A required parameter left out, or any given as null or with null items (a form's empty fields),
    is a BadRequest that names it and says what to enter (not ``must be an integer, got None``)."""
    if not isinstance(params, dict):
        return  # the schema check says what is wrong
    props: dict[str, Schema] = schema.get("properties", {})
    for key in props:  # in the format's order of parameters (a form's order): the first empty one is named
        value = params.get(key)
        empty = value is None or (isinstance(value, list) and (not value or any(v is None for v in value)))
        if key in props and empty and (key in params or key in schema.get("required", ())):
            state = "is missing" if key not in params else "is empty"
            raise BadRequest(f"{field}.{key}", f"{state}; the {name} format needs {key}: "
                                               f"{_what_to_enter(key, props[key])}")


def open_dataset(ctx: Any, name: str, params: dict[str, Any], field: str = "dataset") -> DataSet:
    """Load a resolved data set (see :func:`resolve_dataset`) with ``ctx``; errors become BadRequest (400).

    Blocking (the format may read headers on a worker): call it from a thread.
    """
    try:
        return ctx.load(name, **params)
    except ConfigValidationError as e:
        m = _PARAM_IN_MESSAGE.search(str(e))
        raise BadRequest(f"{field}.params" + (f".{m.group(1)}" if m else ""), str(e)) from None
    except (DataSetException, OSError, ValueError) as e:
        raise BadRequest(f"{field}.params", scrub(f"{type(e).__name__}: {e}", params.get("storage_options"))) from None


def npy_header(path: str) -> dict[str, Any] | None:
    """``{"format": "npy", "shape", "dtype"}`` of an ``.npy`` file (its header alone is read), else None."""
    if not path.endswith(".npy"):
        return None
    try:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
    except (OSError, ValueError):
        return None
    return {"format": "npy", "shape": list(shape), "dtype": dtype.str}
