"""``libertem.executor.inline`` at its ported path: LiberTEM's ``InlineJobExecutor``.

``Context(executor=InlineJobExecutor())`` runs every task in this process, as
``Context(executor="inline")`` does.
"""

from __future__ import annotations

from typing import Any

from raytile.runtime.inline import InlineExecutor

__all__ = ["InlineJobExecutor"]


class InlineJobExecutor(InlineExecutor):
    """Runs tasks in this process; takes LiberTEM's constructor parameters.

    ``debug`` (LiberTEM pickles each task to check it can travel) and
    ``main_process_gpu`` are accepted and change nothing here; ``inline_threads``
    is kept as :attr:`inline_threads` (raytile's inline runs size BLAS threads themselves).
    """

    def __init__(self, debug: bool = False, inline_threads: int | None = None,
                 main_process_gpu: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.debug = bool(debug)
        self.inline_threads = inline_threads
        self.main_process_gpu = main_process_gpu
