"""The ``auto`` format: ``ctx.load("auto", path=...)`` finds the format of a file and opens it.

Every registered format's :meth:`~raytile.io.dataset.DataSet._detect_params`
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

A URL (``s3://bucket/scan.hdr``, with ``storage_options``; see docs/cloud.md)
is detected the same way by the formats that read object stores (their
``_detect_params`` take a ``store``): headers are read by ranged requests,
and the detected format gets the ``storage_options`` too.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

from raytile.common.errors import DataSetException
from raytile.io.dataset import DataSet, DataSetMeta, Partition
from raytile.io.params import validate_params
from raytile.io.store import display_url, is_url, store_for

__all__ = ["AutoDataSet", "detect", "detect_format", "detecting_formats", "GENERIC_FORMATS"]

#: Formats whose files other formats specialise: asked last.
GENERIC_FORMATS = ("hdf5",)


def _reads_stores(cls: type[DataSet]) -> bool:
    """Whether a format's ``_detect_params`` places objects of a store (takes ``store``)."""
    try:
        return "store" in inspect.signature(cls._detect_params).parameters
    except (TypeError, ValueError):
        return False


def detecting_formats(urls: bool = False) -> list[str]:
    """Names of the registered formats that can place a file (with ``urls``: an object of a store), in the
    order ``auto`` asks them."""
    from raytile.io.formats import _FORMATS, get_format

    names = []
    for name in _FORMATS:
        if name == AutoDataSet.format_name:
            continue
        try:
            cls = get_format(name)
        except ImportError:  # an optional dependency is missing: that format places nothing
            continue
        if not any("_detect_params" in vars(k) for k in cls.__mro__ if k is not DataSet):  # the base's: places nothing
            continue
        if not urls or _reads_stores(cls):
            names.append(name)
    return [n for n in names if n not in GENERIC_FORMATS] + [n for n in names if n in GENERIC_FORMATS]


def detect_format(path: str, storage_options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """``(format name, parameters)`` of the file (or URL, read with ``storage_options``) at ``path``;
    DataSetException if no format places it."""
    from raytile.io.formats import get_format

    path = os.fspath(path)
    store = store_for(path, storage_options) if is_url(path) else None
    if store is not None:
        if not store.exists(path):
            raise DataSetException(f"auto: not found: {display_url(path)} (no such object or prefix)")
    elif not os.path.exists(path):
        raise DataSetException(f"auto: could not determine DataSet type for file {path!r}: file not found: {path}")
    tried = detecting_formats(urls=store is not None)
    refusals = []
    for name in tried:
        try:
            cls = get_format(name)
            detect: Any = cls._detect_params  # formats that read stores take store= (see _reads_stores)
            params = detect(path, store=store) if store is not None else detect(path)
        except DataSetException as e:
            refusals.append(f"{name}: {e}")
            continue
        except (OSError, ValueError) as e:  # a detector tripping over an odd file: not its format
            refusals.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if params is not None:
            params = dict(params)
            if store is not None and storage_options is not None:
                params["storage_options"] = storage_options
            return name, params
    why = f"; refused: {'; '.join(refusals)}" if refusals else ""
    raise DataSetException(
        f"auto: cannot detect the format of {display_url(path)}: tried {', '.join(tried)}{why}. "
        f"Headerless raw files need ctx.load('raw', path=..., nav_shape=..., sig_shape=..., dtype=...)"
    )


def detect(path: str, executor: object = None) -> dict[str, Any]:
    """LiberTEM's ``libertem.io.dataset.detect``: ``{"parameters": {...}, "info": {}, "type": name}`` of the
    format that places the file at ``path`` (:func:`detect_format`), or ``{}`` if none does.

    ``executor`` is LiberTEM's and not used (the headers are read here). ``info`` is empty: raytile's
    formats report what they detect as parameters only.
    """
    try:
        name, params = detect_format(path)
    except DataSetException:
        return {}
    return {"parameters": params, "info": {}, "type": name}


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

    def __new__(cls, path: str, storage_options: Mapping[str, Any] | None = None, **overrides: Any) -> Any:
        from raytile.io.formats import get_format

        name, params = detect_format(path, storage_options)
        params.update({k: v for k, v in overrides.items() if v is not None})
        return get_format(name)(**params)

    def _do_initialize(self) -> DataSetMeta:  # pragma: no cover - never an instance
        raise DataSetException("auto: not a data set of its own")

    def get_partitions(self) -> list[Partition]:  # pragma: no cover - never an instance
        raise DataSetException("auto: not a data set of its own")
