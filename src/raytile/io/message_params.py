"""Data set parameters as JSON messages, converted to ``ctx.load`` keyword arguments.

LiberTEM's web API describes each format's parameters in a JSON schema and
converts a message (``{"type": "RAW", "path": ..., "nav_shape": [16, 16],
...}``) to the keyword arguments of the data set's constructor with a
``MessageConverter`` (``RAWDatasetParams().to_python(msg)``). Code written
against LiberTEM imports these converters from the format modules
(``libertem.io.dataset.raw.RAWDatasetParams``), so raytile has them at the
same paths, with LiberTEM's schemas and conversions. raytile's own
parameter checking is :mod:`raytile.io.params`; these only translate.
"""

from __future__ import annotations

from typing import Any

from raytile.io.backends.base import IOBackend

__all__ = ["MessageConverter", "RAWDatasetParams", "NPYDatasetParams"]


def _shape_2d() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "number", "minimum": 1}, "minItems": 2, "maxItems": 2}


def _file_schema(title: str, type_name: str, required: tuple[str, ...], **properties: Any) -> dict[str, Any]:
    """The JSON schema of a LiberTEM file format's message ``title`` (``{"type": type_name, ...}``): ``path``,
    then ``properties``, then what every such message may hold (2D ``nav_shape`` and ``sig_shape``,
    ``sync_offset``, ``io_backend``); ``required`` beside ``type`` and ``path``."""
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": f"http://libertem.org/{title}.schema.json",
        "title": title,
        "type": "object",
        "properties": {
            "type": {"const": type_name},
            "path": {"type": "string"},
            **properties,
            "nav_shape": _shape_2d(),
            "sig_shape": _shape_2d(),
            "sync_offset": {"type": "number"},
            "io_backend": {"enum": IOBackend.get_supported()},
        },
        "required": ["type", "path", *required],
    }


class MessageConverter:
    """Validates a JSON message against ``SCHEMA`` and converts it to Python keyword arguments (and back)."""

    SCHEMA: dict | None = None

    def validate(self, raw_data: Any) -> None:
        """``jsonschema.ValidationError`` if ``raw_data`` does not match ``SCHEMA`` (needs ``jsonschema``)."""
        if self.SCHEMA is None:
            raise NotImplementedError(f"{type(self).__name__} declares no SCHEMA")
        try:
            import jsonschema
        except ImportError as e:  # pragma: no cover - installed with Ray and with the test extra
            raise ImportError("validating data set parameter messages needs jsonschema "
                              "(pip install jsonschema)") from e
        jsonschema.validate(schema=self.SCHEMA, instance=raw_data)

    def to_python(self, raw_data: dict) -> dict:
        """Validated and converted; an ``io_backend`` id becomes that backend's object."""
        self.validate(raw_data)
        results = self.convert_to_python(raw_data)
        if "io_backend" in raw_data:
            backend = IOBackend.get_cls_by_id(raw_data["io_backend"])
            if backend is not None:
                results["io_backend"] = backend()
        return results

    def convert_to_python(self, raw_data: dict) -> dict:
        """The conversion itself; the message as it is unless a format overrides it."""
        return raw_data

    def from_python(self, raw_data: dict) -> dict:
        """Python keyword arguments as a message, validated."""
        converted = self.convert_from_python(raw_data)
        self.validate(converted)
        return converted

    def convert_from_python(self, raw_data: dict) -> dict:
        return raw_data


class RAWDatasetParams(MessageConverter):
    """The raw format's message: ``path``, ``dtype``, 2D ``nav_shape`` and ``sig_shape``, ``sync_offset``."""

    SCHEMA = _file_schema("RAWDatasetParams", "RAW", ("nav_shape", "sig_shape", "dtype"), dtype={"type": "string"})

    def convert_to_python(self, raw_data: dict) -> dict:
        data = {k: raw_data[k] for k in ("path", "dtype", "nav_shape", "sig_shape")}
        if "sync_offset" in raw_data:
            data["sync_offset"] = raw_data["sync_offset"]
        return data


class NPYDatasetParams(MessageConverter):
    """The npy format's message: ``path``, optional 2D ``nav_shape``/``sig_shape`` (tuples), ``sync_offset``."""

    SCHEMA = _file_schema("NPYDatasetParams", "NPY", ())

    def convert_to_python(self, raw_data: dict) -> dict:
        data: dict[str, Any] = {"path": raw_data["path"]}
        for key in ("nav_shape", "sig_shape"):
            if key in raw_data:
                data[key] = tuple(raw_data[key])
        if "sync_offset" in raw_data:
            data["sync_offset"] = int(raw_data["sync_offset"])
        return data
