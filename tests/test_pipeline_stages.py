"""Stages: life cycle, ports, preallocated outputs and generation_time, kernels, the registry."""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import numpy as np
import pytest

from raytile.common.errors import ConfigValidationError
from raytile.pipeline import Kernel, Pipeline, Port, Stage, get_stage_class, register_stage
from raytile.pipeline import registry
from raytile.pipeline.connections import InputValue, StreamValue


@register_stage
class WeightedSum(Stage):
    """A SPECULA-style stage: a list input, an optional input, everything in prepare/trigger/post."""

    kind = "test.weighted_sum"
    input_ports: ClassVar[Mapping[str, Port]] = {"terms": Port(many=True), "bias": Port(optional=True)}
    output_ports = ("output",)
    defaults: ClassVar[Mapping[str, Any]] = {"weight": 1.0}
    calls: ClassVar[list[str]] = []

    def setup(self) -> None:
        super().setup()
        self.calls.append(f"{self.name}.setup")
        self.acc = self.xp.zeros(self.outputs["output"].value.shape, dtype=self.dtype)

    def prepare_trigger(self, t: int) -> None:
        super().prepare_trigger(t)
        self.calls.append(f"{self.name}.prepare")
        self.acc[...] = 0
        for v in self.local_inputs["terms"]:
            self.acc += v

    def trigger_code(self) -> None:
        self.calls.append(f"{self.name}.trigger")
        self.xp.multiply(self.acc, self.params["weight"], out=self.outputs["output"].value)
        if self.local_inputs["bias"] is not None:
            self.outputs["output"].value[...] += self.local_inputs["bias"]

    def post_trigger(self) -> None:
        super().post_trigger()
        self.calls.append(f"{self.name}.post")

    def finalize(self) -> None:
        self.calls.append(f"{self.name}.finalize")


def weighted_config(with_bias: bool = False) -> dict:
    cfg = {
        "streams": {n: {"shape": [3], "dtype": "float32"} for n in ("a", "b", "c", "s", "t")},
        "stages": [
            {"name": "a", "kind": "constant", "output": "a", "params": {"value": [1, 2, 3]}},
            {"name": "b", "kind": "constant", "output": "b", "params": {"value": 10.0}},
            {"name": "c", "kind": "constant", "output": "c", "params": {"value": 0.5}},
            {"name": "sum1", "kind": "test.weighted_sum", "inputs": {"terms": ["a", "b"]}, "output": "s",
             "params": {"weight": 2.0}},
            {"name": "sum2", "kind": "test.weighted_sum", "inputs": {"terms": ["s"]}, "output": "t"},
        ],
    }
    if with_bias:
        cfg["stages"][4]["inputs"]["bias"] = "c"
    return cfg


def test_life_cycle_and_level_phases():
    WeightedSum.calls.clear()
    p = Pipeline.from_dict(weighted_config()).build()
    assert WeightedSum.calls == ["sum1.setup", "sum2.setup"]
    WeightedSum.calls.clear()
    p.step()
    # one stage a level here: prepare, trigger, post per level, levels in order
    assert WeightedSum.calls == ["sum1.prepare", "sum1.trigger", "sum1.post",
                                 "sum2.prepare", "sum2.trigger", "sum2.post"]
    np.testing.assert_allclose(p.read("t"), (np.array([1, 2, 3]) + 10) * 2.0)
    WeightedSum.calls.clear()
    p.step()  # constants emitted once: nothing refreshed, nothing triggered
    assert WeightedSum.calls == []
    p.close()
    assert WeightedSum.calls == ["sum1.finalize", "sum2.finalize"]


def test_optional_input_and_live_parameter_update():
    p = Pipeline.from_dict(weighted_config(with_bias=True)).build()
    p.step()
    np.testing.assert_allclose(p.read("t"), (np.array([1, 2, 3]) + 10) * 2.0 + 0.5)
    p.update_parameters("a", value=[0, 0, 1])  # re-emits a: sum1 and sum2 run again
    p.step()
    np.testing.assert_allclose(p.read("t"), (np.array([0, 0, 1]) + 10) * 2.0 + 0.5)
    with pytest.raises(ConfigValidationError, match="field 'params.wieght'"):
        p.update_parameters("sum1", wieght=3)


