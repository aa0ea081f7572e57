"""SPECULA processing objects and shmpipeline kernels, written as their users write them (only the imports
changed: tests/_pipeline_port_stages.py), run in raytile pipelines and give what numpy gives for the same loop.

Covers issue 22's pipeline gaps: ``build_stream()``/``allow_parallel`` in setup, inputs declared in
``__init__`` with ``InputValue(type=...)`` checked when connected, custom output objects, the
``KernelContext`` properties and ``output_buffer``, and the config's ``all_inputs``/``auxiliary_names``.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import _pipeline_port_stages as port
from raytile.common.errors import ConfigValidationError
from raytile.pipeline import BaseValue, Pipeline, StageFailed, StreamValue

N = 4  # the frame is N x N, the slopes 2N
RNG = np.random.default_rng(3)
RECMAT = RNG.standard_normal((3, 2 * N)).round(3)
MATRIX = RNG.standard_normal((5, 3)).round(3)
OFFSET = RNG.standard_normal(5).round(3)
LEAK, GAIN, SLOPE_GAIN, SEED = 0.9, 0.5, 2.0, 7


def config() -> dict:
    f32 = "float32"
    return {
        "name": "ported",
        "streams": {"frame": {"shape": [N, N], "dtype": f32}, "slopes": {"shape": [2 * N], "dtype": f32},
                    "modes": {"shape": [3], "dtype": f32}, "modes_prev": {"shape": [3], "dtype": f32},
                    "integ": {"shape": [3], "dtype": f32}, "matrix": {"shape": [5, 3], "dtype": f32},
                    "offset": {"shape": [5], "dtype": f32}, "commands": {"shape": [5], "dtype": f32},
                    "flat": {"shape": [N * N], "dtype": f32}},
        "stages": [
            # SPECULA-style objects: inputs/outputs declared in __init__, params are __init__'s arguments
            {"name": "camera", "kind": "_pipeline_port_stages:FrameSource", "outputs": {"out_pixels": "frame"},
             "params": {"shape": [N, N], "seed": SEED}, "placement": "sensor"},
            {"name": "slopec", "kind": "porttest.slopec", "inputs": {"in_pixels": "frame"},
             "outputs": {"out_slopes": "slopes"}, "params": {"n": N, "gain": SLOPE_GAIN, "interleave": True},
             "placement": "sensor"},
            {"name": "rec", "kind": "porttest.modalrec", "inputs": {"in_slopes": "slopes"},
             "outputs": {"out_modes": "modes"}, "params": {"recmat": RECMAT.tolist()}, "placement": "control"},
            {"name": "rec_prev", "kind": "porttest.modalrec", "inputs": {"in_slopes_list": ["slopes:-1"]},
             "outputs": {"out_modes": "modes_prev"}, "params": {"recmat": RECMAT.tolist()},
             "placement": "control"},
            # shmpipeline-style kernels: __init__(self, context), `parameters`, auxiliary aliases
            {"name": "integ", "kind": "porttest.cpu.leaky_integrator", "input": "modes", "output": "integ",
             "parameters": {"leak": LEAK, "gain": GAIN}, "placement": "control"},
            {"name": "matrix", "kind": "constant", "output": "matrix", "params": {"value": MATRIX.tolist()},
             "placement": "control"},
            {"name": "offset", "kind": "constant", "output": "offset", "params": {"value": OFFSET.tolist()},
             "placement": "control"},
            {"name": "dm", "kind": "porttest.cpu.affine_transform", "input": "integ",
             "auxiliary": {"A": "matrix", "b": "offset"}, "output": "commands", "placement": "control"},
            {"name": "flat", "kind": "porttest.cpu.flatten", "input": "frame", "output": "flat",
             "placement": "sensor"},
        ],
    }


def numpy_loop(steps: int) -> list[dict[str, np.ndarray]]:
    """The same computation written directly in numpy: each step's streams."""
    rng = np.random.default_rng(SEED)
    ramp = np.arange(N, dtype=np.float64)
    recmat, matrix, offset = (a.astype(np.float32) for a in (RECMAT, MATRIX, OFFSET))
    state = np.zeros(3, np.float32)
    prev = None
    out = []
    for t in range(steps):
        frame = (rng.standard_normal((N, N)) + 0.1 * t * ramp).astype(np.float32)
        slopes = np.empty(2 * N, np.float32)
        slopes[0::2] = frame.mean(axis=0) * SLOPE_GAIN  # interleaved x, y
        slopes[1::2] = frame.mean(axis=1) * SLOPE_GAIN
        modes = recmat @ slopes
        state = LEAK * state + GAIN * modes
        step = {"frame": frame, "slopes": slopes, "modes": modes, "integ": state.copy(),
                "commands": matrix @ state + offset, "flat": frame.reshape(-1)}
        if prev is not None:
            step["modes_prev"] = recmat @ prev
        prev = slopes
        out.append(step)
    return out


