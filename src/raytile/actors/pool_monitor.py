"""`PoolMonitor`: the thread that keeps a Context's worker pool following the cluster.

It refreshes the pool every ``REFRESH_S`` (new nodes, lost nodes, actors
that started) and promotes a starting actor as soon as its ping is answered,
so a run waiting for its first worker starts at once. It also answers
whether the workers started: a Context does not wait for them (its first run
starts on the first that is ready); callers that report on the workers or
run on one now wait once, at most ``start_timeout``
(:meth:`PoolMonitor.await_started`).
"""

from __future__ import annotations

import logging
import threading
import time

import ray

from raytile.actors.pool import REFRESH_S, WorkerPool
from raytile.common.errors import ExecutorError

__all__ = ["PoolMonitor"]

log = logging.getLogger(__name__)


class PoolMonitor:
    """Refreshes ``pool`` from a daemon thread until :meth:`stop`; ``fixed`` is what the pool was asked
    for (``{"cpu": n, "cuda": m}``, or None: the cluster's CPUs and GPUs), named in errors."""

    def __init__(self, pool: WorkerPool, fixed: dict[str, int] | None, start_timeout: float):
        self.pool = pool
        self._fixed = fixed
        self.start_timeout = start_timeout
        self._started = False  # the first actors were waited for (see await_started)
        self._stopped = False
        self._thread = threading.Thread(target=self._watch, name="raytile-pool", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        next_refresh = time.monotonic()
        while not self._stopped:
            if self.pool.answered.wait(max(0.0, next_refresh - time.monotonic())):
                self.pool.answered.clear()
                self.pool.promote()
            if time.monotonic() >= next_refresh:
                try:
                    self.pool.refresh()
                except Exception as e:  # noqa: BLE001  (the cluster is unreachable for a moment)
                    log.debug("pool refresh failed: %s", e)
                next_refresh = time.monotonic() + REFRESH_S

    def stop(self) -> None:
        """End the thread (at its next turn, within ``REFRESH_S``)."""
        self._stopped = True

    def await_started(self) -> None:
        """Wait (once, at most ``start_timeout``) for the actors the Context was made with, for callers
        that report on the workers or run on one of them now. Runs do not wait here: they start on the
        first worker that is ready (see ``RayExecutor.wait``)."""
        if not self._started:
            self.pool.wait_ready(self.start_timeout)
            self._started = True
        self.raise_startup_error()
        if not self.pool.ready:
            raise ExecutorError(
                f"the Ray cluster could not start {'its' if self._fixed is None else self._fixed} "
                f"worker actors within {self.start_timeout:.0f} s (cluster resources: {ray.cluster_resources()})")

    def raise_startup_error(self) -> None:
        """Raise why the worker actors failed to start, if all did (the pool then starts no more)."""
        error = self.pool.startup_error
        if error is not None:
            raise ExecutorError(f"the worker actors failed to start:\n{error}")
