"""Mapping task device classes onto worker actors and Ray resources.

A task's ``device_class`` comes from the execution plan (see
``runtime/plan.py``): the reference's task resources (``CPU``, ``CUDA``,
``compute``, ``ndarray``) reduce to "cpu" (only CPU backends), "cuda" (only
GPU backends) or "any" (hybrid UDFs, e.g. numpy *and* cupy). CPU actors are
scheduled with ``num_cpus=1``, GPU actors with ``num_gpus=1``; "any" tasks go
to whichever eligible actor has the fewest tasks in flight.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from raytile.runtime.dispatch_policy import DISPATCH_POLICY

__all__ = ["ELIGIBLE", "eligible_kinds", "actor_options", "pick"]

#: Actor kinds a device class may run on.
ELIGIBLE: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu",),
    "cuda": ("cuda",),
    "any": ("cpu", "cuda"),
}


def eligible_kinds(device_class: str) -> tuple[str, ...]:
    try:
        return ELIGIBLE[device_class]
    except KeyError:
        raise ValueError(f"unknown task device class {device_class!r}; expected one of {sorted(ELIGIBLE)}") from None


def actor_options(kind: str, cpu_share: float, node_id: str | None = None) -> dict:
    """Ray options for a worker actor of ``kind`` ("cpu" or "cuda"), pinned to ``node_id`` if given.

    ``cpu_share`` is 1 normally; 0 when the cluster has no free CPUs left
    (another Context in this process holds them) so the actor still starts.
    GPU actors hold a GPU and no CPU reservation: the CPUs go to CPU actors and
    a GPU actor's host thread mostly waits on the device. Unpinned actors are
    spread over the nodes.
    """
    strategy: Any = "SPREAD"
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    if kind == "cuda":
        return {"num_cpus": 0, "num_gpus": 1, "scheduling_strategy": strategy}
    return {"num_cpus": cpu_share, "num_gpus": 0, "scheduling_strategy": strategy}


def pick(slots: Sequence, device_class: str, prefer: Sequence[Callable[[Any], bool]] = (),
         has_room: Callable[[int], bool] = DISPATCH_POLICY.in_flight.has_room):
    """The eligible slot with the fewest tasks in flight (first one on ties), or None.

    ``prefer`` lists wishes, the most important first: the slots of the
    first wish that some slot with room (``has_room(its tasks in flight)``,
    see :class:`~raytile.runtime.dispatch_policy.InFlightLimit`) fulfils are the candidates.
    """
    kinds = eligible_kinds(device_class)
    eligible = [s for s in slots if s.kind in kinds and not s.dead]
    for wish in prefer:
        preferred = [s for s in eligible if has_room(s.in_flight) and wish(s)]
        if preferred:
            eligible = preferred
            break
    return min(eligible, key=lambda s: s.in_flight, default=None)
