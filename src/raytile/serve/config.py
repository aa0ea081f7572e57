"""`ServeConfig`: what one serve app allows (data roots, token, limits, UDF modules).

>>> cfg = ServeConfig(data_roots=["/data"], token="s3cret", max_runs=4)
>>> cfg.max_rate_hz
10.0
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

from raytile.common.errors import ConfigValidationError
from raytile.io.store import StorageOptions, is_url

__all__ = ["ServeConfig"]


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """Settings of a serve app; immutable, shipped to every replica.

    ``data_roots``: directories whose files clients may open (nothing else);
    ``token``: if set, every /v1 request needs ``Authorization: Bearer <token>``;
    ``max_runs``: runs going on at once (429 beyond); ``udf_modules``: server-side
    modules whose UDF classes clients may name; ``max_roi_bytes``: largest
    encoded ROI; ``max_result_bytes``: largest total of a run's result buffers;
    ``max_rate_hz``: default and ceiling of streamed messages a second;
    ``keep_finished``: finished runs kept for their results; ``workers``: CPU
    worker actors of the replica's Context (None: one per cluster CPU); ``live``:
    detector connections clients may start live runs on, ``((name, url), ...)``
    (see :mod:`raytile.serve.live_runs`; a mapping or ``"[name=]url"`` strings are accepted);
    ``storage_options``: fsspec options for data roots that are object store prefixes
    (``s3://bucket/prefix``; None: the environment's credentials), never shown in a repr.
    """

    data_roots: tuple[str, ...]
    token: str | None = None
    max_runs: int = 8
    udf_modules: tuple[str, ...] = ()
    max_roi_bytes: int = 1 << 20
    max_result_bytes: int = 256 << 20
    max_rate_hz: float = 10.0
    keep_finished: int = 32
    workers: int | None = None
    live: tuple[tuple[str, str], ...] = ()
    storage_options: Any = None

    def __post_init__(self) -> None:
        given = [os.fspath(r) for r in self.data_roots]
        for r in given:
            if is_url(r) and not r.split("://", 1)[1].strip("/"):
                raise ConfigValidationError(f"serve: data root {r!r} names no bucket")
        roots = tuple(r.rstrip("/") if is_url(r) else os.path.realpath(r) for r in given)
        if not roots:
            raise ConfigValidationError("serve: data_roots needs at least one directory")
        for r in roots:
            if not is_url(r) and not os.path.isdir(r):
                raise ConfigValidationError(f"serve: data root {r!r} is not a directory")
        object.__setattr__(self, "data_roots", roots)
        object.__setattr__(self, "storage_options", StorageOptions(self.storage_options))
        object.__setattr__(self, "udf_modules", tuple(self.udf_modules))
        for name in ("max_runs", "max_roi_bytes", "max_result_bytes", "keep_finished"):
            if int(getattr(self, name)) < 1:
                raise ConfigValidationError(f"serve: {name} must be >= 1, got {getattr(self, name)!r}")
        if not self.max_rate_hz > 0:
            raise ConfigValidationError(f"serve: max_rate_hz must be > 0, got {self.max_rate_hz!r}")
        if self.token is not None and not self.token:
            raise ConfigValidationError("serve: token must be a non-empty string or None")
        if self.live:
            from raytile.serve.live_runs import check_live_config

            object.__setattr__(self, "live", check_live_config(self.live))

    @classmethod
    def make(cls, data_roots: Sequence[str | os.PathLike[str]], **kwargs: Any) -> "ServeConfig":
        """From a list of roots (str or Path) and keyword settings."""
        return cls(data_roots=tuple(os.fspath(r) for r in data_roots), **kwargs)  # the fields check them
