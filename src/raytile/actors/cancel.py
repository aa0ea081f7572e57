"""Cancelling a run's tasks on its workers, without ``ray.cancel``.

Each actor with tasks of the run is told once (``WorkerActor.cancel_run``,
in its control group beside the running task): its queued tasks of the run
return at once, a running one stops at its next tile. Not ``ray.cancel``:
cancelling a queued call of an ordered actor leaves a gap in the actor's
sequence numbers, and the actor then waits 30 s for the missing call before
running the next run's tasks (seen as a 33 s run and a worker replaced for
nothing).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from raytile.actors.submission import RayTaskHandle

__all__ = ["tell_cancelled"]

log = logging.getLogger(__name__)


def tell_cancelled(handles: Sequence[RayTaskHandle], done: Callable[[RayTaskHandle], None]) -> None:
    """Tell each actor running or queueing one of ``handles`` to skip its run's tasks (once per actor
    and run), and call ``done`` on each handle."""
    told = set()
    for h in handles:
        key = (id(h.actor), h.run_id)
        if key not in told:
            told.add(key)
            try:
                h.actor.cancel_run.remote(h.run_id)
            except Exception as e:  # its actor is gone
                log.debug("cancel_run on %s: %s", h.slot.name, e)
        done(h)
