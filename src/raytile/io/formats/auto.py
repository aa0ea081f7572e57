"""The ``auto`` format: ``ctx.load("auto", path=...)`` finds the format of a file and opens it.

Every registered format's :meth:`~raytile.io.dataset.DataSet.detect_params`
looks at the file (extension, magic bytes, header) and returns the
constructor parameters it found there, or None. The first format that
places the file wins; generic containers (:data:`GENERIC_FORMATS`, e.g. any
HDF5 file) are asked after the specific formats that share their file type
(a DECTRIS master file is also an HDF5 file). Parameters given next to
``path`` override the detected ones and are checked by the detected format:

>>> ds = ctx.load("auto", path="scan.hdr")                     # doctest: +SKIP
>>> ds = ctx.load("auto", path="scan.hdr", nav_shape=(16, 16))  # doctest: +SKIP

A file no format places raises DataSetException listing the formats tried
(and why those that recognised the file but found it broken refused it).
Headerless raw files cannot be detected: load them with ``"raw"``.
"""

from __future__ import annotations

import os
from typing import Any

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.params import validate_params

__all__ = ["AutoDataSet", "detect_format", "detecting_formats", "GENERIC_FORMATS"]

#: Formats whose files other formats specialise: asked last.
GENERIC_FORMATS = ("hdf5",)


def detecting_formats() -> list[str]:
    """Names of the registered formats that can place a file, in the order ``auto`` asks them."""
    from raytile.io.formats import _FORMATS, get_format

    names = []
    for name in _FORMATS:
        if name == AutoDataSet.format_name:
            continue
        try:
            cls = get_format(name)
        except ImportError:  # an optional dependency is missing: that format places nothing
            continue
        if getattr(cls.detect_params, "__func__", None) is not DataSet.detect_params.__func__:  # type: ignore[attr-defined]
            names.append(name)
    return [n for n in names if n not in GENERIC_FORMATS] + [n for n in names if n in GENERIC_FORMATS]


def detect_format(path: str) -> tuple[str, dict[str, Any]]:
    """``(format name, parameters)`` of the file at ``path``; DataSetException if no format places it."""
    from raytile.io.formats import get_format

    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataSetException(f"auto: file not found: {path}")
    tried = detecting_formats()
    refusals = []
    for name in tried:
        try:
            params = get_format(name).detect_params(path)
        except DataSetException as e:
            refusals.append(f"{name}: {e}")
            continue
        except (OSError, ValueError) as e:  # a detector tripping over an odd file: not its format
            refusals.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if params is not None:
            return name, dict(params)
    why = f"; refused: {'; '.join(refusals)}" if refusals else ""
    raise DataSetException(
        f"auto: cannot detect the format of {path}: tried {', '.join(tried)}{why}. "
        f"Headerless raw files need ctx.load('raw', path=..., nav_shape=..., sig_shape=..., dtype=...)"
    )


class AutoDataSet(DataSet):
    """Not a data set of its own: calling it returns the detected format's data set.

    ``AutoDataSet(path=p, **overrides)`` (what ``ctx.load("auto", ...)`` and
    ``dataset_from_json({"type": "auto", ...})`` do) detects the format of
    ``p`` and returns ``get_format(name)(**detected, **overrides)``.
    """

    format_name = "auto"
    params_schema = {"path": {"type": "path", "required": True}}

    @classmethod
    def validate_params(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Checks ``path``; the other parameters are checked by the detected format."""
        if args:
            if "path" in kwargs or len(args) > 1:
                raise DataSetException("auto: takes one positional parameter, path")
            kwargs["path"] = args[0]
        path = validate_params("auto", cls.params_schema, {"path": kwargs.pop("path")} if "path" in kwargs else {})
        return {**path, **kwargs}

    def __new__(cls, path: str, **overrides: Any) -> Any:
        from raytile.io.formats import get_format

        name, params = detect_format(path)
        params.update({k: v for k, v in overrides.items() if v is not None})
        return get_format(name)(**params)

    def _do_initialize(self) -> DataSetMeta:  # pragma: no cover - never an instance
        raise DataSetException("auto: not a data set of its own")

    def get_partitions(self) -> list[Partition]:  # pragma: no cover - never an instance
        raise DataSetException("auto: not a data set of its own")
