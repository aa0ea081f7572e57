"""`ParamVersions`: a run's UDF parameters, one numbered version per live patch.

A live patch (``UDFRun.update_parameters``, Serve's ``PATCH /v1/runs/{id}``)
is checked, applied and numbered here, and nowhere else: :meth:`ParamVersions.patch`
runs in the caller's thread (so a bad patch raises there, at once), builds
the UDFs of the new version from the previous version's, and queues the
:class:`ParamVersion` for the run's coordinator. The coordinator takes the
new versions between two turns of its loop (:meth:`ParamVersions.take_new`):
tasks dispatched from then on get the version's UDFs, and the merging side
(``ResultAccumulator.adopt``) follows the version's parameters.

>>> versions = ParamVersions(plan.params, stream=False)
>>> versions.patch([{"radius": 5.0}], recompute=False).number
1
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any, Sequence

from raytile.common.errors import ConfigValidationError, UDFException
from raytile.runtime.params import RunParams
from raytile.runtime.stream_feed import NO_RECOMPUTE

__all__ = ["ParamVersion", "ParamVersions"]


@dataclass(frozen=True)
class ParamVersion:
    """One version of a run's parameters: its ``number``, the ``params`` tasks run with from then on,
    the ``patches`` (one dict per UDF) that made it from the version before, and whether partitions
    computed with older versions are to be computed again (``recompute``)."""

    number: int
    params: RunParams
    patches: tuple[dict[str, Any], ...]
    recompute: bool


class ParamVersions:
    """The versions of one run's parameters, starting with the planned ``params`` (version 0).

    ``stream``: the run reads a stream, whose frames are gone once processed, so a patch cannot
    ask for a recompute.
    """

    def __init__(self, params: RunParams, stream: bool = False):
        self._lock = threading.Lock()
        self._current = params
        self._stream = stream
        self._new: list[ParamVersion] = []
        #: every UDF's patches so far, merged (a key moves to the end when set again, so that applying
        #: the merged dict sets the keys in the order of their last setting)
        self._merged: list[dict[str, Any]] = [{} for _ in params.udfs]

    @property
    def current(self) -> RunParams:
        """The newest version's parameters (patches not yet taken by the coordinator included)."""
        return self._current

    def patch(self, patches: Sequence[dict[str, Any]], recompute: bool = False) -> ParamVersion:
        """Check ``patches`` (one dict per UDF; ``{}`` leaves a UDF as it is), make the next version
        and queue it for the coordinator. Raises UDFException for a wrong count or an unknown
        parameter name, ConfigValidationError for a recompute of a stream."""
        patches = tuple(dict(p) for p in patches)
        if recompute and self._stream:
            raise ConfigValidationError(NO_RECOMPUTE)
        with self._lock:
            params = self._current
            if len(patches) != len(params.udfs):
                raise UDFException(f"update_parameters needs {len(params.udfs)} dicts (one per UDF), "
                                   f"got {len(patches)}")
            udfs = []
            for udf, patch in zip(params.udfs, patches):
                new = udf.copy_for_partition(0, params.dataset_shape.nav.size, None)
                if patch:
                    new.update_parameters(patch)  # unknown names raise here, in the caller
                udfs.append(new)
            version = ParamVersion(params.version + 1, replace(params, udfs=udfs, version=params.version + 1),
                                   patches, bool(recompute))
            self._current = version.params
            self._new.append(version)
            for merged, patch in zip(self._merged, patches):
                for key, value in patch.items():
                    merged.pop(key, None)
                    merged[key] = value
        return version

    @property
    def recompute_pending(self) -> bool:
        """True if a version not yet taken asks for a recompute."""
        with self._lock:
            return any(v.recompute for v in self._new)

    def restart(self) -> None:
        """Queue the newest parameters as one recompute version holding every patch so far, for a new
        coordinator that starts from the planned parameters (a run that computes again after it
        ended, see runtime/active_run.py); the versions not yet taken are replaced by it."""
        with self._lock:
            self._new = [ParamVersion(self._current.version, self._current,
                                      tuple(dict(m) for m in self._merged), True)]

    def take_new(self) -> list[ParamVersion]:
        """The versions made since the last call, oldest first (the coordinator's side)."""
        with self._lock:
            new, self._new = self._new, []
        return new
