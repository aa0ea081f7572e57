"""`group_topology`: who sends what to whom when a pipeline's stage groups run on separate actors.

A pure function of the config and the group order (no Ray): the Ray
placement (:mod:`raytile.pipeline.ray_placement`) builds its actors, its
step channel and its relays from the answer, and tests check the answer
without starting anything.

A stage's group is ``StageSpec.group`` (its config's ``placement`` field, default ``"main"``).
An input that another group writes is either read in the same step (the
writer group is *upstream*: its actor's ``step`` result feeds this group's
``step`` in the graph) or only delayed (``name:-1``: the driver *relays* the
writer's value after step t-1 into the graph input of step t). A group's
*outbound* streams are what it sends (read by later groups or relayed); the
*output groups* are those whose results come back to the driver: the last
of each chain and the writers of relayed streams.

>>> topo = group_topology(PipelineConfig.from_yaml("examples/ao_loop.yaml"), ["sensor", "control"])  # doctest: +SKIP
>>> topo.upstream["control"], topo.outbound["sensor"], topo.output_groups  # doctest: +SKIP
(['sensor'], ['slopes'], ['control'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from raytile.pipeline.config import PipelineConfig

__all__ = ["GroupTopology", "group_topology"]


@dataclass(frozen=True)
class GroupTopology:
    """The answer of :func:`group_topology` (lists keep the config's order; upstream the groups' order)."""

    groups: tuple[str, ...]
    #: group -> its stages
    members: dict[str, list[str]]
    #: stage -> its group
    group_of: dict[str, str]
    #: stream -> the group of the stage writing it
    writer_group: dict[str, str]
    #: group -> groups whose same-step results it reads
    upstream: dict[str, list[str]]
    #: group -> streams it sends (read by other groups in the same step, or relayed)
    outbound: dict[str, list[str]]
    #: group -> streams of other groups it reads only delayed (relayed by the driver between steps)
    relayed: dict[str, list[str]]
    #: every relayed stream, sorted
    relay_streams: list[str]
    #: groups whose step results come back to the driver
    output_groups: list[str]


def group_topology(config: PipelineConfig, groups: Sequence[str]) -> GroupTopology:
    """The topology of ``config``'s stages over ``groups`` (in step order, e.g.
    :func:`raytile.pipeline.validation.group_order`)."""
    groups = tuple(groups)
    members: dict[str, list[str]] = {g: [] for g in groups}
    group_of: dict[str, str] = {}
    for st in config.stages:
        g = st.group
        members[g].append(st.name)
        group_of[st.name] = g
    writer_group = {s: group_of[w] for s, w in config.writers().items()}
    upstream: dict[str, list[str]] = {g: [] for g in groups}
    outbound: dict[str, list[str]] = {g: [] for g in groups}
    same_step: dict[str, set[str]] = {g: set() for g in groups}
    for st in config.stages:
        g = group_of[st.name]
        for _, ref in st.all_input_refs():
            w = writer_group[ref.stream]
            if w != g and not ref.delay:
                same_step[g].add(ref.stream)
                if w not in upstream[g]:
                    upstream[g].append(w)
                if ref.stream not in outbound[w]:
                    outbound[w].append(ref.stream)
    relayed: dict[str, list[str]] = {g: [] for g in groups}
    for st in config.stages:
        g = group_of[st.name]
        for _, ref in st.all_input_refs():
            w = writer_group[ref.stream]
            if w != g and ref.delay and ref.stream not in same_step[g] and ref.stream not in relayed[g]:
                relayed[g].append(ref.stream)
                if ref.stream not in outbound[w]:
                    outbound[w].append(ref.stream)
    relay_streams = sorted({s for names in relayed.values() for s in names})
    upstream = {g: sorted(u, key=groups.index) for g, u in upstream.items()}
    consumed = {u for g in groups for u in upstream[g]}
    relay_writers = {writer_group[s] for s in relay_streams}
    output_groups = [g for g in groups if g not in consumed or g in relay_writers]
    return GroupTopology(groups, members, group_of, writer_group, upstream, outbound, relayed, relay_streams,
                         output_groups)
