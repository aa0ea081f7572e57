"""`NoOpUDF`: reads every tile and does nothing; measures I/O and overhead."""

from __future__ import annotations

from raytile.udf.base import UDF

__all__ = ["NoOpUDF"]


class NoOpUDF(UDF):
    """Touches every tile, computes nothing. Use it to time reading and task overhead."""

    def __init__(self, preferred_input_dtype=UDF.USE_NATIVE_DTYPE):
        super().__init__(preferred_input_dtype=preferred_input_dtype)

    def get_preferred_input_dtype(self):
        return self.params.preferred_input_dtype

    def get_backends(self):
        return self.BACKEND_ALL

    def process_tile(self, tile) -> None:
        pass
