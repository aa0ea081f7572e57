"""`WORKER_LOST`: the Ray errors that mean an actor (or its process, or its node) is gone.

A call that fails with one of these did not fail in the UDF: its task is
retried on another worker (``WorkerLost``), a dead progress actor is
replaced. Which of the names exist depends on the Ray version.
"""

from __future__ import annotations

from ray import exceptions as rex

__all__ = ["WORKER_LOST"]

#: Errors that mean the actor (or its process, or its node) is gone: retry the task elsewhere.
WORKER_LOST: tuple[type[BaseException], ...] = tuple(
    getattr(rex, n) for n in ("RayActorError", "ActorDiedError", "ActorUnavailableError",
                              "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError",
                              "OwnerDiedError", "ObjectLostError")
    if hasattr(rex, n)
)
