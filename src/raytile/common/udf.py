"""UDF vocabulary shared by every layer, mirroring ``libertem.common.udf``.

:class:`UDFMethod` names the ``process_*`` method a UDF implements. Its
members are strings equal to raytile's method names, so a ported
``get_method`` that returns ``UDFMethod.TILE`` works wherever raytile
expects ``"tile"``:

>>> from raytile.common.udf import UDFMethod
>>> UDFMethod.TILE == "tile", f"process_{UDFMethod.FRAME}", "partition" in {UDFMethod.PARTITION}
(True, 'process_frame', True)
"""

from __future__ import annotations

import enum
from typing import TypedDict, Union

__all__ = ["UDFMethod", "TilingPreferences", "WHOLE_FRAMES"]

#: The ``get_tiling_preferences`` key with which a ``process_tile`` UDF asks for tiles of whole frames
#: (``raytile.io.negotiator.wants_whole_frames`` decides).
WHOLE_FRAMES = "whole_frames"


class UDFMethod(str, enum.Enum):
    """The ``process_*`` methods of the UDF interface (``UDF.UDF_METHOD``)."""

    TILE = "tile"
    FRAME = "frame"
    PARTITION = "partition"

    # behave as the plain string everywhere (f-strings, dict keys, set members)
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    def __hash__(self) -> int:
        return hash(str(self.value))


class TilingPreferences(TypedDict, total=False):
    """What ``UDF.get_tiling_preferences`` returns (every key may be left out).

    ``depth``: frames per tile, or ``UDF.TILE_DEPTH_DEFAULT`` / ``UDF.TILE_DEPTH_MAX``;
    ``total_size``: bytes per tile, or ``UDF.TILE_SIZE_BEST_FIT`` / ``UDF.TILE_SIZE_MAX``;
    ``whole_frames`` (raytile's, optional): ``True`` for tiles of whole frames to ``process_tile``
    (``raytile.io.negotiator.wants_whole_frames``).
    """

    depth: int
    total_size: Union[float, int]
    whole_frames: bool
