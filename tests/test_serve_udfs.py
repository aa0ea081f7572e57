"""UDFs that the serve tests allow-list (``udf_modules=["test_serve_udfs"]``), and tests of how
allow-listed classes become JSON parameter schemas (no Serve needed for those)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from raytile.udf import UDF


class SlowSumSigUDF(UDF):
    """Sum of each frame, sleeping ``delay`` seconds per partition (keeps runs going for the tests)."""

    def __init__(self, delay: float = 0.05, **kwargs):
        super().__init__(delay=delay, **kwargs)

    def get_result_buffers(self):
        return {"intensity": self.buffer(kind="nav", dtype="float64")}

    def process_partition(self, partition):
        time.sleep(self.params.delay)
        self.results.intensity[:] = partition.reshape(partition.shape[0], -1).sum(axis=1)


class FailingUDF(UDF):
    """Raises in the partition whose first frame is ``fail_at`` (and only there)."""

    def __init__(self, fail_at: int = 0, **kwargs):
        super().__init__(fail_at=fail_at, **kwargs)

    def get_result_buffers(self):
        return {"n": self.buffer(kind="nav", dtype="float32")}

    def process_partition(self, partition):
        if self.meta.slice.origin[0] == self.params.fail_at:
            raise RuntimeError("boom on purpose")
        self.results.n[:] = 1


class BigResultUDF(UDF):
    """A sig buffer with ``n`` values a pixel (to exceed the server's result size limit)."""

    def __init__(self, n: int = 1, **kwargs):
        super().__init__(n=n, **kwargs)

    def get_result_buffers(self):
        return {"big": self.buffer(kind="sig", extra_shape=(self.params.n,), dtype="float32")}

    def process_partition(self, partition):
        pass

    def merge(self, dest, src):
        dest.big[:] += src.big


class _Private(UDF):
    """Not offered: a leading underscore."""


class TakesArray(UDF):
    """Not offered: its parameter has no JSON form."""

    def __init__(self, weights: np.ndarray, **kwargs):
        super().__init__(weights=weights, **kwargs)


def test_allow_listed_module_schemas():
    pytest.importorskip("fastapi")
    from raytile.serve.udfs import UDFRegistry

    reg = UDFRegistry(["test_serve_udfs"])
    names = set(reg.specs)
    assert {"test_serve_udfs.SlowSumSigUDF", "test_serve_udfs.FailingUDF", "test_serve_udfs.BigResultUDF"} <= names
    assert "test_serve_udfs._Private" not in names and "test_serve_udfs.TakesArray" not in names
    assert reg.specs["test_serve_udfs.BigResultUDF"].schema["properties"] == {"n": {"type": "integer"}}
    assert reg.specs["test_serve_udfs.SlowSumSigUDF"].schema["properties"] == {"delay": {"type": ["integer", "number"]}}
