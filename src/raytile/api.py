"""The module path of ``libertem.api``: notebooks that ``import libertem.api as lt`` and call
``lt.Context()`` run on raytile with the import rewritten (``import raytile.api as lt``).

>>> import raytile.api as lt
>>> ctx = lt.Context.make_with("inline")
"""

from raytile.runtime.context import Context

__all__ = ["Context"]
