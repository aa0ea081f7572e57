"""HTTP errors of the serve app: each maps to a status code and a JSON body ``{error, detail}``.

>>> raise BadRequest("udfs[0].params.ro", "must be a number >= 0, got 'x'")
"""

from __future__ import annotations

from typing import Any

from raytile.common.errors import RaytileError

__all__ = [
    "ServeError", "BadRequest", "Unauthorized", "Forbidden", "NotFound", "Conflict",
    "PayloadTooLarge", "TooManyRuns",
]


class ServeError(RaytileError):
    """A request the app refuses. ``status`` is the HTTP code, ``error`` a short stable word,
    ``field`` the request field at fault (if one is), ``detail`` the human-readable cause."""

    status = 500
    error = "internal"

    def __init__(self, field: str | None, detail: str):
        super().__init__(f"{field}: {detail}" if field else detail)
        self.field = field
        self.detail = detail

    def headers(self) -> dict[str, str]:
        """Response headers that go with the error (none but a 429's ``Retry-After``)."""
        return {}

    def body(self) -> dict[str, Any]:
        """The JSON body of the response: ``{"error": ..., "detail": ..., "field": ...}``."""
        out: dict[str, Any] = {"error": self.error, "detail": str(self)}
        if self.field:
            out["field"] = self.field
        return out


class BadRequest(ServeError):
    """400: a value does not validate against its schema (unknown name, wrong type, out of range)."""

    status = 400
    error = "invalid"


class Unauthorized(ServeError):
    """401: the app has a token and the request has no ``Authorization: Bearer <token>`` matching it."""

    status = 401
    error = "unauthorized"


class Forbidden(ServeError):
    """403: a path outside the data roots (``..``, an absolute path elsewhere, a symlink out)."""

    status = 403
    error = "forbidden"


class NotFound(ServeError):
    """404: no such run, UDF result or buffer."""

    status = 404
    error = "not_found"


class Conflict(ServeError):
    """409: the run is in a state that does not allow this (patching a finished run)."""

    status = 409
    error = "conflict"


class PayloadTooLarge(ServeError):
    """413: a ROI or the run's result buffers exceed the app's limits."""

    status = 413
    error = "too_large"


class TooManyRuns(ServeError):
    """429: ``max_runs`` runs are going on already; ``retry_after_s`` (whole seconds, >= 1) goes out as
    the ``Retry-After`` header (RFC 9110: how long the client should wait before asking again)."""

    status = 429
    error = "too_many_runs"

    def __init__(self, field: str | None, detail: str, retry_after_s: int = 1):
        super().__init__(field, detail)
        self.retry_after_s = max(1, int(retry_after_s))

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}
