"""A pipeline's configuration: streams and stages, parsed from a dict or a YAML file.

Parsing checks the structure (types of every field) and names the stage or
stream and the field that is wrong; the rules between stages (kinds, arity,
storage, shapes, writers, cycles) are checked by
:func:`raytile.pipeline.validation.validate_config`.

>>> cfg = PipelineConfig.from_dict({
...     "streams": {"a": {"shape": [4], "dtype": "float32"}, "b": {"shape": [4], "dtype": "float32"}},
...     "stages": [{"name": "src", "kind": "constant", "output": "a", "params": {"value": 1.0}},
...                {"name": "twice", "kind": "affine", "input": "a", "output": "b", "params": {"scale": 2.0}}]})
>>> cfg.stage("twice").input
'a'

An input written ``"name:-1"`` reads the value of the previous step (a
delayed input: it breaks a feedback loop).

For kernels ported from shmpipeline, a stage spec answers as a
``KernelConfig`` does: ``input``, ``output``, ``auxiliary``,
``auxiliary_names``, ``auxiliary_aliases``, ``all_inputs`` and
``parameters``; ``auxiliary`` may be a mapping alias -> stream, and the
parameters may be given under ``parameters`` instead of ``params``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError

__all__ = ["StreamSpec", "InputRef", "StageSpec", "PipelineConfig", "STORAGES"]

STORAGES = ("cpu", "gpu")
_STAGE_FIELDS = {"name", "kind", "input", "auxiliary", "inputs", "output", "outputs", "params", "parameters",
                 "target_device_idx", "precision", "placement"}


@dataclass(frozen=True)
class StreamSpec:
    """One stream: a fixed-shape array refilled each time its writer runs."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    storage: str = "cpu"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def describe(self) -> str:
        return f"{self.name} {list(self.shape)} {self.dtype} ({self.storage})"


@dataclass(frozen=True)
class InputRef:
    """A stream read by a stage; ``delay=1`` reads the previous step's value (``"name:-1"``)."""

    stream: str
    delay: int = 0

    @classmethod
    def parse(cls, text: Any, where: str) -> "InputRef":
        if not isinstance(text, str) or not text:
            raise ConfigValidationError(f"{where}: expected a stream name, got {text!r}")
        name, sep, lag = text.partition(":")
        if not sep:
            return cls(name)
        if lag != "-1" or not name:
            raise ConfigValidationError(f"{where}: {text!r}: a delayed input is written 'name:-1'")
        return cls(name, 1)

    def __str__(self) -> str:
        return f"{self.stream}:-1" if self.delay else self.stream


@dataclass(frozen=True)
class StageSpec:
    """One stage: its kind, the streams on its ports, parameters, device and placement group."""

    name: str
    kind: str
    inputs: Mapping[str, tuple[InputRef, ...]] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    target_device_idx: int | None = None
    precision: str | None = None
    placement: str | None = None
    list_ports: frozenset[str] = frozenset()
    #: the auxiliary inputs' aliases (shmpipeline's ``auxiliary: {alias: stream}``); () : the stream names
    aux_aliases: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        """The stage's group: the actor it shares with other stages under a Ray placement (the config's
        ``placement`` field; ``"main"`` if it names none)."""
        return self.placement or "main"

    @property
    def input(self) -> str | None:
        """The trigger input's stream name (port ``input``), if any."""
        refs = self.inputs.get("input")
        return refs[0].stream if refs else None

    @property
    def auxiliary(self) -> tuple[str, ...]:
        """Auxiliary stream names in config order."""
        return tuple(r.stream for r in self.inputs.get("auxiliary", ()))

    @property
    def auxiliary_names(self) -> tuple[str, ...]:
        """Auxiliary stream names in config order (shmpipeline's ``KernelConfig.auxiliary_names``)."""
        return self.auxiliary

    @property
    def auxiliary_aliases(self) -> tuple[str, ...]:
        """The keys of ``auxiliary_inputs`` in ``compute_into``: the aliases of a mapping ``auxiliary``,
        else the stream names."""
        return self.aux_aliases or self.auxiliary

    @property
    def auxiliary_by_alias(self) -> dict[str, str]:
        """Alias -> auxiliary stream name."""
        return dict(zip(self.auxiliary_aliases, self.auxiliary))

    @property
    def all_inputs(self) -> tuple[str, ...]:
        """The trigger input followed by the auxiliary streams, then any other ports' streams, in config
        order (shmpipeline's ``KernelConfig.all_inputs``)."""
        first = tuple(r.stream for r in self.inputs.get("input", ())) + self.auxiliary
        rest = tuple(r.stream for port, refs in self.inputs.items() if port not in ("input", "auxiliary")
                     for r in refs)
        return first + rest

    @property
    def parameters(self) -> Mapping[str, Any]:
        """The config's parameters (shmpipeline's name for ``params``)."""
        return self.params

    @property
    def output(self) -> str | None:
        return self.outputs.get("output")

    def all_input_refs(self) -> list[tuple[str, InputRef]]:
        """(port, ref) for every input in config order."""
        return [(port, ref) for port, refs in self.inputs.items() for ref in refs]

    def where(self) -> str:
        return f"stage {self.name!r}"


