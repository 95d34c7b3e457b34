"""A tiny keep-alive HTTP client for the loopback tests (the standard library's http.client)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlparse


class Client:
    def __init__(self, base_url: str, timeout_s: float = 30.0):
        address = urlparse(base_url)
        self.connection = http.client.HTTPConnection(address.hostname, address.port, timeout=timeout_s)

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        """(status, headers as a lowercase dict, parsed JSON or text)."""
        self.connection.request(method, path, body=body, headers=headers or {})
        response = self.connection.getresponse()
        raw = response.read()
        response_headers = {key.lower(): value for key, value in response.getheaders()}
        if response_headers.get("content-type", "").startswith("application/json"):
            return response.status, response_headers, json.loads(raw)
        return response.status, response_headers, raw.decode()

    def predict(self, payload):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return self.request("POST", "/v1/predict", body, {"content-type": "application/json"})

    def close(self):
        self.connection.close()
