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

from typing import TypedDict, Union

from raytile.common.str_enum import PlainStrEnum

__all__ = ["UDFMethod", "TilingPreferences", "WHOLE_FRAMES"]

#: The ``get_tiling_preferences`` key with which a ``process_tile`` UDF asks for tiles of whole frames
#: (``raytile.io.negotiator.wants_whole_frames`` decides).
WHOLE_FRAMES = "whole_frames"


class UDFMethod(PlainStrEnum):
    """The ``process_*`` methods of the UDF interface (``UDF.UDF_METHOD``)."""

    TILE = "tile"
    FRAME = "frame"
    PARTITION = "partition"


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
