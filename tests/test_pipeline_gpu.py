"""GPU stages: the AO loop on a GPU (cupy) equals the CPU run; trigger_code captured into CUDA graphs and
replayed; a parameter update re-captures. Skipped with a reason without cupy and a CUDA device."""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from raytile.common.errors import ConfigValidationError
from raytile.pipeline import Pipeline


def _has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


needs_gpu = pytest.mark.skipif(not _has_gpu(), reason="needs cupy and a CUDA GPU")

AO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "ao_loop.yaml")


def gpu_ao() -> dict:
    """The AO example with the camera on the CPU and everything behind a copy stage on GPU 0."""
    with open(AO) as f:
        cfg = yaml.safe_load(f)
    cfg["streams"]["frame_gpu"] = {"shape": [256, 256], "dtype": "uint16"}
    for name, s in cfg["streams"].items():
        if name != "frame":
            s["storage"] = "gpu"
    for st in cfg["stages"]:
        st.pop("placement", None)
        if st["name"] != "camera":
            st["target_device_idx"] = 0
        if st.get("input") == "frame":
            st["input"] = "frame_gpu"
    cfg["stages"].append({"name": "upload", "kind": "copy", "input": "frame", "output": "frame_gpu",
                          "target_device_idx": 0})
    return cfg


@pytest.mark.gpu
@needs_gpu
def test_gpu_ao_loop_equals_cpu_and_is_captured():
    cpu = Pipeline.from_yaml(AO).build()
    gpu = Pipeline.from_dict(gpu_ao(), base_dir=os.path.dirname(AO)).build()
    cpu.step(12)
    gpu.step(12)
    np.testing.assert_allclose(gpu.read("commands"), cpu.read("commands"), rtol=1e-4, atol=1e-5)
    stats = gpu.stage("centroids").graph.stats
    assert stats["warmup"] == 1 and stats["captured"] == 1 and stats["replayed"] >= 10, stats
    assert gpu.stage("matvec").graph.stats["replayed"] >= 10
    gpu.update_parameters("clip", lo=-0.05, hi=0.05)  # baked into the clip graph: captured again
    cpu.update_parameters("clip", lo=-0.05, hi=0.05)
    gpu.step(3)
    cpu.step(3)
    np.testing.assert_allclose(gpu.read("commands"), cpu.read("commands"), rtol=1e-4, atol=1e-5)
    assert np.abs(gpu.read("commands")).max() <= 0.05


def test_gpu_config_validates_without_a_gpu():
    p = Pipeline.from_dict(gpu_ao())  # validation imports no cupy; copy is the one stage taking any storage
    level = {name: i for i, lvl in enumerate(p.levels) for name in lvl}
    assert level["camera"] == 0 and level["upload"] == 1  # the copy onto the GPU runs right after the camera
    assert p.state == "created" and set(level) == {st["name"] for st in gpu_ao()["stages"]}


def test_gpu_stage_needs_gpu_streams():
    cfg = gpu_ao()
    cfg["streams"]["slopes"]["storage"] = "cpu"
    with pytest.raises(ConfigValidationError, match="stage 'centroids': field 'output'.*storage 'cpu'"):
        Pipeline.from_dict(cfg)


def test_ray_gpu_actor_resources_and_device_renumbering():
    from raytile.pipeline import PipelineConfig, get_stage_class
    from raytile.pipeline.group_host import GroupHost
    from raytile.pipeline.ray_placement import RayPlacement
    from raytile.pipeline.validation import group_order, validate_config

    raw = gpu_ao()
    for st in raw["stages"]:
        if st["name"] in ("matvec", "integrator", "clip", "reconstructor"):
            st["target_device_idx"] = 3  # a second GPU for the control part
    cfg = PipelineConfig.from_dict(raw, base_dir=os.path.dirname(AO))
    levels = validate_config(cfg)
    rp = RayPlacement(cfg, levels, group_order(cfg))
    assert rp._gpu_map("main") == {0: 0, 3: 1}
    assert rp._resources("main") == {"num_gpus": 2, "num_cpus": 0}
    host = GroupHost(cfg, {s.kind: get_stage_class(s.kind) for s in cfg.stages}, rp.members["main"], levels, [],
                     rp._gpu_map("main"))
    host._blas.restore_original_limits()
    assert host.engine.config.stage("matvec").target_device_idx == 1
    assert host.engine.config.stage("centroids").target_device_idx == 0
    assert host.engine.config.stage("camera").target_device_idx is None