def _parse_stream(name: Any, raw: Any) -> StreamSpec:
    where = f"stream {name!r}"
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigValidationError(f"{where}: field 'name': expected a non-empty name without ':', got {name!r}")
    if not isinstance(raw, Mapping):
        raise ConfigValidationError(f"{where}: expected a mapping with shape and dtype, got {raw!r}")
    unknown = set(raw) - {"name", "shape", "dtype", "storage"}
    if unknown:
        raise ConfigValidationError(f"{where}: unknown field(s) {sorted(unknown)}")
    shape = raw.get("shape")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = [shape]
    if (not isinstance(shape, (list, tuple)) or not shape
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)):
        raise ConfigValidationError(f"{where}: field 'shape': expected a list of positive integers, got {shape!r}")
    try:
        dtype = np.dtype(raw.get("dtype", "float32"))
    except TypeError:
        raise ConfigValidationError(f"{where}: field 'dtype': not a dtype: {raw.get('dtype')!r}") from None
    storage = raw.get("storage", "cpu")
    if storage not in STORAGES:
        raise ConfigValidationError(f"{where}: field 'storage': expected 'cpu' or 'gpu', got {storage!r}")
    return StreamSpec(name, tuple(int(s) for s in shape), dtype, storage)


def _parse_stage(raw: Any, idx: int) -> StageSpec:
    if not isinstance(raw, Mapping):
        raise ConfigValidationError(f"stages[{idx}]: expected a mapping, got {raw!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigValidationError(f"stages[{idx}]: field 'name': expected a non-empty string, got {name!r}")
    where = f"stage {name!r}"
    unknown = set(raw) - _STAGE_FIELDS
    if unknown:
        raise ConfigValidationError(f"{where}: unknown field(s) {sorted(unknown)} (known: {sorted(_STAGE_FIELDS)})")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ConfigValidationError(f"{where}: field 'kind': expected a string, got {kind!r}")
    inputs: dict[str, tuple[InputRef, ...]] = {}
    list_ports: set[str] = set()
    if raw.get("input") is not None:
        inputs["input"] = (InputRef.parse(raw["input"], f"{where}: field 'input'"),)
    aliases: tuple[str, ...] = ()
    if raw.get("auxiliary") is not None:
        aux = raw["auxiliary"]
        if isinstance(aux, Mapping):  # shmpipeline's {alias: stream}
            for alias in aux:
                if not isinstance(alias, str) or not alias:
                    raise ConfigValidationError(f"{where}: field 'auxiliary': expected alias names, got {alias!r}")
            aliases = tuple(aux)
            aux = list(aux.values())
        if not isinstance(aux, (list, tuple)):
            raise ConfigValidationError(f"{where}: field 'auxiliary': expected a list of stream names or a "
                                        f"mapping alias -> stream, got {aux!r}")
        inputs["auxiliary"] = tuple(InputRef.parse(a, f"{where}: field 'auxiliary'") for a in aux)
        list_ports.add("auxiliary")
    more = raw.get("inputs") or {}
    if not isinstance(more, Mapping):
        raise ConfigValidationError(f"{where}: field 'inputs': expected a mapping port -> stream(s), got {more!r}")
    for port, refs in more.items():
        if port in inputs:
            raise ConfigValidationError(f"{where}: field 'inputs.{port}': port {port!r} given twice")
        if isinstance(refs, (list, tuple)):
            inputs[port] = tuple(InputRef.parse(r, f"{where}: field 'inputs.{port}'") for r in refs)
            list_ports.add(port)
        else:
            inputs[port] = (InputRef.parse(refs, f"{where}: field 'inputs.{port}'"),)
    outputs: dict[str, str] = {}
    if raw.get("output") is not None:
        outputs["output"] = raw["output"]
    more_out = raw.get("outputs") or {}
    if not isinstance(more_out, Mapping):
        raise ConfigValidationError(f"{where}: field 'outputs': expected a mapping port -> stream, got {more_out!r}")
    outputs.update(more_out)
    for port, s in outputs.items():
        if not isinstance(s, str) or not s or ":" in s:
            fld = "output" if port == "output" else f"outputs.{port}"
            raise ConfigValidationError(f"{where}: field {fld!r}: expected a stream name, got {s!r}")
    if raw.get("params") is not None and raw.get("parameters") is not None:
        raise ConfigValidationError(f"{where}: field 'parameters': give 'params' or 'parameters', not both")
    pkey = "parameters" if raw.get("parameters") is not None else "params"
    params = raw.get(pkey) or {}
    if not isinstance(params, Mapping):
        raise ConfigValidationError(f"{where}: field {pkey!r}: expected a mapping, got {params!r}")
    placement = raw.get("placement")
    if placement is not None and (not isinstance(placement, str) or not placement):
        raise ConfigValidationError(f"{where}: field 'placement': expected a group name, got {placement!r}")
    from raytile.pipeline.device import check_device_fields

    check_device_fields(raw.get("target_device_idx"), raw.get("precision"), where)
    return StageSpec(name=name, kind=kind, inputs=inputs, outputs=outputs, params=dict(params),
                     target_device_idx=raw.get("target_device_idx"), precision=raw.get("precision"),
                     placement=placement, list_ports=frozenset(list_ports), aux_aliases=aliases)


@dataclass(frozen=True)
class PipelineConfig:
    """Streams by name and stages in config order. Build one with :meth:`from_dict` or :meth:`from_yaml`."""

    streams: Mapping[str, StreamSpec]
    stages: tuple[StageSpec, ...]
    name: str = "pipeline"
    base_dir: str = "."

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], base_dir: str = ".") -> "PipelineConfig":
        """Parse a config mapping (structure only; see :func:`validate_config` for the rules)."""
        if not isinstance(raw, Mapping):
            raise ConfigValidationError(f"pipeline config: expected a mapping, got {type(raw).__name__}")
        unknown = set(raw) - {"name", "streams", "stages"}
        if unknown:
            raise ConfigValidationError(f"pipeline config: unknown field(s) {sorted(unknown)}")
        raw_streams = raw.get("streams") or {}
        streams: dict[str, StreamSpec] = {}
        if isinstance(raw_streams, Mapping):
            items = list(raw_streams.items())
        elif isinstance(raw_streams, (list, tuple)):
            items = [(s.get("name") if isinstance(s, Mapping) else None, s) for s in raw_streams]
        else:
            raise ConfigValidationError(f"pipeline config: field 'streams': expected a mapping or a list, "
                                        f"got {raw_streams!r}")
        for name, s in items:
            if name in streams:
                raise ConfigValidationError(f"stream {name!r}: field 'name': declared twice")
            streams[name] = _parse_stream(name, s)
        raw_stages = raw.get("stages")
        if not isinstance(raw_stages, (list, tuple)) or not raw_stages:
            raise ConfigValidationError(f"pipeline config: field 'stages': expected a non-empty list, got {raw_stages!r}")
        stages = tuple(_parse_stage(s, i) for i, s in enumerate(raw_stages))
        seen: set[str] = set()
        for st in stages:
            if st.name in seen:
                raise ConfigValidationError(f"stage {st.name!r}: field 'name': two stages have this name")
            seen.add(st.name)
        name = raw.get("name", "pipeline")
        if not isinstance(name, str):
            raise ConfigValidationError(f"pipeline config: field 'name': expected a string, got {name!r}")
        return cls(streams=streams, stages=stages, name=name, base_dir=base_dir)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> "PipelineConfig":
        """Read a YAML file (PyYAML's safe loader); relative paths in it resolve against its folder."""
        import yaml

        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                raw = yaml.safe_load(f)
        except OSError as e:
            raise ConfigValidationError(f"pipeline config {path!r}: cannot read: {e}") from None
        except yaml.YAMLError as e:
            raise ConfigValidationError(f"pipeline config {path!r}: not valid YAML: {e}") from None
        return cls.from_dict(raw, base_dir=os.path.dirname(os.path.abspath(path)))

    def stage(self, name: str) -> StageSpec:
        for s in self.stages:
            if s.name == name:
                return s
        raise ConfigValidationError(f"no stage named {name!r} (stages: {[s.name for s in self.stages]})")

    def writers(self) -> dict[str, str]:
        """Stream name -> the stage writing it (the first one; validation rejects two)."""
        out: dict[str, str] = {}
        for st in self.stages:
            for s in st.outputs.values():
                out.setdefault(s, st.name)
        return out
