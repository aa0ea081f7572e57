"""`DeviceClass`: what kind of worker a task needs, or a worker is.

A task's device class comes from its run's UDFs (runtime/execution_plan.py):
``CPU`` for CPU backends only, ``CUDA`` for GPU backends only, ``ANY`` for
UDFs served on either (a hybrid numpy-and-cupy UDF). A worker is ``CPU`` or
``CUDA``. Members are plain strings too (``DeviceClass.CUDA == "cuda"``), so
the names users and LiberTEM's code pass keep working.

>>> DeviceClass("cuda") is DeviceClass.CUDA
True
"""

from __future__ import annotations

from raytile.common.str_enum import PlainStrEnum

__all__ = ["DeviceClass"]


class DeviceClass(PlainStrEnum):
    """A worker's or a task's kind of device (see the module docstring)."""

    CPU = "cpu"
    CUDA = "cuda"
    ANY = "any"
