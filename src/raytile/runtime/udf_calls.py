"""`calling_udf`: call a user's UDF method so that what it raises names the UDF, the method and where.

Every place that calls into user code (the part runner on workers, merges on
workers and in the coordinator, ``preprocess`` on the main node) goes through
it, so that errors read alike: ``SumUDF.merge raised ValueError: ... while
merging partition 3 (frames 36:48)``, with the original traceback in
``UDFException.worker_traceback``.
"""

from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import Iterator

from raytile.common.errors import UDFException, udf_exception_class

__all__ = ["calling_udf", "udf_error"]


def udf_error(udf: object, method: str, exc: BaseException, where: str) -> UDFException:
    """The UDFException for ``exc`` raised by ``udf.method``; ``where`` ends the message.

    It is also an instance of ``type(exc)`` (see :func:`~raytile.common.errors.udf_exception_class`).
    """
    return udf_exception_class(type(exc))(
        f"{type(udf).__name__}.{method} raised {type(exc).__name__}: {exc} {where}".rstrip(),
        worker_traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )


@contextmanager
def calling_udf(udf: object, method: str, where: str) -> Iterator[None]:
    """Wrap a call of ``udf.method``: a UDFException passes, anything else becomes one (see :func:`udf_error`).

    >>> with calling_udf(udf, "merge", "while merging partition 3"):
    ...     udf.merge(dest, src)
    """
    try:
        yield
    except UDFException:
        raise
    except Exception as e:
        raise udf_error(udf, method, e, where) from e
