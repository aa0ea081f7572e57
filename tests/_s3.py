"""An S3 endpoint for tests: moto's ThreadedMotoServer on 127.0.0.1 at a free port, started and stopped here.

``moto_s3()`` yields an :class:`S3` with the endpoint URL, the storage options
raytile is given (a made-up key and secret: moto accepts any), a boto3 client
to put objects with, and ``stop()``/``start()`` for tests of a server that
goes away mid-run.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

#: Credentials the tests use; the secret must never appear in a message or log line.
KEY = "AKIATESTKEYRAYTILE01"
SECRET = "sEcReT/raytile+never-shown-0123456789ab"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3:
    server: Any
    port: int
    endpoint: str
    options: dict[str, Any] = field(default_factory=dict)
    client: Any = None

    def put(self, url: str, data: bytes) -> str:
        """Put ``data`` at ``s3://bucket/key`` (the bucket is made if needed); returns the URL."""
        bucket, key = url[len("s3://"):].split("/", 1)
        with contextlib.suppress(self.client.exceptions.BucketAlreadyOwnedByYou,
                                 self.client.exceptions.BucketAlreadyExists):
            self.client.create_bucket(Bucket=bucket)
        self.client.put_object(Bucket=bucket, Key=key, Body=data)
        return url

    def put_file(self, url: str, path: str) -> str:
        with open(path, "rb") as f:
            return self.put(url, f.read())


@contextlib.contextmanager
def moto_s3() -> Iterator[S3]:
    """A moto S3 server on 127.0.0.1 for the duration of the block."""
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                          region_name="us-east-1",
                          config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 1}))
    s3 = S3(server, port, endpoint, {"endpoint_url": endpoint, "key": KEY, "secret": SECRET, "region": "us-east-1"},
            client)
    try:
        yield s3
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    """A moto S3 server for a test module (import this fixture into the module)."""
    with moto_s3() as s:
        yield s
