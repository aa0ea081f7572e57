"""The UDFs clients may name: the built-ins and UDF classes of allow-listed server-side modules.

Each :class:`UDFSpec` has a name, the JSON schema of its parameters and
turns validated JSON parameters into constructor keyword arguments (for a
new UDF and for a live patch). Clients send names and numbers; the classes
and any code stay on the server.

>>> reg = UDFRegistry(udf_modules=["mypkg.analyses"])
>>> udf = reg.build({"name": "masks", "params": {"masks": [{"shape": "disk", "cy": 8, "cx": 8, "r": 3}]}},
...                 sig_shape=(16, 16), field="udfs[0]")
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
from typing import Any, Callable, Sequence

from raytile.common.errors import RaytileError
from raytile.serve.errors import BadRequest
from raytile.serve.mask_shapes import MASK_SCHEMA, MaskShape
from raytile.serve.validation import Schema, check
from raytile.udf import ApplyMasksUDF, CoMUDF, LogsumUDF, NoOpUDF, SignalMaxUDF, StdDevUDF, SumSigUDF, SumUDF
from raytile.udf.base import UDF

__all__ = ["UDFSpec", "UDFRegistry", "UDF_REF_SCHEMA", "schema_from_signature"]

#: One entry of ``udfs`` in ``POST /v1/runs``.
UDF_REF_SCHEMA: Schema = {
    "type": "object", "required": ["name"], "additionalProperties": False,
    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200}, "params": {"type": "object"}},
}

Translate = Callable[[dict[str, Any], tuple[int, ...]], dict[str, Any]]


def _same(params: dict[str, Any], sig_shape: tuple[int, ...]) -> dict[str, Any]:
    return dict(params)


def _masks_kwargs(params: dict[str, Any], sig_shape: tuple[int, ...]) -> dict[str, Any]:
    out = {k: v for k, v in params.items() if k != "masks"}
    if "masks" in params:
        out["mask_factories"] = [MaskShape.from_json(m, sig_shape) for m in params["masks"]]
    return out


def _com_kwargs(params: dict[str, Any], sig_shape: tuple[int, ...]) -> dict[str, Any]:
    out = dict(params)
    if "r" in out and out["r"] is None:
        out["r"] = math.inf  # JSON has no infinity: null means no outer limit
    return out


@dataclasses.dataclass(frozen=True)
class UDFSpec:
    """A UDF clients may name: its class, parameter schema and JSON -> kwargs translation."""

    name: str
    cls: type[UDF]
    schema: Schema
    description: str
    translate: Translate = _same

    def describe(self) -> dict[str, Any]:
        """``{"name", "description", "params"}`` for ``GET /v1/udfs``."""
        return {"name": self.name, "description": self.description, "params": self.schema}

    def kwargs(self, params: Any, sig_shape: tuple[int, ...], field: str, patch: bool = False) -> dict[str, Any]:
        """Validated constructor kwargs; a ``patch`` may leave out required parameters."""
        schema = dict(self.schema, required=[]) if patch else self.schema
        params = check({} if params is None else params, schema, field)
        try:
            kwargs = self.translate(params, sig_shape)
            for key, value in kwargs.items():  # factories are called now, so a bad mask is a 400, not a failed run
                if key == "mask_factories":
                    for i, f in enumerate(value):
                        f()
        except (ValueError, RaytileError) as e:
            raise BadRequest(field, str(e)) from None
        return kwargs


def _obj(props: dict[str, Schema], required: Sequence[str] = ()) -> Schema:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


_FLOAT_DTYPES = ["float32", "float64", "int64", "uint64", "complex64", "complex128"]

BUILTINS: tuple[UDFSpec, ...] = (
    UDFSpec("sum", SumUDF, _obj({"dtype": {"type": "string", "enum": _FLOAT_DTYPES}}),
            "sum of all frames: intensity (sig)"),
    UDFSpec("sumsig", SumSigUDF, _obj({}), "sum of each frame: intensity (nav)"),
    UDFSpec("max", SignalMaxUDF, _obj({}), "maximum of each pixel over all frames: intensity (sig)"),
    UDFSpec("stddev", StdDevUDF, _obj({}), "var, std, mean, sum (sig) and num_frames over all frames"),
    UDFSpec("logsum", LogsumUDF, _obj({}), "sum over frames of log(frame - frame.min() + 1): logsum (sig)"),
    UDFSpec("com", CoMUDF, _obj({"cy": {"type": ["number", "null"]}, "cx": {"type": ["number", "null"]},
                                 "r": {"type": ["number", "null"], "minimum": 0},
                                 "ri": {"type": "number", "minimum": 0},
                                 "scan_rotation": {"type": "number"}, "flip_y": {"type": "boolean"}}),
            "centre of mass of each frame within ri < d <= r of (cy, cx) (r null: no limit): field (y, x), "
            "magnitude, divergence, curl (nav), after flip_y and scan_rotation (degrees)", _com_kwargs),
    UDFSpec("masks", ApplyMasksUDF,
            _obj({"masks": {"type": "array", "items": MASK_SCHEMA, "minItems": 1, "maxItems": 64},
                  "use_sparse": {"type": ["boolean", "null"]}}, ["masks"]),
            "virtual detectors: intensity (nav, one per mask) of ring/disk/point masks", _masks_kwargs),
    UDFSpec("noop", NoOpUDF, _obj({}), "reads every tile, computes nothing (for benchmarks)"),
)

_JSON_TYPES: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def schema_from_signature(cls: type[UDF]) -> Schema | None:
    """A parameter schema from ``cls.__init__``: parameters annotated or defaulting to bool/int/float/str.

    A class may declare ``serve_params_schema`` (a JSON schema) instead.
    Returns None if a parameter has no JSON form (the class is then not offered).
    """
    declared = getattr(cls, "serve_params_schema", None)
    if declared is not None:
        return dict(declared)
    props: dict[str, Schema] = {}
    required = []
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        ann = p.annotation
        if isinstance(ann, str):
            ann = {"bool": bool, "int": int, "float": float, "str": str}.get(ann, ann)
        kind = _JSON_TYPES.get(ann) or (None if p.default is p.empty or p.default is None
                                        else _JSON_TYPES.get(type(p.default)))
        if kind is None:
            return None
        props[p.name] = {"type": ["integer", "number"] if kind == "number" else kind}
        if p.default is p.empty:
            required.append(p.name)
    return _obj(props, required)


def _module_specs(module_name: str) -> list[UDFSpec]:
    module = importlib.import_module(module_name)
    specs = []
    for attr, obj in sorted(vars(module).items()):
        if (inspect.isclass(obj) and issubclass(obj, UDF) and obj is not UDF
                and obj.__module__ == module.__name__ and not attr.startswith("_")):
            schema = schema_from_signature(obj)
            if schema is not None:
                doc = (inspect.getdoc(obj) or "").split("\n")[0]
                specs.append(UDFSpec(f"{module_name}.{attr}", obj, schema, doc))
    return specs


class UDFRegistry:
    """Built-in UDFs plus those of ``udf_modules`` (imported once, on the server)."""

    def __init__(self, udf_modules: Sequence[str] = ()):
        self.specs: dict[str, UDFSpec] = {s.name: s for s in BUILTINS}
        for mod in udf_modules:
            for spec in _module_specs(mod):
                self.specs[spec.name] = spec

    def describe(self) -> list[dict[str, Any]]:
        return [s.describe() for s in self.specs.values()]

    def spec(self, name: Any, field: str) -> UDFSpec:
        spec = self.specs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise BadRequest(field, f"unknown UDF {name!r}; known: {', '.join(sorted(self.specs))}")
        return spec

    def build(self, ref: Any, sig_shape: tuple[int, ...], field: str) -> UDF:
        """A UDF from ``{"name", "params"}``; raises BadRequest naming the field at fault."""
        check(ref, UDF_REF_SCHEMA, field)
        spec = self.spec(ref["name"], f"{field}.name")
        kwargs = spec.kwargs(ref.get("params"), sig_shape, f"{field}.params")
        try:
            return spec.cls(**kwargs)
        except (TypeError, ValueError, RaytileError) as e:
            raise BadRequest(f"{field}.params", f"{type(e).__name__}: {e}") from None
