"""``libertem.executor.base`` at its ported path: :class:`AsyncAdapter`.

LiberTEM wraps a synchronous executor in ``AsyncAdapter`` to hand it to async
code, e.g. an Analysis' ``controller`` (``ClusterAnalysis``)::

    executor = AsyncAdapter(wrapped=ctx.executor)
    await analysis.controller(cancel_id=..., executor=executor, job_is_cancelled=lambda: False,
                              send_results=send_results)

raytile's executors are driven by a :class:`~raytile.Context`, not by task
lists handed over by hand, so the adapter gives async code the executor
(:meth:`AsyncAdapter.ensure_sync`) and a Context over it (:meth:`AsyncAdapter.as_context`);
LiberTEM's task protocol (``run_tasks``, ``scatter``, ``run_function``) is internal and left out.
"""

from __future__ import annotations

from typing import Any

from raytile.common.errors import ConfigValidationError
from raytile.runtime.context import Context
from raytile.runtime.executor import Executor

__all__ = ["AsyncAdapter"]


class AsyncAdapter:
    """A synchronous executor (or a Context) handed to async code, which runs its blocking calls in a
    thread (``asyncio.to_thread``). ``pool`` (LiberTEM's thread pool) is accepted and unused."""

    def __init__(self, wrapped: Executor | Context, pool: Any = None):
        if not isinstance(wrapped, (Executor, Context)):
            raise ConfigValidationError(f"AsyncAdapter(wrapped=...): needs a raytile executor or Context, got "
                                        f"{type(wrapped).__name__}")
        self._wrapped = wrapped
        self._context: Context | None = wrapped if isinstance(wrapped, Context) else None

    def ensure_sync(self) -> Executor | Context:
        """The wrapped executor (or Context)."""
        return self._wrapped

    def as_context(self) -> Context:
        """A Context running on the wrapped executor (the Context itself if one was wrapped). The executor
        belongs to the caller: this Context is not closed here."""
        if self._context is None:
            assert isinstance(self._wrapped, Executor)
            self._context = Context(executor=self._wrapped)
        return self._context

    def close(self) -> None:
        """Nothing to release: the wrapped executor belongs to the caller (LiberTEM's adapter closes its
        own thread pool here)."""
