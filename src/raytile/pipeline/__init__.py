"""Kernel pipelines: stage graphs with validated configs, trigger order from connections, multi-rate,
run in one thread or on Ray actors over node-local sockets (see raytile.pipeline.ray_channels).

>>> from raytile.pipeline import Pipeline
>>> p = Pipeline.from_yaml("examples/ao_loop.yaml").build()
>>> p.step(100)
>>> p.read("commands").shape
(1024,)

See docs/pipelines.md for the model and the config reference, and its
"Porting" section for SPECULA processing objects and shmpipeline kernels.
"""

from raytile.pipeline.config import InputRef, PipelineConfig, StageSpec, StreamSpec
from raytile.pipeline.connections import BaseDataObj, BaseValue, InputList, InputValue, StreamValue
from raytile.common.errors import PipelineStateError, StageActorDied, StageFailed
from raytile.pipeline.kernel import Kernel
from raytile.pipeline.order import trigger_levels
from raytile.pipeline.registry import ENTRY_POINT_GROUP, get_stage_class, known_kinds, register_stage
from raytile.pipeline.placement import Placement
from raytile.pipeline.runner import Pipeline, PipelineState
from raytile.pipeline.topology import GroupTopology, group_topology
from raytile.pipeline.stage import REQUIRED, KernelContext, Port, Stage, StageContext
from raytile.pipeline.validation import validate_config
from raytile.pipeline.frame_stacks import FrameStackPipeline
from raytile.pipeline.stream_source import PipelineFrames, pipeline_dataset

__all__ = [
    "Pipeline", "PipelineState", "Placement", "GroupTopology", "group_topology", "PipelineConfig", "StageSpec", "StreamSpec", "InputRef",
    "Stage", "Kernel", "Port", "StageContext", "KernelContext", "REQUIRED",
    "StreamValue", "InputValue", "InputList", "BaseDataObj", "BaseValue",
    "register_stage", "get_stage_class", "known_kinds", "ENTRY_POINT_GROUP",
    "trigger_levels", "validate_config",
    "FrameStackPipeline", "PipelineFrames", "pipeline_dataset",
    "StageFailed", "StageActorDied", "PipelineStateError",
]
