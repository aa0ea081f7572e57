"""`SimplonClient`: the DECTRIS SIMPLON REST API (``/detector/api/<version>/...``), with the stdlib.

Configuration values are read with GET and written with PUT of
``{"value": v}``; commands (``arm``, ``trigger``, ``disarm``, ...) are PUT
to ``command/<name>``, and ``arm`` answers ``{"sequence id": S}``, the
series id the stream's messages carry. The camelCase aliases are the names
of DECTRIS' ``DEigerClient`` that LiberTEM-live's scripts call.

>>> ec = SimplonClient("127.0.0.1", 8910)                              # doctest: +SKIP
>>> ec.set_detector_config("nimages", 1024); ec.send_detector_command("arm")["sequence id"]
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from raytile.common.errors import AcquisitionError

__all__ = ["SimplonClient", "API_VERSION"]

API_VERSION = "1.8.0"


class SimplonClient:
    """REST client of a DECTRIS DCU at ``host:port`` (``timeout`` seconds a request)."""

    def __init__(self, host: str, port: int = 80, version: str = API_VERSION, timeout: float = 10.0):
        self.host, self.port, self.version, self.timeout = host, port, version, timeout

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        url = f"http://{self.host}:{self.port}/{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read()
        except urllib.error.HTTPError as e:
            raise AcquisitionError(f"SIMPLON {method} {url}: HTTP {e.code}: {e.read()[:200]!r}") from None
        except (urllib.error.URLError, OSError) as e:
            raise AcquisitionError(f"SIMPLON {method} {url}: {e}") from None
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text.decode("utf-8", "replace")

    def detector_config(self, name: str) -> dict:
        """``{"value": ..., "value_type": ...}`` of a detector configuration parameter."""
        return self._request("GET", f"detector/api/{self.version}/config/{name}")

    def detector_value(self, name: str) -> Any:
        reply = self.detector_config(name)
        if not isinstance(reply, dict) or "value" not in reply:
            raise AcquisitionError(f"SIMPLON {self.host}:{self.port}: config/{name} answered {reply!r}")
        return reply["value"]

    def set_detector_config(self, name: str, value: Any) -> Any:
        return self._request("PUT", f"detector/api/{self.version}/config/{name}", {"value": value})

    def send_detector_command(self, name: str, value: Any = None) -> Any:
        return self._request("PUT", f"detector/api/{self.version}/command/{name}",
                             None if value is None else {"value": value})

    def stream_config(self, name: str) -> Any:
        """A stream configuration parameter as the DCU answers it (``{"value": ...}``)."""
        return self._request("GET", f"stream/api/{self.version}/config/{name}")

    def set_stream_config(self, name: str, value: Any) -> Any:
        return self._request("PUT", f"stream/api/{self.version}/config/{name}", {"value": value})

    def set_filewriter_config(self, name: str, value: Any) -> Any:
        return self._request("PUT", f"filewriter/api/{self.version}/config/{name}", {"value": value})

    # DEigerClient's names, as LiberTEM-live's examples call them
    detectorConfig = detector_config
    setDetectorConfig = set_detector_config
    sendDetectorCommand = send_detector_command
    streamConfig = stream_config
    setStreamConfig = set_stream_config
    setFileWriterConfig = set_filewriter_config
