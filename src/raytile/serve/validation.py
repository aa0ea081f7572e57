"""A small JSON-schema checker for request bodies; every error names the field at fault.

Covers the subset the app's schemas use: ``type`` (one or a list of
``object``, ``array``, ``string``, ``integer``, ``number``, ``boolean``,
``null``), ``enum``, ``const``, ``minimum``/``maximum``, ``minLength``/
``maxLength``, ``minItems``/``maxItems``, ``items``, ``properties``,
``required``, ``additionalProperties: false`` and ``oneOf`` with a
``discriminator`` (``{"propertyName": "shape"}``) choosing the branch by its
``const``. Numbers must be finite: JSON has no NaN or infinity.

>>> check({"ro": 5}, {"type": "object", "properties": {"ro": {"type": "number"}}}, "udfs[0].params")
{'ro': 5}
>>> check({"ro": "x"}, {"type": "object", "properties": {"ro": {"type": "number"}}}, "p")
Traceback (most recent call last):
BadRequest: p.ro: must be a number, got 'x'
"""

from __future__ import annotations

import math
from typing import Any

from raytile.io.params import show
from raytile.serve.errors import BadRequest

__all__ = ["check", "Schema"]

Schema = dict[str, Any]


def _is_type(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    raise ValueError(f"schema type {kind!r} is not supported")


_NAMES = {"object": "an object", "array": "a list", "string": "a string", "integer": "an integer",
          "number": "a number", "boolean": "true or false", "null": "null"}


def check(value: Any, schema: Schema, field: str) -> Any:
    """``value`` if it matches ``schema``; raises :class:`BadRequest` naming ``field`` (dotted path) if not."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is_type(value, k) for k in kinds):
            raise BadRequest(field, f"must be {' or '.join(_NAMES[k] for k in kinds)}, got {show(value)}")
    if "const" in schema and value != schema["const"]:
        raise BadRequest(field, f"must be {schema['const']!r}, got {show(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise BadRequest(field, f"must be one of {schema['enum']}, got {show(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_bounds(value, schema, field)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", math.inf):
            raise BadRequest(field, f"must have {schema.get('minLength', 0)} to "
                                    f"{schema.get('maxLength', 'any number of')} characters")
    if isinstance(value, list):
        _check_array(value, schema, field)
    if isinstance(value, dict):
        _check_object(value, schema, field)
    if "oneOf" in schema:
        _check_one_of(value, schema, field)
    return value


def _check_bounds(value: float, schema: Schema, field: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise BadRequest(field, f"must be >= {schema['minimum']}, got {show(value)}")
    if "maximum" in schema and value > schema["maximum"]:
        raise BadRequest(field, f"must be <= {schema['maximum']}, got {show(value)}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        raise BadRequest(field, f"must be > {schema['exclusiveMinimum']}, got {show(value)}")


def _check_array(value: list, schema: Schema, field: str) -> None:
    lo, hi = schema.get("minItems", 0), schema.get("maxItems", math.inf)
    if not lo <= len(value) <= hi:
        bound = f"at least {lo}" if len(value) < lo else f"at most {hi}"
        raise BadRequest(field, f"must have {bound} items, got {len(value)}")
    items = schema.get("items")
    if items is not None:
        for i, v in enumerate(value):
            check(v, items, f"{field}[{i}]")


def _check_object(value: dict, schema: Schema, field: str) -> None:
    props: dict[str, Schema] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise BadRequest(f"{field}.{name}", "is required")
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(value) - set(props))
        if unknown:
            raise BadRequest(f"{field}.{unknown[0]}", f"is not a known field; known: {', '.join(sorted(props))}")
    for name, sub in props.items():
        if name in value:
            check(value[name], sub, f"{field}.{name}")


def _check_one_of(value: Any, schema: Schema, field: str) -> None:
    branches: list[Schema] = schema["oneOf"]
    key = schema.get("discriminator", {}).get("propertyName")
    if key is not None:
        if not isinstance(value, dict) or key not in value:
            raise BadRequest(f"{field}.{key}", "is required")
        for branch in branches:
            if branch.get("properties", {}).get(key, {}).get("const") == value[key]:
                check(value, branch, field)
                return
        known = [b["properties"][key]["const"] for b in branches]
        raise BadRequest(f"{field}.{key}", f"must be one of {known}, got {show(value[key])}")
    errors = []
    for branch in branches:
        try:
            check(value, branch, field)
            return
        except BadRequest as e:
            errors.append(e.detail)
    raise BadRequest(field, "matches none of the allowed forms: " + "; ".join(errors))
