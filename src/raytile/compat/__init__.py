"""Porting LiberTEM UDFs: rewrite their imports to raytile and check every name maps.

>>> from raytile.compat import rewrite_imports
>>> rewrite_imports("from libertem.udf import UDF\\n")
'from raytile.udf import UDF\\n'

On the command line: ``python -m raytile.compat.check my_udf.py [-o ported.py]``.
See docs/porting.md.
"""

from raytile.compat._rewrite import Unmapped, find_unmapped, load_ported, rewrite_imports

__all__ = ["Unmapped", "find_unmapped", "load_ported", "rewrite_imports"]
