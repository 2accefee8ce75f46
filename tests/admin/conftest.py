"""Helpers for the admin tests: a tiny JSON-over-HTTP client for the broker's web port."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any          # decoded JSON, text, or None for an empty body
    content_type: str

    @property
    def reason(self) -> str | None:
        return self.body.get("reason") if isinstance(self.body, dict) else None


def http(base_url: str, method: str, path: str, body: Any = None, *,
         raw: bytes | None = None) -> Reply:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            status, payload, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        status, payload, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
    decoded: Any = None
    if payload:
        decoded = json.loads(payload) if "json" in ctype else payload.decode()
    return Reply(status, decoded, ctype)


Api = Callable[..., Reply]


@pytest.fixture
def api(broker: Any) -> Api:
    """``api(method, path, body=None)`` against the ``broker`` fixture's web port."""

    def call(method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> Reply:
        return http(broker.web_url, method, path, body, raw=raw)

    return call


ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 30.0


class Cli:
    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli.admin", "--admin-url", self.admin_url, *args],
            cwd=ROOT, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)

    def ok(self, *args: str) -> Any:
        """Run, require exit 0, return the printed JSON (or None when nothing printed)."""
        proc = self.run(*args)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        out = proc.stdout.strip()
        if not out:
            return None
        try:
            return json.loads(out)
        except ValueError:
            return out


@pytest.fixture
def cli(broker: Any) -> Cli:
    return Cli(broker.web_url)