def check_steps(p: Pipeline, steps: int) -> None:
    ref = numpy_loop(steps)
    for t in range(steps):
        p.step()
        for name, want in ref[t].items():
            np.testing.assert_allclose(p.read(name), want, rtol=2e-5, atol=2e-5, err_msg=f"{name} at step {t}")
    assert p.generation("commands") == steps - 1 and p.generation("modes_prev") == steps - 1


def test_ported_classes_run_in_process_and_equal_numpy():
    p = Pipeline.from_dict(config()).build()
    try:
        check_steps(p, 6)
        # the custom output object is what the typed input of the next stage sees
        assert p.stage("rec").local_inputs["in_slopes"] is p.stage("slopec").slopes
        assert isinstance(p.stage("rec_prev").local_inputs["in_slopes_list"][0], port.Slopes)
        assert p.stage("rec_prev").local_inputs["in_slopes_list"][0] is not p.stage("slopec").slopes  # delayed copy
        # an untyped (kernel) input reading an output object gets its array
        assert p.stage("flat").local_inputs["input"] is p.stage("camera").frame.value
    finally:
        p.close()


def test_build_stream_and_allow_parallel_in_setup():
    p = Pipeline.from_dict(config()).build()
    try:
        assert p.stage("slopec").allow_parallel is True
        assert p.stage("rec").allow_parallel is False  # build_stream(allow_parallel=False)
        assert p.stage("integ").allow_parallel is True  # never called build_stream
        # on the CPU no stream or graph is made, as in SPECULA
        assert p.stage("rec").stream is None and p.stage("rec").cuda_graph is None
    finally:
        p.close()


def test_kernel_context_properties_output_buffer_and_config_names():
    p = Pipeline.from_dict(config()).build()
    try:
        dm = p.stage("dm")
        ctx = dm.context
        s = p.config.streams
        assert ctx.config is p.config.stage("dm") and ctx.shared_memory is p.config.streams
        assert ctx.config.all_inputs == ("integ", "matrix", "offset")
        assert ctx.config.auxiliary_names == ("matrix", "offset")
        assert ctx.config.auxiliary_aliases == ("A", "b")
        assert ctx.input_specs == (s["integ"], s["matrix"], s["offset"])
        assert ctx.trigger_input_spec is s["integ"] and ctx.output_spec is s["commands"]
        assert ctx.auxiliary_specs == (s["matrix"], s["offset"])
        assert dm.input_shapes == [(3,), (5, 3), (5,)] and dm.aux_shapes == [(5, 3), (5,)]
        # output_buffer is the output stream's array, allocated once
        assert dm.output_buffer is dm.outputs["output"].value
        assert p.stage("integ").context.config.parameters == {"leak": LEAK, "gain": GAIN}
        assert p.stage("integ").state.shape == (3,)
        p.step(2)
        assert dm.output_buffer is dm.outputs["output"].value
    finally:
        p.close()


def test_wrong_input_type_on_connect_names_stage_input_and_types():
    cfg = config()
    cfg["streams"]["modes2"] = {"shape": [3], "dtype": "float32"}
    cfg["stages"].append({"name": "rec2", "kind": "porttest.modalrec", "inputs": {"in_slopes": "frame"},
                          "outputs": {"out_modes": "modes2"}, "params": {"recmat": RECMAT.tolist()}})
    p = Pipeline.from_dict(cfg)
    with pytest.raises(ConfigValidationError, match=r"stage 'rec2': field 'inputs.in_slopes': input 'in_slopes': "
                                                    r"expects Slopes, stream 'frame' carries BaseValue"):
        p.build()
    cfg["stages"][-1]["inputs"] = {"in_slopes_list": ["slopes", "frame"]}
    with pytest.raises(ConfigValidationError, match=r"stage 'rec2'.*input 'in_slopes_list'\[1\]: expects Slopes, "
                                                    r"stream 'frame' carries BaseValue"):
        Pipeline.from_dict(cfg).build()


