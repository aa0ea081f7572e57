"""``libertem.io.dataset.memory`` at its ported path: LiberTEM's in-memory data set.

LiberTEM's :class:`MemoryDataSet` is ready when constructed (tests and
notebooks pass it to ``run_udf`` without ``ctx.load``), takes ``tileshape``,
``num_partitions``, ``datashape`` (zeros of that shape when ``data`` is
None) and ``sync_offset``, and its ``.data`` is the array as given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.backends import BACKENDS
from raytile.io.formats import memory as _memory

__all__ = ["MemoryDataSet"]


class MemoryDataSet(_memory.MemoryDataSet):
    """An array in memory with LiberTEM's constructor; initialized on construction.

    >>> ds = MemoryDataSet(data=np.zeros((4, 4, 16, 16)), tileshape=(2, 16, 16), num_partitions=2)
    >>> ctx.run_udf(dataset=ds, udf=SumUDF())  # doctest: +SKIP
    """

    format_name = ""  # Context.load("memory") keeps raytile's own class
    params_schema = {
        **_memory.MemoryDataSet.params_schema,
        "data": {"type": "array"},
        "tileshape": {"type": "shape"},
        "num_partitions": {"type": "int", "min": 1},
        "datashape": {"type": "shape"},
        "base_shape": {"type": "shape"},
        "check_cast": {"type": "bool"},
        "force_need_decode": {"type": "bool"},
        "sync_offset": {"type": "int"},
        "io_backend": {"type": "io_backend", "choices": sorted(BACKENDS)},
        "array_backends": {"type": "iterable"},
    }

    def __init__(self, tileshape: tuple[int, ...] | None = None, num_partitions: int | None = None,
                 data: Any = None, sig_dims: int | None = None, check_cast: bool = True,
                 datashape: tuple[int, ...] | None = None, base_shape: tuple[int, ...] | None = None,
                 force_need_decode: bool = False, io_backend: str | None = None,
                 nav_shape: tuple[int, ...] | None = None, sig_shape: tuple[int, ...] | None = None,
                 sync_offset: int = 0, array_backends: Any = None):
        if io_backend is not None:
            raise ValueError("MemoryDataSet: io_backend does not apply to data in memory; leave it None")
        if data is None:
            if datashape is None:
                raise DataSetException("MemoryDataSet: give data (an array) or datashape (zeros of that shape)")
            data = np.zeros(datashape, dtype=np.float32)
        self._given = data
        self.tileshape = tileshape
        self.sync_offset = int(sync_offset)
        self.check_cast = check_cast
        self.base_shape = base_shape
        super().__init__(data=data, sig_dims=sig_dims, nav_shape=nav_shape, sig_shape=sig_shape,
                         num_partitions=num_partitions, tileshape=tileshape, sync_offset=self.sync_offset)
        self.initialize(None)

    @property
    def data(self) -> Any:
        """The array as given to the constructor."""
        return self._given
