"""Shipping the values tasks share to worker actors: once per actor, then named by key.

A run's parameters (per version) and an in-memory partition's frames travel
to an actor only with the first task that needs them there; later tasks name
them by key (see :mod:`raytile.actors.cache`, whose :class:`Ledger` per
slot records what was shipped where). Parameters that pickle small travel
packed inside that first task (no object store round trip); larger ones are
put into the object store once and travel as their object ref.
"""

from __future__ import annotations

from typing import Any

import ray

from raytile.actors.cache import pack
from raytile.actors.pool import Slot

__all__ = ["ParamsHandle", "INLINE_PARAMS_BYTES", "put_params", "to_ship", "forget_shipped"]

#: Run parameters that pickle to at most this many bytes travel inside the first task each actor gets
#: (no object store round trip); larger ones are put into the object store once.
INLINE_PARAMS_BYTES = 64 * 1024


class ParamsHandle:
    """The driver's handle of one params version: its cache key ``(run_id, version)`` and what
    ships it to an actor the first time, the packed params (small ones) or their object ref."""

    def __init__(self, payload: Any, run_id: str, version: int):
        self.payload = payload
        self.run_id = run_id
        self.version = version

    @property
    def key(self) -> tuple[str, int]:
        return (self.run_id, self.version)


def put_params(params: Any) -> ParamsHandle:
    """Pack a run's parameters (``RunParams``) once per version: inline if small, else ``ray.put``."""
    packed = pack(params)
    small = packed is not None and len(packed) <= INLINE_PARAMS_BYTES
    return ParamsHandle(packed if small else ray.put(params), params.run_id, params.version)


def to_ship(slot: Slot, params: ParamsHandle, data_key: str | None, data_ref: Any) -> dict[str, Any] | None:
    """What ``slot``'s actor gets with this task because it is the first there to need it (``params``,
    ``data``: the shared frames' ref under ``data_key``), recorded in the slot's ledgers; None if it
    has both. The caller holds the lock that guards the ledgers."""
    shipped = {}
    if slot.ledgers["params"].ship(params.key):
        shipped["params"] = params.payload
    if data_key is not None and slot.ledgers["data"].ship(data_key):
        shipped["data"] = data_ref
    return shipped or None


def forget_shipped(slot: Slot, kind: str, key: Any) -> None:
    """``slot``'s actor did not hold a value its ledger lists (a MISSING reply): the resubmitted task
    ships it again. The caller holds the lock that guards the ledgers."""
    slot.ledgers[kind].forget(key)
