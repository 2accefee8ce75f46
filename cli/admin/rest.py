"""``horae-admin``'s one HTTP exchange: a :class:`Request` sent, its answer decoded.

Theory of operation: :func:`call` sends a :class:`Request` (method, path, optional JSON body)
with urllib (stdlib only, so the CLI starts fast and needs nothing but Python), adding the
credentials and TLS context of :class:`cli.admin.auth.AdminAuth`. It returns decoded
JSON, text, or None for an empty answer (204); an error status raises :class:`HttpError`
carrying the server's ``reason``; an unreachable server raises urllib's URLError / OSError.
Used by :mod:`cli.admin.main` only.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from cli.admin.auth import AdminAuth

__all__ = ["TIMEOUT_S", "HttpError", "RawAnswer", "Request", "call", "call_raw"]

TIMEOUT_S = 30.0


class HttpError(Exception):
    """The server answered with an error status: exit code 1."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    body: object = None
    has_body: bool = False


@dataclass(frozen=True, slots=True)
class RawAnswer:
    """An answer as sent: its headers (names as the server wrote them) and body bytes."""
    headers: dict[str, str]
    body: bytes


def call_raw(admin_url: str, req: Request, auth: AdminAuth | None = None) -> RawAnswer:
    """Send ``req``; return the answer undecoded (a message's payload and its ``X-Pulsar-*``
    headers). Raises HttpError/OSError as :func:`call` does."""
    url = admin_url.rstrip("/") + req.path
    headers = {**(auth.headers if auth is not None else {})}
    request = urllib.request.Request(url, method=req.method, headers=headers)
    context = auth.ssl_context if auth is not None and url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as resp:
            return RawAnswer(dict(resp.headers.items()), resp.read())
    except urllib.error.HTTPError as exc:
        raise HttpError(exc.code, _reason(exc.read(), exc.reason)) from None


def call(admin_url: str, req: Request, auth: AdminAuth | None = None) -> object:
    """Send ``req``; return the decoded answer (None for 204). Raises HttpError/OSError."""
    url = admin_url.rstrip("/") + req.path
    data = json.dumps(req.body).encode() if req.has_body else None
    headers = {"Accept": "application/json", **(auth.headers if auth is not None else {})}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=req.method, headers=headers)
    context = auth.ssl_context if auth is not None and url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as resp:
            raw = resp.read()
            ctype = resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        raise HttpError(exc.code, _reason(exc.read(), exc.reason)) from None
    if not raw:
        return None
    if "json" in ctype:
        return json.loads(raw)
    return raw.decode(errors="replace")


def _reason(raw: bytes, fallback: object) -> str:
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip() or str(fallback)
    if isinstance(doc, dict) and "reason" in doc:
        return str(doc["reason"])
    return raw.decode(errors="replace").strip() or str(fallback)
