"""``libertem.io.dataset.base.backend`` at its ported path.

LiberTEM splits a backend into a description (``IOBackend``, registered by
``id_=``) and its implementation (``IOBackendImpl``); in raytile one class
is both, so ``IOBackendImpl`` names the same class.
"""

from raytile.io.backends import IOBackend

IOBackendImpl = IOBackend

__all__ = ["IOBackend", "IOBackendImpl"]
