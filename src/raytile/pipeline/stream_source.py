"""A pipeline's stream as a live data set: UDFs run on the frames a pipeline makes, while it makes them.

:class:`PipelineFrames` is the source of a ``stream`` data set: it steps the
pipeline in the thread that reads the stream (the run's feeder) and hands
on each value the pipeline writes to one stream, a stack at a time. Nothing
is dropped (a value is taken after every step that refreshed the stream,
unlike :meth:`Pipeline.values`, whose readers are latest-wins), and
backpressure is the stream's own: while the run has
``max_partitions_in_flight`` partitions unfinished, the feeder waits and the
pipeline is not stepped. The stream ends after the data set's frames
(``nav_shape`` x ``scans``); a pipeline whose stream stops being refreshed
for ``idle_steps`` steps (a ``replay`` source without ``loop``) ends it
early, which the run reports as a stream that ended short; a stage that
raises ends the run with that error.

>>> p = Pipeline.from_yaml("examples/detector_preproc.yaml").build()
>>> ds = pipeline_dataset(ctx, p, "binned", nav_shape=(32, 32))
>>> ctx.run_udf(dataset=ds, udf=SumUDF())       # the sum of 1024 binned, dark/gain-corrected frames

A multi-rate stream (every N steps) gives one frame per refresh.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import ConfigValidationError

__all__ = ["PipelineFrames", "pipeline_dataset"]


class PipelineFrames:
    """The values ``pipeline`` writes to ``stream``, in stacks of ``stack`` frames (``(k, *shape)``).

    ``frames``: how many values in all (None: until the pipeline stops
    refreshing the stream). The pipeline is built here if it is not yet,
    and must not run a background loop. Iterate once.
    """

    def __init__(self, pipeline: Any, stream: str, frames: int | None = None, stack: int = 32,
                 idle_steps: int = 1000):
        if stream not in pipeline.config.streams:
            raise ConfigValidationError(f"pipeline {pipeline.config.name!r}: stream {stream!r} is not declared "
                                        f"(streams: {sorted(pipeline.config.streams)})")
        for name, value in (("stack", stack), ("idle_steps", idle_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigValidationError(f"PipelineFrames: parameter {name!r} must be a positive int, "
                                            f"got {value!r}")
        self.pipeline = pipeline
        self.stream = stream
        self.frames = frames
        self.stack = stack
        self.idle_steps = idle_steps
        spec = pipeline.config.streams[stream]
        self.shape: tuple[int, ...] = tuple(spec.shape)
        self.dtype = np.dtype(spec.dtype)
        #: values handed on so far
        self.delivered = 0

    def __iter__(self) -> Iterator[np.ndarray]:
        p = self.pipeline
        if str(p.state) == "created":
            p.build()
        last = p.generation(self.stream)
        while self.frames is None or self.delivered < self.frames:
            want = self.stack if self.frames is None else min(self.stack, self.frames - self.delivered)
            batch = np.empty((want,) + self.shape, dtype=self.dtype)
            k = 0
            idle = 0
            while k < want:
                p.step(1)
                gen = p.generation(self.stream)
                if gen == last:
                    idle += 1
                    if idle >= self.idle_steps:
                        break
                    continue
                last, idle = gen, 0
                batch[k] = p.read(self.stream)
                k += 1
            if k:
                self.delivered += k
                yield batch[:k]
            if k < want:  # the pipeline stopped refreshing the stream: its source ended
                return


def pipeline_dataset(ctx: Any, pipeline: Any, stream: str, nav_shape: tuple[int, ...], scans: int = 1,
                     frames_per_partition: int | None = None, max_partitions_in_flight: int | None = None,
                     idle_steps: int = 1000) -> Any:
    """A ``stream`` data set of the values ``pipeline`` writes to ``stream`` (signal shape and dtype
    from the stream's spec): ``nav_shape`` x ``scans`` frames (``scans=0``: until the pipeline's
    stream stops, ending on a scan boundary). Loaded with ``ctx.load("stream", ...)``; read by one run.

    >>> ds = pipeline_dataset(ctx, pipeline, "binned", nav_shape=(16, 16))
    """
    nav = tuple(int(s) for s in nav_shape)
    frames = PipelineFrames(pipeline, stream, None if scans == 0 else scans * math.prod(nav), idle_steps=idle_steps)
    ds = ctx.load("stream", frames=frames, nav_shape=nav, sig_shape=frames.shape, dtype=frames.dtype,
                  frames_per_partition=frames_per_partition, scans=scans,
                  max_partitions_in_flight=max_partitions_in_flight)
    frames.stack = ds.frames_per_partition  # a stack fills one partition: handed on without a copy
    return ds