def test_native_streams_pass_a_basevalue_type_check():
    """A SPECULA object's ``InputValue(type=BaseValue)`` accepts a raytile stream (a StreamValue is one)."""
    cfg = config()
    cfg["stages"][0] = {"name": "camera", "kind": "constant", "output": "frame",
                        "params": {"value": np.arange(N * N).reshape(N, N).tolist()}}
    p = Pipeline.from_dict(cfg).build()
    try:
        p.step()
        assert isinstance(p.stage("slopec").local_inputs["in_pixels"], StreamValue)
        assert isinstance(p.stage("slopec").local_inputs["in_pixels"], BaseValue)
        frame = np.arange(N * N, dtype=np.float32).reshape(N, N)
        want = np.empty(2 * N, np.float32)
        want[0::2], want[1::2] = frame.mean(0) * SLOPE_GAIN, frame.mean(1) * SLOPE_GAIN
        np.testing.assert_allclose(p.read("slopes"), want, rtol=1e-6)
    finally:
        p.close()


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c["stages"][1]["params"].update(gian=1.0),
     r"stage 'slopec': field 'params.gian': SlopeComputer.__init__ has no argument 'gian'"),
    (lambda c: c["stages"][1]["params"].pop("n"), r"stage 'slopec': field 'params.n': required by SlopeComputer"),
    (lambda c: c["stages"][4]["parameters"].pop("gain"),
     r"kernel 'integ' requires numeric parameter 'gain'"),
    (lambda c: c["streams"]["integ"].update(shape=[3, 1]), r"kernel 'integ' requires matching input and output"),
    (lambda c: c["stages"][7]["auxiliary"].pop("b"), r"kind 'porttest.cpu.affine_transform' expects 2 auxiliary"),
    (lambda c: c["stages"][8].update(output="modes_prev"), r"kernel 'flat' requires a 1D output of the input's size|"
                                                           r"already written"),
    (lambda c: c["stages"][4].update(params={"leak": 1}),
     r"stage 'integ': field 'parameters': give 'params' or 'parameters', not both"),
])
def test_ported_configs_are_validated_before_build(mutate, match):
    cfg = copy.deepcopy(config())
    mutate(cfg)
    with pytest.raises(ConfigValidationError, match=match):
        Pipeline.from_dict(cfg)


def test_ports_declared_in_init_are_checked_at_build():
    cfg = config()
    cfg["stages"][2]["inputs"] = {"in_slope": "slopes"}  # SPECULA object has in_slopes / in_slopes_list
    p = Pipeline.from_dict(cfg)  # ports declared in __init__: known once the object exists
    with pytest.raises(ConfigValidationError, match=r"stage 'rec': field 'inputs.in_slope': ModalRec has no input "
                                                    r"'in_slope' \(inputs: \['in_slopes', 'in_slopes_list'\]\)"):
        p.build()
    cfg = config()
    cfg["stages"][2]["outputs"] = {"modes": "modes"}
    with pytest.raises(ConfigValidationError, match=r"stage 'rec': field 'outputs.modes': ModalRec has no output "
                                                    r"'modes' \(outputs: \['out_modes'\]\)"):
        Pipeline.from_dict(cfg).build()
    cfg = config()
    cfg["streams"]["slopes"]["shape"] = [2 * N + 1]
    with pytest.raises(ConfigValidationError, match=r"stage 'slopec': field 'outputs.out_slopes': Slopes has no "
                                                    r"array of the stream's shape and dtype \[9\] float32"):
        Pipeline.from_dict(cfg).build()


def test_rebinding_an_output_array_is_a_clear_error():
    cfg = config()
    cfg["stages"][2]["kind"] = "porttest.rebinding_rec"
    p = Pipeline.from_dict(cfg).build()
    with pytest.raises(StageFailed, match=r"output 'out_modes' \(stream 'modes'\): the array of BaseValue.value "
                                          r"was replaced by a new array; refill it in place") as ei:
        p.step()
    assert ei.value.stage == "rec" and ei.value.method == "post_trigger"
    p.close()


def test_specula_precision_codes():
    cfg = config()
    for st in cfg["stages"]:
        if st["name"] in ("rec", "rec_prev"):
            st["precision"] = 0  # SPECULA's code for double
    cfg["streams"]["modes"]["dtype"] = cfg["streams"]["modes_prev"]["dtype"] = "float64"
    cfg["streams"]["integ"]["dtype"] = "float64"
    cfg["streams"]["matrix"]["dtype"] = cfg["streams"]["offset"]["dtype"] = "float64"
    cfg["streams"]["commands"]["dtype"] = "float64"
    p = Pipeline.from_dict(cfg).build()
    try:
        assert p.stage("rec").dtype == np.float64 and p.stage("rec").modes.value.dtype == np.float64
        assert p.stage("slopec").dtype == np.float32
        check_steps(p, 3)
    finally:
        p.close()


