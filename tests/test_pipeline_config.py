"""Pipeline configs: parsing, and one test per validation rule (each error names the stage and the field)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from raytile.common.errors import ConfigValidationError
from raytile.pipeline import Pipeline, PipelineConfig, validate_config


def base() -> dict:
    return {
        "streams": {
            "frame": {"shape": [8, 8], "dtype": "uint16"},
            "dark": {"shape": [8, 8], "dtype": "float32"},
            "gain": {"shape": [8, 8], "dtype": "float32"},
            "cal": {"shape": [8, 8], "dtype": "float32"},
            "out": {"shape": [8, 8], "dtype": "float32"},
        },
        "stages": [
            {"name": "src", "kind": "constant", "output": "frame", "params": {"value": 3}},
            {"name": "dark", "kind": "constant", "output": "dark", "params": {"value": 1.0}},
            {"name": "gain", "kind": "constant", "output": "gain", "params": {"value": 2.0}},
            {"name": "calib", "kind": "calibrate", "input": "frame", "auxiliary": ["dark", "gain"], "output": "cal"},
            {"name": "scale", "kind": "affine", "input": "cal", "output": "out", "params": {"scale": 0.5}},
        ],
    }


def stage(cfg: dict, name: str) -> dict:
    return next(s for s in cfg["stages"] if s["name"] == name)


def check(cfg: dict, *fragments: str) -> None:
    with pytest.raises(ConfigValidationError) as ei:
        validate_config(PipelineConfig.from_dict(cfg))
    msg = str(ei.value)
    for f in fragments:
        assert f in msg, msg


def test_base_config_validates_and_runs():
    p = Pipeline.from_dict(base()).build()
    p.step(1)
    np.testing.assert_array_equal(p.read("out"), np.full((8, 8), (3 - 1.0) * 2.0 * 0.5, np.float32))


def test_unknown_kind():
    cfg = base()
    stage(cfg, "scale")["kind"] = "no_such_kind"
    check(cfg, "stage 'scale'", "field 'kind'", "no_such_kind")


def test_wrong_auxiliary_arity():
    cfg = base()
    stage(cfg, "calib")["auxiliary"] = ["dark"]
    check(cfg, "stage 'calib'", "field 'auxiliary'", "expects 2")


def test_storage_mismatch():
    cfg = base()
    cfg["streams"]["out"]["storage"] = "gpu"
    check(cfg, "stage 'scale'", "field 'output'", "storage 'gpu'")


def test_shape_mismatch_between_connected_streams():
    cfg = base()
    cfg["streams"]["out"]["shape"] = [4, 16]
    check(cfg, "stage 'scale'", "field 'output'", "shape [4, 16]")


def test_auxiliary_shape_mismatch():
    cfg = base()
    cfg["streams"]["dark"]["shape"] = [8, 4]
    check(cfg, "stage 'calib'", "field 'auxiliary'", "'dark'")


def test_dtype_mismatch():
    cfg = base()
    cfg["streams"]["cal"]["dtype"] = "int32"
    check(cfg, "stage 'calib'", "field 'output'", "int32")


def test_input_nobody_writes():
    cfg = base()
    cfg["streams"]["orphan"] = {"shape": [8, 8], "dtype": "float32"}
    stage(cfg, "scale")["input"] = "orphan"
    check(cfg, "stage 'scale'", "field 'input'", "no stage writes stream 'orphan'")


def test_two_writers():
    cfg = base()
    stage(cfg, "gain")["output"] = "dark"
    check(cfg, "stage 'gain'", "field 'output'", "already written by stage 'dark'")


def test_cycle_without_delay():
    cfg = base()
    cfg["streams"]["fb"] = {"shape": [8, 8], "dtype": "float32"}
    stage(cfg, "scale")["input"] = "fb"
    cfg["stages"].append({"name": "back", "kind": "copy", "input": "out", "output": "fb"})
    check(cfg, "field 'input'", "cycle", "scale", "back", "'name:-1'")


def test_cycle_with_delayed_input_is_valid():
    cfg = base()
    cfg["streams"]["fb"] = {"shape": [8, 8], "dtype": "float32"}
    stage(cfg, "scale")["input"] = "fb:-1"
    cfg["stages"].append({"name": "back", "kind": "copy", "input": "out", "output": "fb"})
    levels = validate_config(PipelineConfig.from_dict(cfg))
    level = {name: i for i, lvl in enumerate(levels) for name in lvl}
    assert level["scale"] == 0 and level["back"] == 1  # the delayed input does not order scale after back


def test_undeclared_stream():
    cfg = base()
    stage(cfg, "scale")["output"] = "nowhere"
    check(cfg, "stage 'scale'", "field 'output'", "'nowhere' is not declared")


@pytest.mark.parametrize("mutate, fragments", [
    (lambda c: stage(c, "scale")["params"].update(scael=2), ("stage 'scale'", "field 'params.scael'")),
    (lambda c: stage(c, "scale")["params"].update(scale="big"), ("stage 'scale'", "field 'params.scale'", "'big'")),
    (lambda c: c["streams"]["out"].update(dtype="float33"), ("stream 'out'", "field 'dtype'", "float33")),
    (lambda c: c["streams"]["out"].update(shape=[0, 8]), ("stream 'out'", "field 'shape'")),
    (lambda c: c["streams"]["out"].update(storage="disk"), ("stream 'out'", "field 'storage'", "'disk'")),
    (lambda c: stage(c, "scale").update(target_device_idx="gpu0"), ("stage 'scale'", "field 'target_device_idx'")),
    (lambda c: stage(c, "scale").update(precision="half"), ("stage 'scale'", "field 'precision'", "'half'")),
    (lambda c: stage(c, "scale").update(input="cal:-2"), ("stage 'scale'", "field 'input'", "'name:-1'")),
    (lambda c: stage(c, "scale").update(colour="red"), ("stage 'scale'", "unknown field", "colour")),
    (lambda c: stage(c, "src").update(name="calib"), ("stage 'calib'", "field 'name'")),
    (lambda c: stage(c, "scale").pop("input"), ("stage 'scale'", "field 'input'", "needs this input")),
    (lambda c: stage(c, "scale").update(auxiliary=["dark"]), ("stage 'scale'", "field 'auxiliary'", "expects 0")),
    (lambda c: stage(c, "dark").update(params={"value": {"random": {"dist": "cauchy"}}}),
     ("stage 'dark'", "field 'params.value'", "cauchy")),
])
def test_bad_fields_name_stage_and_field(mutate, fragments):
    cfg = copy.deepcopy(base())
    mutate(cfg)
    check(cfg, *fragments)


def test_yaml_round_trip(tmp_path):
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(base()))
    cfg = PipelineConfig.from_yaml(path)
    assert cfg.stage("calib").auxiliary == ("dark", "gain")
    assert cfg.streams["frame"].dtype == np.uint16
    bad = tmp_path / "bad.yaml"
    bad.write_text("streams: [unclosed")
    with pytest.raises(ConfigValidationError, match="not valid YAML"):
        PipelineConfig.from_yaml(bad)
    with pytest.raises(ConfigValidationError, match="cannot read"):
        PipelineConfig.from_yaml(tmp_path / "missing.yaml")


def test_delayed_input_may_cross_placement_groups_backwards():
    from raytile.pipeline.validation import group_order

    cfg = base()
    cfg["streams"]["fb"] = {"shape": [8, 8], "dtype": "float32"}
    stage(cfg, "scale")["input"] = "fb:-1"
    for name in ("src", "dark", "gain", "calib", "scale"):
        stage(cfg, name)["placement"] = "a"
    cfg["stages"].append({"name": "back", "kind": "copy", "input": "out", "output": "fb", "placement": "b"})
    parsed = PipelineConfig.from_dict(cfg)
    validate_config(parsed)
    assert group_order(parsed) == ["a", "b"]  # the delayed edge b -> a does not order the groups


def test_placement_groups_must_form_a_chain():
    cfg = base()
    for name in ("src", "dark", "gain", "scale"):
        stage(cfg, name)["placement"] = "a"
    stage(cfg, "calib")["placement"] = "b"  # a -> b (frame) and b -> a (cal)
    check(cfg, "field 'placement'", "both ways")
