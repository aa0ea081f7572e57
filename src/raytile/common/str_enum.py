"""`PlainStrEnum`: an enum whose members behave as their plain string values everywhere.

Members compare, hash, print, format and show (``repr``) as their values, so an enum can type
a parameter that callers (and LiberTEM's code) pass as a string: ``"cpu"``
and ``DeviceClass.CPU`` are the same dict key, and ``f"{DeviceClass.CPU}"`` is
``"cpu"`` (a plain ``(str, Enum)`` formats as ``"DeviceClass.CPU"`` from
Python 3.11 on).

>>> class Colour(PlainStrEnum):
...     RED = "red"
>>> Colour.RED == "red", f"{Colour.RED}", {"red": 1}[Colour.RED]
(True, 'red', 1)
"""

from __future__ import annotations

import enum

__all__ = ["PlainStrEnum"]


class PlainStrEnum(str, enum.Enum):
    """Base of the string enums of raytile (see the module docstring)."""

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:  # in messages that show a list of them, as the strings they stand for
        return repr(str(self.value))

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    def __hash__(self) -> int:
        return hash(str(self.value))