@pytest.mark.ray
def test_ported_classes_on_ray_actors_equal_numpy(ray_context):
    """Two actors: the Slopes object crosses from the sensor actor to the control actor (same step, and
    delayed through the driver); the control actor's typed inputs see a Slopes."""
    p = Pipeline.from_dict(config(), placement="ray").build()
    try:
        check_steps(p, 5)
    finally:
        p.close()


class _TwoArrays(port.BaseDataObj):
    """Two arrays of the stream's shape: which one is carried must be said with stream_array()."""

    def __init__(self, n, which=None):
        super().__init__()
        self.a = self.xp.zeros(n, dtype=self.dtype)
        self.b = self.xp.zeros(n, dtype=self.dtype)
        if which is not None:
            self.stream_array = lambda: getattr(self, which)


class _TwoArraysWriter(port.BaseProcessingObj):
    def __init__(self, n: int, which: str = None, target_device_idx=None, precision=None):
        super().__init__(target_device_idx=target_device_idx, precision=precision)
        self.out = _TwoArrays(n, which)
        self.outputs["out"] = self.out

    def trigger_code(self):
        self.out.a[:] = 1.0
        self.out.b[:] = 2.0

    def post_trigger(self):
        super().post_trigger()
        self.out.generation_time = self.current_time


def test_output_object_array_is_named_by_stream_array_when_ambiguous():
    from raytile.pipeline import register_stage

    register_stage(_TwoArraysWriter, kind="porttest.two_arrays")
    cfg = {"streams": {"x": {"shape": [3], "dtype": "float32"}},
           "stages": [{"name": "w", "kind": "porttest.two_arrays", "outputs": {"out": "x"}, "params": {"n": 3}}]}
    with pytest.raises(ConfigValidationError, match=r"stage 'w': field 'outputs.out': _TwoArrays has more than one "
                                                    r"array of the stream's shape and dtype \[3\] float32.*"
                                                    r"stream_array\(\)"):
        Pipeline.from_dict(cfg).build()
    cfg["stages"][0]["params"]["which"] = "b"
    p = Pipeline.from_dict(cfg).build()
    p.step()
    np.testing.assert_array_equal(p.read("x"), np.full(3, 2.0, np.float32))
    assert p.generation("x") == 0
    p.close()


def test_kind_by_import_path_errors_and_direct_construction():
    from raytile.pipeline import get_stage_class

    assert get_stage_class("_pipeline_port_stages:ModalRec") is port.ModalRec
    with pytest.raises(ConfigValidationError, match=r"stage kind 'no_such_module:X': cannot import it"):
        get_stage_class("no_such_module:X")
    with pytest.raises(ConfigValidationError, match=r"stage kind '_pipeline_port_stages:Slopes': .* is not a "
                                                    r"raytile.pipeline.Stage subclass"):
        get_stage_class("_pipeline_port_stages:Slopes")
    with pytest.raises(ConfigValidationError, match=r"ModalRec: stages are constructed by a Pipeline"):
        port.ModalRec(recmat=[[1.0]])


def _has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.skipif(not _has_gpu(), reason="needs cupy and a CUDA GPU")
def test_build_stream_on_a_gpu_captures_and_shares_the_stream_when_not_parallel():
    """The SPECULA objects on GPU 0: ``build_stream()`` captures trigger_code into a CUDA graph, on a stream
    of its own; the two ``build_stream(allow_parallel=False)`` reconstructors share one stream."""
    cfg = config()
    keep = {"camera", "slopec", "rec", "rec_prev"}
    cfg["stages"] = [dict(st, target_device_idx=0) for st in cfg["stages"] if st["name"] in keep]
    for st in cfg["stages"]:
        st.pop("placement", None)
    cfg["streams"] = {k: dict(v, storage="gpu") for k, v in cfg["streams"].items()
                      if k in ("frame", "slopes", "modes", "modes_prev")}
    p = Pipeline.from_dict(cfg).build()
    try:
        ref = numpy_loop(6)
        for t in range(6):
            p.step()
            for name in ("frame", "slopes", "modes", "modes_prev"):
                if name in ref[t]:
                    np.testing.assert_allclose(p.read(name), ref[t][name], rtol=1e-4, atol=1e-4,
                                               err_msg=f"{name} at step {t}")
        slopec, rec, rec_prev = p.stage("slopec"), p.stage("rec"), p.stage("rec_prev")
        assert rec.stream is rec_prev.stream and slopec.stream is not rec.stream
        assert slopec.cuda_graph is not None and rec.cuda_graph is not None
        assert slopec.graph.stats["replayed"] >= 3 and rec.graph.stats["replayed"] >= 3
        assert p.stage("camera").cuda_graph is None  # never called build_stream: runs uncaptured
    finally:
        p.close()
