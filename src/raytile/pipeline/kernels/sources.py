"""Source stages (no inputs): a constant array, frames replayed from a raytile data set, synthetic SH frames.

>>> {"kind": "constant", "output": "dark", "params": {"value": 100.0}}
>>> {"kind": "replay", "output": "frame", "params": {"dataset": {"type": "npy", "path": "scan.npy"}, "rate_hz": 500}}
>>> {"kind": "sh_frames", "output": "frame", "params": {"n_sub": 16, "frames": 32, "seed": 0}}

``constant`` refreshes its output once (and again after a parameter
update), so stages reading it as a trigger input run once; as an auxiliary
input it is simply read. ``replay`` reads the data set's partitions tile by
tile with the io layer (no Ray), one frame a step, paced to ``rate_hz``
when given, from the start again when ``loop`` is true.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Iterator, Mapping

import numpy as np

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.arrays import check_array_spec, make_array
from raytile.pipeline.config import StageSpec, StreamSpec
from raytile.pipeline.kernels._checks import positive_int
from raytile.pipeline.registry import register_stage
from raytile.pipeline.stage import Stage

__all__ = ["Constant", "Replay", "SHFrames", "sh_frame_bank"]


class _Source(Stage):
    """A stage without inputs and with one output ``output``."""

    output_ports = ("output",)

    def bind_locals(self) -> None:
        self._out = self.outputs["output"].value


@register_stage
class Constant(_Source):
    """A fixed array (see :mod:`raytile.pipeline.arrays` for ``value``), emitted once."""

    kind = "constant"
    defaults: ClassVar[Mapping[str, Any]] = {"value": 0.0}

    @classmethod
    def validate_config(cls, spec: StageSpec, streams: Mapping[str, StreamSpec]) -> None:
        super().validate_config(spec, streams)
        check_array_spec(cls.resolve_params(spec.params, spec.where())["value"], f"{spec.where()}: field 'params.value'")

    def configure(self) -> None:
        host = make_array(self.params["value"], self._out.shape, self._out.dtype,
                          f"stage {self.name!r}: field 'params.value'", self.context.base_dir)
        self._out[...] = self.xp.asarray(host)
        self._pending = True

    def check_ready(self, t: int) -> bool:
        return self._pending  # nothing to do until a parameter update

    def trigger_code(self) -> None:
        self._pending = False


def _positive_rate(params: Mapping[str, Any], where: str) -> float | None:
    rate = params["rate_hz"]
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ConfigValidationError(f"{where}: field 'params.rate_hz': expected a positive number or null, "
                                    f"got {rate!r}")
    return float(rate)


class _Paced(_Source):
    """Sleeps in ``prepare_trigger`` until the next tick of ``rate_hz`` (no pacing when None)."""

    def configure(self) -> None:
        self._period = None
        rate = _positive_rate(self.params, f"stage {self.name!r}")
        if rate is not None:
            self._period = 1.0 / rate
        self._next_tick = 0.0

    def prepare_trigger(self, t: int) -> None:
        super().prepare_trigger(t)
        if self._period is not None:
            now = time.perf_counter()
            if self._next_tick == 0.0 or now - self._next_tick > 10 * self._period:
                self._next_tick = now  # first step, or far behind: do not try to catch up
            elif self._next_tick > now:
                time.sleep(self._next_tick - now)
            self._next_tick += self._period


@register_stage
class Replay(_Paced):
    """Frames of a raytile data set, one a step, in nav order.

    ``dataset`` is a :class:`raytile.io.dataset.DataSet` (initialized or not)
    or JSON parameters for :func:`raytile.io.dataset.dataset_from_json`.
    """

    kind = "replay"
    defaults: ClassVar[Mapping[str, Any]] = {"dataset": None, "rate_hz": None, "loop": True, "frames_per_read": 16}

    @classmethod
    def validate_config(cls, spec: StageSpec, streams: Mapping[str, StreamSpec]) -> None:
        super().validate_config(spec, streams)
        where = spec.where()
        params = cls.resolve_params(spec.params, where)
        from raytile.io.dataset import DataSet

        ds = params["dataset"]
        if not isinstance(ds, (DataSet, Mapping)):
            raise ConfigValidationError(f"{where}: field 'params.dataset': expected a DataSet or data set "
                                        f"parameters with a 'type', got {ds!r}")
        _positive_rate(params, where)
        positive_int(params, "frames_per_read", where)
        if not isinstance(params["loop"], bool):
            raise ConfigValidationError(f"{where}: field 'params.loop': expected true or false, "
                                        f"got {params['loop']!r}")

    def setup(self) -> None:
        from raytile.io.dataset import DataSet, dataset_from_json

        where = f"stage {self.name!r}: field 'params.dataset'"
        ds = self.params["dataset"]
        if not isinstance(ds, DataSet):
            ds = dataset_from_json(dict(ds))
        if ds._meta is None:
            ds.initialize()
        sig = tuple(ds.shape.sig.to_tuple())
        out_shape = tuple(self.outputs["output"].value.shape)
        if sig != out_shape:
            raise ConfigValidationError(f"{where}: frames are {list(sig)}, stream "
                                        f"{self.outputs['output'].name!r} is {list(out_shape)}")
        self.dataset = ds
        self._frames: Iterator[Any] = iter(())
        self.frames_read = 0
        self.exhausted = False
        super().setup()

    def _iter_frames(self) -> Iterator[Any]:
        from raytile.io.frame_blocks import iter_frame_blocks

        for block in iter_frame_blocks(self.dataset, int(self.params["frames_per_read"])):
            yield from block  # frames of this block; copied before the next block is read

    def trigger_code(self) -> None:
        frame = next(self._frames, None)
        if frame is None and self.params["loop"]:
            self._frames = self._iter_frames()
            frame = next(self._frames, None)
        if frame is None:
            self.exhausted = True
            self.refreshed = False
            return
        self._out[...] = self.xp.asarray(frame) if self.device.is_gpu else frame
        self.frames_read += 1

    def configure(self) -> None:
        super().configure()
        self._frames = self._iter_frames()


def sh_frame_bank(n_sub: int, pix: int, frames: int, seed: int, photons: float, sigma: float,
                  dtype: Any = np.uint16) -> np.ndarray:
    """Synthetic Shack-Hartmann frames ``(frames, n_sub*pix, n_sub*pix)``: one Gaussian spot per
    subaperture, shifted at random by up to ``pix/4``, ``photons`` counts a spot, Poisson noise, +100 bias.

    >>> sh_frame_bank(4, 8, 2, 0, 1000.0, 1.2).shape
    (2, 32, 32)
    """
    rng = np.random.default_rng(seed)
    side = n_sub * pix
    yy, xx = np.mgrid[0:pix, 0:pix].astype(np.float64)
    bank = np.empty((frames, side, side), dtype=dtype)
    c = (pix - 1) / 2.0
    for f in range(frames):
        shifts = rng.uniform(-pix / 4, pix / 4, (2, n_sub, n_sub))
        img = np.empty((side, side))
        for i in range(n_sub):
            for j in range(n_sub):
                dy, dx = shifts[0, i, j], shifts[1, i, j]
                spot = np.exp(-((yy - c - dy) ** 2 + (xx - c - dx) ** 2) / (2 * sigma ** 2))
                img[i * pix:(i + 1) * pix, j * pix:(j + 1) * pix] = spot / spot.sum() * photons
        bank[f] = np.clip(rng.poisson(img) + 100, 0, np.iinfo(np.uint16).max).astype(dtype)
    return bank


@register_stage
class SHFrames(_Paced):
    """Cycles through a bank of :func:`sh_frame_bank` frames (made once at setup), one a step."""

    kind = "sh_frames"
    defaults: ClassVar[Mapping[str, Any]] = {"n_sub": 16, "frames": 32, "seed": 0, "photons": 2000.0,
                                             "sigma": 1.5, "rate_hz": None}

    @classmethod
    def validate_config(cls, spec: StageSpec, streams: Mapping[str, StreamSpec]) -> None:
        super().validate_config(spec, streams)
        where = spec.where()
        params = cls.resolve_params(spec.params, where)
        n = positive_int(params, "n_sub", where)
        positive_int(params, "frames", where)
        _positive_rate(params, where)
        out = streams[spec.outputs["output"]]
        if len(out.shape) != 2 or out.shape[0] != out.shape[1] or out.shape[0] % n:
            raise ConfigValidationError(f"{where}: field 'output': stream {out.name!r} {list(out.shape)} is not "
                                        f"a square frame of {n} x {n} subapertures")

    def setup(self) -> None:
        p = self.params
        side = self.outputs["output"].value.shape[0]
        self.bank = sh_frame_bank(p["n_sub"], side // p["n_sub"], p["frames"], p["seed"], float(p["photons"]),
                                  float(p["sigma"]), self.outputs["output"].value.dtype)
        if self.device.is_gpu:
            self.bank = self.xp.asarray(self.bank)
        super().setup()

    def trigger_code(self) -> None:
        self._out[...] = self.bank[self.current_time % len(self.bank)]