def test_same_level_phases_are_grouped():
    cfg = {
        "streams": {n: {"shape": [2], "dtype": "float32"} for n in ("x", "y", "z")},
        "stages": [
            {"name": "x", "kind": "constant", "output": "x", "params": {"value": 1.0}},
            {"name": "p", "kind": "test.weighted_sum", "inputs": {"terms": ["x"]}, "output": "y"},
            {"name": "q", "kind": "test.weighted_sum", "inputs": {"terms": ["x"]}, "output": "z"},
        ],
    }
    p = Pipeline.from_dict(cfg).build()
    WeightedSum.calls.clear()
    p.step()
    assert WeightedSum.calls == ["p.prepare", "q.prepare", "p.trigger", "q.trigger", "p.post", "q.post"]


def test_outputs_are_allocated_once_and_stamped():
    p = Pipeline.from_dict(weighted_config()).build()
    out = p.stage("sum1").outputs["output"]
    arr = out.value
    assert out.generation_time == -1
    p.step(3)
    assert out.value is arr and out.generation_time == 0
    with pytest.raises(AttributeError):
        out.value = np.zeros(3)  # type: ignore[misc]
    p.update_parameters("b", value=1.0)
    p.step()
    assert out.value is arr and out.generation_time == 3 and p.generation("s") == 3


def test_input_value_readiness():
    v = StreamValue("v", np.zeros(2))
    inp = InputValue()
    assert not inp.refreshed()
    inp.connect(v)
    assert not inp.refreshed()
    v.generation_time = 0
    assert inp.refreshed()
    inp.consume()
    assert not inp.refreshed()


def test_kernel_without_boilerplate_and_output_rule():
    @register_stage
    class Square(Kernel):
        kind = "test.square"

        def compute_into(self, trigger_input, output, auxiliary_inputs):
            np.multiply(trigger_input, trigger_input, out=output)

    cfg = {"streams": {"a": {"shape": [4], "dtype": "float32"}, "b": {"shape": [4], "dtype": "float32"}},
           "stages": [{"name": "a", "kind": "constant", "output": "a", "params": {"value": [1, 2, 3, 4]}},
                      {"name": "sq", "kind": "test.square", "input": "a", "output": "b"}]}
    p = Pipeline.from_dict(cfg).build()
    p.step()
    np.testing.assert_array_equal(p.read("b"), np.array([1, 4, 9, 16], np.float32))
    cfg["streams"]["b"]["dtype"] = "float64"  # the default rule: output like the trigger input
    with pytest.raises(ConfigValidationError, match="stage 'sq': field 'output'.*float64"):
        Pipeline.from_dict(cfg)


def test_precision_and_device_attributes():
    cfg = weighted_config()
    cfg["stages"][3]["precision"] = "double"
    p = Pipeline.from_dict(cfg).build()
    s = p.stage("sum1")
    assert s.xp is np and s.dtype == np.float64 and s.complex_dtype == np.complex128 and s.target_device_idx == -1
    assert p.stage("sum2").dtype == np.float32


def test_gpu_stage_without_gpu_is_a_clear_error():
    try:
        import cupy  # noqa: F401
        pytest.skip("a GPU may be present: this checks the no-GPU message")
    except ImportError:
        pass
    cfg = weighted_config()
    for s in cfg["stages"]:
        s["target_device_idx"] = 0
    for st in cfg["streams"].values():
        st["storage"] = "gpu"
    p = Pipeline.from_dict(cfg)
    with pytest.raises(ConfigValidationError, match="field 'target_device_idx': GPU 0 needs cupy"):
        p.build()


def test_registry_unknown_kind_and_entry_points(monkeypatch):
    with pytest.raises(ConfigValidationError, match="unknown stage kind 'nope'.*affine"):
        get_stage_class("nope")

    class EP:
        name = "third.party"
        value = "thirdparty:Stage"

        def load(self):
            class ThirdParty(Kernel):
                kind = "third.party.copy"

                def compute_into(self, x, out, aux):
                    out[...] = x
            return ThirdParty

    seen = []

    def fake_entry_points(group):
        seen.append(group)
        return [EP()]

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_loaded", False)
    assert get_stage_class("third.party.copy").kind == "third.party.copy"
    assert seen == ["raytile.pipeline.stages"]

    with pytest.raises(ConfigValidationError, match="not a Stage subclass"):
        register_stage(int)  # type: ignore[arg-type]


def test_a_stream_value_is_refilled_in_place_never_rebound():
    import numpy as np

    from raytile.common.errors import StreamRebound
    from raytile.pipeline.connections import StreamValue

    arr = np.zeros(3)
    stream = StreamValue("frame", arr)
    stream.set_value([1.0, 2.0, 3.0])
    assert stream.value is arr and arr.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(StreamRebound, match="'frame'.*refilled in place"):
        stream.value = np.ones(3)
    assert stream.value is arr
