"""The ``live`` extra's modules (pyzmq, bitshuffle, lz4, cbor2), imported with a message that says
what to install when one is missing, as ``raytile serve`` does for the ``serve`` extra.

Only DECTRIS needs them (its ZeroMQ stream and image codecs); Merlin speaks plain TCP.

>>> zmq = live_module("zmq", "the DECTRIS receiver")     # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from types import ModuleType

from raytile.common.errors import ConfigValidationError

__all__ = ["LIVE_EXTRA", "live_module"]

#: How to install the extra, named in every message.
LIVE_EXTRA = "the live extra (pip install -e '.[live]')"


def live_module(name: str, what: str) -> ModuleType:
    """Import ``name`` (e.g. ``"zmq"``, ``"lz4.block"``); a missing one raises ConfigValidationError
    saying that ``what`` needs the live extra."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ConfigValidationError(f"{what} needs {LIVE_EXTRA}: {e}") from None
