"""Serve with an object store data root (``raytile serve --data-root s3://bucket/prefix``), without Ray:
the service's listing, path resolution (escape rules on prefixes), the server's own credentials, and
error texts without secrets. Against moto on 127.0.0.1 and the inline executor."""

from __future__ import annotations

import numpy as np
import pytest

from raytile.serve.cli import parse_storage_options
from raytile.serve.config import ServeConfig
from raytile.serve.datasets import open_dataset, resolve_dataset
from raytile.serve.errors import BadRequest, Forbidden
from raytile.serve.paths import DataRoots
from raytile.serve.service import Service
from raytile.udf import SumUDF
from _s3 import SECRET, moto_s3

pytest.importorskip("s3fs")

ROOT = "s3://serve-bucket/lab/2026"


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as s:
        frames = np.arange(3 * 4 * 8 * 8, dtype=np.uint16).reshape(3, 4, 8, 8)
        s.put(f"{ROOT}/scan/a.raw", frames.tobytes())
        s.put(f"{ROOT}/scan/b.raw", frames[::-1].tobytes())
        s.put(f"{ROOT}/.hidden/c.raw", b"x")
        s.put("s3://serve-bucket/lab/2026-other/secret.raw", frames.tobytes())  # a sibling prefix
        s.put("s3://serve-bucket/lab/outside.raw", frames.tobytes())
        s.frames = frames
        yield s


def test_prefix_escape_rules(s3):
    roots = DataRoots([ROOT], s3.options)
    assert roots.resolve("scan/a.raw", "p") == f"{ROOT}/scan/a.raw"
    assert roots.resolve(f"{ROOT}/scan/a.raw", "p") == f"{ROOT}/scan/a.raw"
    for bad in ["../outside.raw", "scan/../../outside.raw", "s3://serve-bucket/lab/2026-other/secret.raw",
                "s3://serve-bucket/lab/outside.raw", f"{ROOT}/scan/../../outside.raw", "scan//a.raw",
                "./scan/a.raw", "/etc/passwd", "s3://other-bucket/x.raw"]:
        with pytest.raises(Forbidden):
            roots.resolve(bad, "p")
    assert roots.resolve_many("scan/*.raw", "p") == [f"{ROOT}/scan/a.raw", f"{ROOT}/scan/b.raw"]
    with pytest.raises(Forbidden):
        roots.resolve_many("../*.raw", "p")
    listed = {f["relpath"]: f["bytes"] for f in roots.listing()}
    assert listed == {"scan/a.raw": s3.frames.nbytes, "scan/b.raw": s3.frames.nbytes}


def test_service_opens_object_store_data_sets_with_its_own_credentials(s3, inline_ctx):
    config = ServeConfig.make([ROOT], storage_options=s3.options)
    assert SECRET not in repr(config)
    service = Service(config, ctx=inline_ctx)
    files = service.datasets()
    assert files["roots"] == [ROOT] and len(files["files"]) == 2
    spec = {"format": "raw", "params": {"path": "scan/b.raw", "nav_shape": [3, 4], "sig_shape": [8, 8],
                                        "dtype": "uint16"}}
    name, params = resolve_dataset(spec, service.roots, "dataset", service._formats)
    ds = open_dataset(inline_ctx, name, params)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="float64"))
    want = s3.frames[::-1].reshape(-1, 8, 8).sum(axis=0, dtype=np.float64)
    np.testing.assert_array_equal(res["intensity"].data, want)
    # a client cannot send credentials or point the server at another endpoint
    evil = {"format": "raw", "params": dict(spec["params"], storage_options={"endpoint_url": "http://evil:1"})}
    with pytest.raises(BadRequest, match="storage_options"):
        resolve_dataset(evil, service.roots, "dataset", service._formats)
    # a missing object: a 400 naming the URL, not the secret
    missing = {"format": "raw", "params": dict(spec["params"], path="scan/none.raw")}
    name, params = resolve_dataset(missing, service.roots, "dataset", service._formats)
    with pytest.raises(BadRequest, match="not found") as e:
        open_dataset(inline_ctx, name, params)
    assert f"{ROOT}/scan/none.raw" in str(e.value) and SECRET not in str(e.value)


def test_cli_storage_options_and_url_roots():
    assert parse_storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=true"]) == {
        "endpoint_url": "http://127.0.0.1:9000", "anon": True}
    with pytest.raises(Exception, match="KEY=VALUE") as e:
        parse_storage_options(["sekrit-without-equals"])
    assert "sekrit" not in str(e.value)
    with pytest.raises(Exception, match="names no bucket"):
        ServeConfig.make(["s3://"])
