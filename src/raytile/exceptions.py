"""``libertem.exceptions`` at its ported path: ``UDFException``, ``ExecutorSpecException``, ``UDFRunCancelled``.

The same classes as :mod:`raytile.common.exceptions` (LiberTEM keeps both paths): a run cancelled
because its acquisition ended early is caught by ``except UDFRunCancelled`` from either.
"""

from raytile.common.exceptions import ExecutorSpecException, UDFException, UDFRunCancelled

__all__ = ["UDFException", "ExecutorSpecException", "UDFRunCancelled"]
