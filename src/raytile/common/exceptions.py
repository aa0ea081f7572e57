"""Exceptions at the path of ``libertem.common.exceptions``.

The same classes as :mod:`raytile.common.errors` (one set of exceptions in
raytile), so ``except UDFException`` catches what raytile raises:

>>> from raytile.common.exceptions import UDFException
>>> from raytile.common.errors import UDFException as E
>>> UDFException is E
True
"""

from raytile.common.errors import ExecutorError, UDFException, UDFRunCancelled

__all__ = ["UDFException", "UDFRunCancelled", "ExecutorSpecException"]

#: LiberTEM's name for errors in specifying an executor or its resources.
ExecutorSpecException = ExecutorError
