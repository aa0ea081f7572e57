"""Where a data set's bytes live: a local file system or an object store behind a URL.

A path given to a file format may be a URL (``s3://bucket/key``, ``gs://``,
``az://``, ``https://``) with ``storage_options`` in fsspec's terms
(``endpoint_url``, ``key``, ``secret``, ``anon``, ``region``; any other
fsspec option passes through; without them the environment's credentials
are used: ``AWS_*`` variables, ``~/.aws``). This module is the one place
that talks to the store, through fsspec (s3fs, gcsfs, adlfs, aiohttp; see
docs/cloud.md for why fsspec):

* :class:`ObjectStore` holds a protocol and its options; it pickles as those
  alone (the file system client is made again in each process), so a
  partition carries it to the worker that reads its byte ranges;
* :func:`store_for` gives the store of a path (``None`` for a local path);
* :func:`open_path`, :func:`path_size`, :func:`check_path_file` and
  :func:`expand_store_paths` are what headers need, for local paths and
  URLs alike;
* :meth:`ObjectStore.fetch` gets byte ranges with several ranged GETs in
  flight, each retried with backoff on transient failures and bounded in
  time, so a dead endpoint ends in an error, not a hang.

Every failure becomes a :class:`~raytile.common.errors.DataSetException`
naming the URL (without query string or user info) and never a secret: the
options' secret values and signed query parameters are scrubbed from any
text that comes from the client library.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, Callable, Iterator, Sequence, TypeVar
from urllib.parse import urlsplit, urlunsplit

from raytile.common.errors import DataSetException

__all__ = [
    "ObjectStore", "StorageOptions", "is_url", "store_for", "display_url", "open_path", "path_size",
    "check_path_file", "expand_store_paths", "scrub", "DEFAULT_REQUEST_BYTES", "DEFAULT_CONCURRENCY",
    "REQUEST_TIMEOUT_S", "RETRY_WINDOW_S", "zarr_store_options",
]

T = TypeVar("T")

#: Bytes one ranged GET fetches when the format declares no I/O size.
DEFAULT_REQUEST_BYTES = 8 * 1024 * 1024
#: Ranged GETs a reader keeps in flight.
DEFAULT_CONCURRENCY = 8
#: No new attempt of a failing request after this long: a dead endpoint (connection refused, or no
#: answer to connect within CONNECT_TIMEOUT_S) fails a run within about this long.
RETRY_WINDOW_S = 30.0
#: Connecting to the store.
CONNECT_TIMEOUT_S = 5
#: An endpoint that accepted the connection but sends nothing for this long has stalled.
READ_TIMEOUT_S = 60
#: Hard upper bound of one request attempt, queueing in a busy store included (a loaded store may
#: hold a request behind others: measured on moto under load, over 30 s).
REQUEST_TIMEOUT_S = 180.0
#: Attempts of one request on transient failures (connection reset, 5xx, throttling), with backoff.
ATTEMPTS = 4

#: Options whose values are secrets: never shown in a message, a repr or a log line.
SECRET_KEYS = frozenset({"secret", "key", "token", "password", "account_key", "sas_token", "session_token",
                         "aws_secret_access_key", "aws_session_token", "credentials", "connection_string",
                         "client_secret"})
_SIGNED = re.compile(r"((?:X-Amz-|X-Goog-)?(?:Signature|Credential|Security-Token|sig|se|sp|token|"
                     r"AWSAccessKeyId|Expires)=)[^&\s'\"]+", re.IGNORECASE)

LOCAL_PROTOCOLS = ("file", "local", "")


def is_url(path: Any) -> bool:
    """True for a URL of a store other than the local file system (``s3://b/k``, ``https://h/f``)."""
    if not isinstance(path, str) or "://" not in path:
        return False
    return path.split("://", 1)[0].lower() not in LOCAL_PROTOCOLS


def display_url(url: str) -> str:
    """``url`` as it may be shown: without user info and query string (a signed URL's signature)."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class StorageOptions(Mapping):
    """fsspec ``storage_options``, a read-only mapping whose repr hides secret values.

    ``region`` is taken as S3's region (``client_kwargs.region_name``).
    """

    def __init__(self, options: Mapping[str, Any] | None = None):
        self._options: dict[str, Any] = dict(options or {})
        for k in self._options:
            if not isinstance(k, str):
                raise DataSetException("storage_options keys must be strings")

    def __getitem__(self, key: str) -> Any:
        return self._options[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def secrets(self) -> list[str]:
        """The secret values (strings) among the options, to scrub from text."""
        out: list[str] = []

        def walk(d: Mapping[str, Any]) -> None:
            for k, v in d.items():
                if isinstance(v, Mapping):
                    walk(v)
                elif k.lower() in SECRET_KEYS and isinstance(v, str) and len(v) >= 4:
                    out.append(v)
        walk(self._options)
        return out

    def __repr__(self) -> str:
        shown = {k: ("***" if k.lower() in SECRET_KEYS else v) for k, v in self._options.items()}
        return f"StorageOptions({shown!r})"

    def __reduce__(self):
        return (StorageOptions, (self._options,))

    def __hash__(self) -> int:
        return hash(self.key())

    def key(self) -> tuple:
        """A hashable form (for caching clients per process)."""
        return tuple(sorted((k, repr(v)) for k, v in self._options.items()))


def scrub(text: str, options: StorageOptions | None = None) -> str:
    """``text`` without the options' secret values or signed query parameters."""
    for s in (options.secrets() if options is not None else []):
        text = text.replace(s, "***")
    return _SIGNED.sub(r"\1***", text)


def _fs_kwargs(protocol: str, options: StorageOptions) -> dict[str, Any]:
    """fsspec constructor arguments for ``protocol``: the options, with S3 defaults that bound time."""
    kw = dict(options)
    if protocol in ("s3", "s3a"):
        region = kw.pop("region", None)
        client = dict(kw.pop("client_kwargs", {}) or {})
        if region is not None:
            client.setdefault("region_name", region)
        if client:
            kw["client_kwargs"] = client
        config = dict(kw.pop("config_kwargs", {}) or {})
        config.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        config.setdefault("read_timeout", READ_TIMEOUT_S)
        config.setdefault("retries", {"max_attempts": 2, "mode": "standard"})
        kw["config_kwargs"] = config
    return kw


def zarr_store_options(store: "ObjectStore") -> dict[str, Any]:
    """fsspec arguments for zarr's ``FsspecStore.from_url`` of ``store`` (the same timeouts and region)."""
    return _fs_kwargs(store.protocol, store.options)


_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()


class ObjectStore:
    """An object store (one protocol and its options) and the reads raytile does from it.

    Pickles as ``(protocol, options)``; the fsspec file system is made on
    first use in each process and shared by the stores of equal options.
    """

    def __init__(self, protocol: str, options: Mapping[str, Any] | None = None):
        self.protocol = protocol.lower()
        self.options = options if isinstance(options, StorageOptions) else StorageOptions(options)

    def __reduce__(self):
        return (ObjectStore, (self.protocol, self.options))

    def __repr__(self) -> str:
        return f"ObjectStore({self.protocol!r}, {self.options!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ObjectStore) and other.protocol == self.protocol
                and other.options.key() == self.options.key())

    def __hash__(self) -> int:
        return hash((self.protocol, self.options.key()))

    @property
    def fs(self) -> Any:
        """The fsspec file system (made once per process and options)."""
        k = (self.protocol, self.options.key(), os.getpid())
        fs = _CLIENTS.get(k)
        if fs is None:
            with _CLIENTS_LOCK:
                fs = _CLIENTS.get(k)
                if fs is None:
                    try:
                        import fsspec

                        fs = fsspec.filesystem(self.protocol, **_fs_kwargs(self.protocol, self.options))
                        if hasattr(fs, "retries"):  # s3fs's own retries (5, with sleeps); ours wrap its calls
                            fs.retries = 2
                    except ImportError as e:
                        raise DataSetException(
                            f"reading {self.protocol}:// URLs needs the cloud extra (pip install "
                            f"'raytile[cloud]'): {e}") from None
                    except Exception as e:
                        raise DataSetException(f"{self.protocol}:// store cannot be set up: "
                                               f"{scrub(f'{type(e).__name__}: {e}', self.options)}") from None
                    _CLIENTS[k] = fs
        return fs

    # -- errors ----------------------------------------------------------------
    def error(self, url: str, e: BaseException, doing: str) -> DataSetException:
        """A DataSetException naming ``url`` and what failed, without secrets."""
        shown = display_url(url)
        if isinstance(e, DataSetException):
            return e
        if isinstance(e, FileNotFoundError):
            what = "not found (no such bucket or key)"
        elif isinstance(e, PermissionError):
            what = "access denied (check the credentials in storage_options or the environment)"
        elif _is_timeout(e):
            what = "the store did not answer in time (wrong endpoint_url, or it is down or overloaded?)"
        elif _is_connection(e):
            what = "cannot connect to the store (wrong endpoint_url, or it is down?)"
        else:
            what = "failed"
        detail = scrub(f"{type(e).__name__}: {e}", self.options)
        if len(detail) > 300:
            detail = detail[:300] + "..."
        return DataSetException(f"{shown}: {doing}: {what} ({detail})")

    def call(self, url: str, doing: str, fn: Callable[[], T], attempts: int = ATTEMPTS) -> T:
        """``fn()`` retried with backoff on transient failures, as a DataSetException naming ``url``
        once it fails for good (no new attempt after :data:`RETRY_WINDOW_S`)."""
        deadline = time.monotonic() + RETRY_WINDOW_S
        delay = 0.2
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as e:
                if (attempt + 1 < attempts and _is_transient(e)
                        and time.monotonic() + delay < deadline):
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise self.error(url, e, doing) from None
        raise AssertionError("unreachable")

    def _timeout(self) -> float:
        return REQUEST_TIMEOUT_S

    # -- metadata ----------------------------------------------------------------
    def info(self, url: str) -> dict[str, Any]:
        """The object's metadata (``size``, ``type``, maybe ``ETag``); DataSetException if missing."""
        return self.call(url, "stat", lambda: self.fs.info(url, timeout=self._timeout()))

    def size(self, url: str) -> int:
        info = self.info(url)
        if info.get("type") == "directory":
            raise DataSetException(f"{display_url(url)}: not a file (a prefix or a bucket)")
        return int(info["size"])

    def exists(self, url: str) -> bool:
        return bool(self.call(url, "check", lambda: self.fs.exists(url)))

    def identity(self, url: str) -> tuple:
        """What changes when the object is written again: size and ETag (or mtime)."""
        info = self.info(url)
        return (info.get("size"), str(info.get("ETag", info.get("etag", info.get("LastModified", "")))))

    def glob(self, pattern: str) -> list[str]:
        found = self.call(pattern, "list", lambda: self.fs.glob(pattern))
        return sorted(self.url(p) for p in found)

    def listdir(self, url: str) -> list[dict[str, Any]]:
        """Entries under a prefix: dicts with ``name`` (a full URL), ``type`` and ``size``."""
        entries = self.call(url, "list", lambda: self.fs.ls(url, detail=True))
        return [dict(e, name=self.url(e["name"])) for e in entries]

    def url(self, path: str) -> str:
        """``path`` as a URL of this store (fsspec lists paths without the protocol)."""
        if "://" in path:
            return path
        return f"{self.protocol}://{path}"

    # -- bytes -------------------------------------------------------------------
    def open(self, url: str, block_size: int = 1 << 20) -> "_GuardedFile":
        """A seekable binary file object reading ``url`` by ranged requests of ``block_size``
        (headers, h5py): errors while reading are DataSetExceptions naming the URL."""
        f = self.call(url, "open", lambda: self.fs.open(url, "rb", block_size=block_size, cache_type="readahead"))
        return _GuardedFile(f, self, url)

    def get_range(self, url: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of ``url``: exactly that many (DataSetException if the object is shorter)."""
        data = self.call(url, f"read bytes {start}..{stop}",
                         lambda: self.fs.cat_file(url, start=start, end=stop, timeout=self._timeout()))
        if len(data) != stop - start:
            raise DataSetException(f"{display_url(url)}: short read: wanted bytes {start}..{stop}, got {len(data)} "
                                   f"(object truncated?)")
        return data

    def put_bytes(self, url: str, data: bytes) -> None:
        """Write ``data`` as the object ``url`` (exports)."""
        self.call(url, "write", lambda: self.fs.pipe_file(url, data))

    def fetch(self, requests: Sequence[tuple[str, int, int]], pool: ThreadPoolExecutor | None = None) -> list[bytes]:
        """Bytes of each ``(url, start, stop)``, fetched with several requests in flight."""
        if pool is None or len(requests) <= 1:
            return [self.get_range(u, a, b) for u, a, b in requests]
        futures = [pool.submit(self.get_range, u, a, b) for u, a, b in requests]
        return [f.result() for f in futures]


class _GuardedFile:
    """A file object whose read/seek failures are DataSetExceptions naming the URL."""

    def __init__(self, f: Any, store: ObjectStore, url: str):
        self._f = f
        self._store = store
        self._url = url

    def read(self, n: int = -1) -> bytes:
        return self._store.call(self._url, "read", lambda: self._f.read(n))

    def readinto(self, b: Any) -> int:
        return self._store.call(self._url, "read", lambda: self._f.readinto(b))

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def tell(self) -> int:
        return self._f.tell()

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    @property
    def size(self) -> int:
        return int(self._f.size)

    def close(self) -> None:
        self._f.close()

    @property
    def closed(self) -> bool:
        return bool(self._f.closed)

    def flush(self) -> None:
        pass

    def __enter__(self) -> "_GuardedFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_timeout(e: BaseException) -> bool:
    name = type(e).__name__
    return isinstance(e, TimeoutError) or "Timeout" in name


def _is_connection(e: BaseException) -> bool:
    name = type(e).__name__
    return (isinstance(e, ConnectionError) or "Connect" in name or "Endpoint" in name
            or "Cannot connect" in str(e))


def _is_transient(e: BaseException) -> bool:
    """Worth another try: connection resets, timeouts, throttling and 5xx answers."""
    if isinstance(e, (FileNotFoundError, PermissionError, DataSetException)):
        return False
    if _is_timeout(e) or _is_connection(e):
        return True
    text = str(e)
    return any(s in text for s in ("503", "500", "502", "504", "SlowDown", "Throttl", "InternalError",
                                   "ServiceUnavailable", "reset", "Broken pipe", "IncompleteRead"))


def store_for(path: Any, storage_options: Mapping[str, Any] | None = None) -> ObjectStore | None:
    """The :class:`ObjectStore` of ``path`` (a URL), or None for a local path."""
    if isinstance(path, (list, tuple)):
        stores = {store_for(p, storage_options) for p in path}
        if len(stores) > 1:
            raise DataSetException("files of one data set must all be local or all in one store")
        return stores.pop() if stores else None
    if not is_url(path):
        return None
    return ObjectStore(path.split("://", 1)[0], storage_options)


def open_path(path: str, store: ObjectStore | None = None) -> "BinaryIO | _GuardedFile":
    """``path`` opened for reading: a local file, or a ranged reader of a URL."""
    if store is not None and is_url(path):
        return store.open(path)
    try:
        return open(path, "rb")
    except OSError as e:
        raise DataSetException(f"{path}: cannot open: {e}") from None


def path_size(path: str, store: ObjectStore | None = None) -> int:
    """Bytes of the file or object ``path``."""
    if store is not None and is_url(path):
        return store.size(path)
    try:
        return os.path.getsize(path)
    except OSError as e:
        raise DataSetException(f"{path}: cannot stat: {e}") from None


def check_path_file(path: str, store: ObjectStore | None = None) -> int:
    """The size of ``path``, which must be a regular file or an object (DataSetException naming it)."""
    if store is not None and is_url(path):
        return store.size(path)
    if not os.path.exists(path):
        raise DataSetException(f"file not found: {path}")
    if not os.path.isfile(path):
        raise DataSetException(f"not a regular file: {path}")
    return os.path.getsize(path)


def expand_store_paths(path: Any, store: ObjectStore) -> list[str]:
    """A URL, a URL glob pattern or a list of URLs -> the objects' URLs (each must exist)."""
    if isinstance(path, (list, tuple)):
        urls = [str(p) for p in path]
        if not urls:
            raise DataSetException("the list of files is empty")
    elif any(c in urlsplit(path).path for c in "*?["):
        urls = store.glob(path)
        if not urls:
            raise DataSetException(f"no objects match the pattern {display_url(path)}")
    else:
        urls = [path]
    for u in urls:
        store.size(u)
    return urls
