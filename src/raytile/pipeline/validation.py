"""Every rule a pipeline config must pass before anything is built.

The rules, in the order they are checked (each error names the stage and
the field): the kind is known; every stream a stage names is declared;
no stream has two writers; every input is written by some stage; each
stage class accepts its ports, their arity, storage, parameters and the
shapes/dtypes of the streams connected to it; same-step inputs form no
cycle (a ``name:-1`` input breaks one); placement groups exchange same-step
values in one direction only.

>>> validate_config(PipelineConfig.from_yaml("examples/ao_loop.yaml"))
"""

from __future__ import annotations

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import PipelineConfig
from raytile.pipeline.order import trigger_levels
from raytile.pipeline.registry import get_stage_class

__all__ = ["validate_config", "group_order"]


def _fld(port: str, output: bool = False) -> str:
    if output:
        return "output" if port == "output" else f"outputs.{port}"
    return port if port in ("input", "auxiliary") else f"inputs.{port}"


def validate_config(config: PipelineConfig) -> list[tuple[str, ...]]:
    """Check every rule; return the trigger levels. Raises ConfigValidationError naming stage and field."""
    for st in config.stages:
        try:
            get_stage_class(st.kind)
        except ConfigValidationError as e:
            raise ConfigValidationError(f"{st.where()}: field 'kind': {e}") from None
    for st in config.stages:
        for port, ref in st.all_input_refs():
            if ref.stream not in config.streams:
                raise ConfigValidationError(f"{st.where()}: field {_fld(port)!r}: stream {ref.stream!r} is not "
                                            f"declared under 'streams'")
        for port, name in st.outputs.items():
            if name not in config.streams:
                raise ConfigValidationError(f"{st.where()}: field {_fld(port, True)!r}: stream {name!r} is not "
                                            f"declared under 'streams'")
    writer: dict[str, str] = {}
    for st in config.stages:
        for port, name in st.outputs.items():
            if name in writer:
                raise ConfigValidationError(f"{st.where()}: field {_fld(port, True)!r}: stream {name!r} is already "
                                            f"written by stage {writer[name]!r} (one writer per stream)")
            writer[name] = st.name
    for st in config.stages:
        for port, ref in st.all_input_refs():
            if ref.stream not in writer:
                raise ConfigValidationError(f"{st.where()}: field {_fld(port)!r}: no stage writes stream "
                                            f"{ref.stream!r}")
    for st in config.stages:
        get_stage_class(st.kind).validate_config(st, config.streams)
    levels = trigger_levels(config)
    group_order(config)
    return levels


def group_order(config: PipelineConfig) -> list[str]:
    """Placement groups in data-flow order (stages without ``placement`` form the group ``"main"``).

    Same-step values may cross groups in one direction only, so that groups
    chain over the step channel; delayed inputs (``name:-1``) may
    cross in any direction (the driver hands them over between steps).
    """
    group = {st.name: st.group for st in config.stages}
    writers = config.writers()
    deps: dict[str, set[str]] = {g: set() for g in dict.fromkeys(group.values())}
    for st in config.stages:
        for port, ref in st.all_input_refs():
            w = writers[ref.stream]
            if group[w] == group[st.name]:
                continue
            if not ref.delay:
                deps[group[st.name]].add(group[w])
    order: list[str] = []
    while len(order) < len(deps):
        ready = [g for g in deps if g not in order and deps[g] <= set(order)]
        if not ready:
            stuck = [g for g in deps if g not in order]
            raise ConfigValidationError(f"stage {next(s for s, g in group.items() if g == stuck[0])!r}: field "
                                        f"'placement': groups {stuck} exchange values both ways; "
                                        f"they must form a chain")
        order.extend(ready)
    return order
