"""The broker's log output: one ``horae.*`` logger tree, as text lines or JSON objects.

Theory of operation
-------------------
Every Horae module logs to a logger under ``horae`` (``horae.server``, ``horae.storage``,
``horae.http.access``...). :func:`configure_logging` is called once by ``horae serve`` after the
config is loaded: it puts one stream handler on the root logger (so third-party libraries such
as aiohttp are formatted alike) with either the text format or :class:`JsonFormatter`, and sets
the ``horae`` tree's level. Nothing here touches the network or disk beyond the stream; only the
process entry point may call :func:`configure_logging`.

The HTTP access log (:class:`HttpAccessLogger`, handed to aiohttp's AppRunner by the server)
writes one INFO record per request to ``horae.http.access``: a Common-Log-like message plus the
fields ``remote``, ``method``, ``path``, ``status``, ``bytes`` and ``duration_ms``.

A JSON line carries ``ts`` (UTC, RFC 3339 with milliseconds), ``level``, ``logger``, ``msg``
(the formatted message), ``exc`` when an exception is attached, and any ``extra={...}`` fields
the call site passed (the HTTP access log passes method, path, status...).
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import IO, Final

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

__all__ = ["ACCESS_LOGGER", "ROOT_LOGGER", "TEXT_FORMAT", "HttpAccessLogger", "JsonFormatter",
           "configure_logging"]

ROOT_LOGGER: Final = "horae"
ACCESS_LOGGER: Final = "horae.http.access"
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: LogRecord attributes that are not call-site ``extra`` fields.
_STANDARD_ATTRS: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out: dict[str, object] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, default=str, ensure_ascii=False)


class HttpAccessLogger(AbstractAccessLogger):
    """One record per HTTP request (aiohttp calls :meth:`log` after the response is sent)."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        remote = request.remote or "-"
        size = response.body_length
        self.logger.info(
            '%s "%s %s HTTP/%d.%d" %d %d %.1fms', remote, request.method, request.path_qs,
            request.version.major, request.version.minor, response.status, size, time * 1000,
            extra={"remote": remote, "method": request.method, "path": request.path,
                   "status": response.status, "bytes": size,
                   "duration_ms": round(time * 1000, 3)})

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)


def configure_logging(level: str, log_format: str, stream: IO[str] | None = None) -> None:
    """Send every record to *stream* (stderr) as *log_format* ('text' or 'json') lines."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    elif log_format == "text":
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    else:
        raise ValueError(f"log format must be 'text' or 'json', not {log_format!r}")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)   # third-party libraries: warnings and errors
    logging.getLogger(ROOT_LOGGER).setLevel(level)   # a level name: DEBUG, INFO, ...
