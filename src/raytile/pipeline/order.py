"""Trigger order: levels of stages derived once from the connections (SPECULA's algorithm).

Level 0 holds the stages that read no other stage's output in the same step
(sources, and stages whose inputs are all delayed ``name:-1``); each next
level holds the stages whose same-step inputs are all written by earlier
levels. A cycle of same-step inputs has no order: it needs a delayed input.

>>> trigger_levels(cfg)
[('camera',), ('calib',), ('centroids',), ...]
"""

from __future__ import annotations

from raytile.common.errors import ConfigValidationError
from raytile.pipeline.config import PipelineConfig

__all__ = ["trigger_levels", "dependencies"]


def dependencies(config: PipelineConfig) -> dict[str, set[str]]:
    """Stage -> the stages whose outputs it reads in the same step (delayed inputs excluded)."""
    writers = config.writers()
    deps: dict[str, set[str]] = {s.name: set() for s in config.stages}
    for st in config.stages:
        for _, ref in st.all_input_refs():
            w = writers.get(ref.stream)
            if ref.delay == 0 and w is not None:
                deps[st.name].add(w)
    return deps


def _find_cycle(deps: dict[str, set[str]], nodes: list[str]) -> list[str]:
    """One cycle among ``nodes`` (which all lie on or behind a cycle), in reading order."""
    remaining = set(nodes)
    node = nodes[0]
    path: list[str] = []
    index: dict[str, int] = {}
    while node not in index:
        index[node] = len(path)
        path.append(node)
        node = sorted(d for d in deps[node] if d in remaining)[0]
    cycle = path[index[node]:]
    return list(reversed(cycle))


def trigger_levels(config: PipelineConfig) -> list[tuple[str, ...]]:
    """Stage names grouped by level, config order within a level; ConfigValidationError on a cycle."""
    deps = dependencies(config)
    order = [s.name for s in config.stages]
    done: set[str] = set()
    levels: list[tuple[str, ...]] = []
    while len(done) < len(order):
        level = tuple(n for n in order if n not in done and deps[n] <= done)
        if not level:
            stuck = [n for n in order if n not in done]
            cycle = _find_cycle(deps, stuck)
            first = cycle[0]
            raise ConfigValidationError(
                f"stage {first!r}: field 'input': stages {' -> '.join(cycle + [first])} form a cycle without a "
                f"delayed input; read one of these streams as 'name:-1' (the previous step's value)")
        levels.append(level)
        done.update(level)
    return levels
