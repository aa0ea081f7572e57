"""The Ray placement's group topology is a pure function of the config: checked here without Ray."""

from __future__ import annotations

import os

from raytile.pipeline import PipelineConfig
from raytile.pipeline.topology import group_topology
from raytile.pipeline.validation import group_order

AO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "ao_loop.yaml")


def test_ao_loop_is_a_chain_of_two_groups():
    cfg = PipelineConfig.from_yaml(AO)
    topo = group_topology(cfg, group_order(cfg))
    assert topo.groups == ("sensor", "control")
    assert topo.members == {"sensor": ["camera", "dark", "gain", "calibration", "centroids"],
                            "control": ["reconstructor", "matvec", "integrator", "clip"]}
    assert topo.upstream == {"sensor": [], "control": ["sensor"]}
    assert topo.outbound == {"sensor": ["slopes"], "control": []}  # only the slopes cross
    assert topo.relayed == {"sensor": [], "control": []} and topo.relay_streams == []
    assert topo.output_groups == ["control"]  # the end of the chain alone comes back
    assert topo.writer_group["slopes"] == "sensor" and topo.group_of["clip"] == "control"


def test_delayed_inputs_from_another_group_are_relayed():
    f32 = {"shape": [8, 8], "dtype": "float32"}
    cfg = PipelineConfig.from_dict({
        "streams": {"frame": {"shape": [8, 8], "dtype": "uint16"}, "a": {"shape": [8, 8], "dtype": "uint16"},
                    "dk": f32, "gn": f32, "out": f32},
        "stages": [
            {"name": "camera", "kind": "sh_frames", "output": "frame", "placement": "sensor",
             "params": {"n_sub": 2, "frames": 5, "seed": 7, "photons": 500.0}},
            {"name": "dark", "kind": "constant", "output": "dk", "placement": "sensor", "params": {"value": 1.0}},
            {"name": "gain", "kind": "constant", "output": "gn", "placement": "sensor", "params": {"value": 2.0}},
            {"name": "copy", "kind": "copy", "input": "frame", "output": "a", "placement": "proc"},
            {"name": "cal", "kind": "calibrate", "input": "a", "auxiliary": ["dk:-1", "gn"], "output": "out",
             "placement": "ctl"},
        ],
    })
    topo = group_topology(cfg, group_order(cfg))
    assert topo.groups == ("sensor", "proc", "ctl")
    assert topo.upstream == {"sensor": [], "proc": ["sensor"], "ctl": ["sensor", "proc"]}
    # same-step reads first (config order), then what is relayed
    assert topo.outbound == {"sensor": ["frame", "gn", "dk"], "proc": ["a"], "ctl": []}
    assert topo.relayed == {"sensor": [], "proc": [], "ctl": ["dk"]} and topo.relay_streams == ["dk"]
    # the writer of a relayed stream reports back to the driver, as does the end of the chain
    assert topo.output_groups == ["sensor", "ctl"]


def test_stages_without_a_group_share_the_default_one():
    cfg = PipelineConfig.from_dict({
        "streams": {"frame": {"shape": [8, 8], "dtype": "uint16"}, "c": {"shape": [8, 8], "dtype": "uint16"}},
        "stages": [{"name": "camera", "kind": "sh_frames", "output": "frame",
                    "params": {"n_sub": 2, "frames": 5, "seed": 7, "photons": 500.0}},
                   {"name": "c", "kind": "copy", "input": "frame", "output": "c"}],
    })
    topo = group_topology(cfg, group_order(cfg))
    assert topo.groups == ("main",) and topo.members == {"main": ["camera", "c"]}
    assert topo.upstream == {"main": []} and topo.outbound == {"main": []} and topo.output_groups == ["main"]
