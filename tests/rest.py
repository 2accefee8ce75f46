"""One REST call for tests that talk to a broker's admin API: (status, decoded JSON or None).

Errors are answers here, not exceptions: a 4xx/5xx returns its status and its decoded
``{"reason": ...}`` body, so a test asserts on both.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def http_json(base: str, method: str, path: str, raw: bytes | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(base + path, data=raw, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read()
    return status, json.loads(payload) if payload else None
