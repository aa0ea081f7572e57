"""`raytile pipeline validate|describe|run|bench FILE.yaml`.

>>> raytile pipeline validate examples/ao_loop.yaml
ok: ao_loop: 9 stages, 9 streams, 6 trigger levels, placement groups sensor -> control
>>> raytile pipeline bench examples/ao_loop.yaml --steps 2000
in-process: 3,450 Hz, p50 0.25 ms, p99 0.60 ms
ray: 1,235 Hz, p50 0.75 ms, p99 1.85 ms
ray-compiled: 612 Hz, p50 1.51 ms, p99 3.93 ms
ray-classic: 266 Hz, p50 3.38 ms, p99 10.72 ms
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.runner import PLACEMENTS, Pipeline

__all__ = ["add_pipeline_parser", "cmd_pipeline"]


def _placements(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    for n in names:
        if n not in PLACEMENTS:
            raise argparse.ArgumentTypeError(f"unknown placement {n!r} (choose from {', '.join(PLACEMENTS)})")
    return names


def _steps(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps must be a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--steps must be a positive integer, got {text!r}")
    return n


def add_pipeline_parser(sub: Any) -> None:
    """Add ``pipeline`` with its four actions to the ``raytile`` subcommand parsers."""
    p = sub.add_parser("pipeline", help="validate, describe, run or benchmark a stage pipeline (YAML)",
                       description="Kernel pipelines: stage graphs from a YAML file (see docs/pipelines.md).")
    p.add_argument("action", choices=("validate", "describe", "run", "bench"))
    p.add_argument("file", help="pipeline YAML file, e.g. examples/ao_loop.yaml")
    p.add_argument("--placement", type=_placements, default=None,
                   help=f"{', '.join(PLACEMENTS)}; bench takes a comma-separated list "
                        "(default: in-process for run, all of them for bench)")
    p.add_argument("--steps", type=_steps, default=None, help="steps to run (default 1000; bench 2000)")
    p.add_argument("--show", default=None, help="run: streams to print at the end, comma-separated")
    p.set_defaults(func=cmd_pipeline)


def _ensure_ray(placements: list[str]) -> None:
    if any(p != "in-process" for p in placements):
        from raytile.pipeline.ray_placement import ensure_ray

        ensure_ray()


def cmd_pipeline(args: argparse.Namespace) -> int:
    """Run one ``raytile pipeline`` action; ConfigValidationError for bad files (printed by the CLI)."""
    from threadpoolctl import threadpool_limits

    if not os.path.isfile(args.file):
        raise ConfigValidationError(f"pipeline file {args.file!r}: no such file")
    pipe = Pipeline.from_yaml(args.file, placement=(args.placement or ["in-process"])[0])  # validates everything
    cfg = pipe.config
    if args.action == "validate":
        print(f"ok: {cfg.name}: {len(cfg.stages)} stages, {len(cfg.streams)} streams, {len(pipe.levels)} trigger "
              f"levels, placement groups {' -> '.join(pipe.groups)}")
        return 0
    if args.action == "describe":
        print(pipe.describe())
        return 0
    with threadpool_limits(1):  # one BLAS thread: the loop's latency, not its throughput per call, matters
        if args.action == "run":
            placement = (args.placement or ["in-process"])[0]
            _ensure_ray([placement])
            with Pipeline(cfg, placement).build() as p:
                p.run(steps=args.steps or 1000)
                st = p.status()
                loop = st["loop"]
                print(f"{placement}: {int(loop['steps'])} steps, {loop['hz']:,.0f} Hz, p50 {loop['p50_ms']:.2f} ms, "
                      f"p99 {loop['p99_ms']:.2f} ms (first step {loop.get('first_ms', 0):.1f} ms apart)")
                for name, s in st["stages"].items():
                    print(f"  {name:<16} {s['kind']:<18} steps {s.get('steps', 0):>7}  mean {s.get('mean_ms', 0):.3f} ms"
                          f"  p99 {s.get('p99_ms', 0):.3f} ms  {s.get('hz', 0):,.0f} Hz  first {s.get('first_ms', 0):.1f} ms")
                for name in (args.show.split(",") if args.show else []):
                    print(f"{name} = {p.read(name.strip())}")
            return 0
        from raytile.pipeline.bench import format_line, measure

        placements = args.placement or list(PLACEMENTS)
        _ensure_ray(placements)
        for placement in placements:
            with Pipeline(cfg, placement).build() as p:
                print(format_line(placement, measure(p, args.steps or 2000, warmup=200)), flush=True)
    return 0
