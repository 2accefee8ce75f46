"""Reading secrets named by a config value: ``data:``, ``file:``, ``env:``, a path or base64.

Theory of operation
-------------------
Pulsar names keys and password files by a URL-ish string (``tokenSecretKey``,
``tokenPublicKey``, ``basicAuthConf``). :func:`read_secret` turns one into bytes, trying the
same forms Pulsar does, in the same order:

1. ``data:[<mediatype>][;base64],<data>`` (RFC 2397; ``data:;base64,AAAA`` is what
   ``pulsar tokens create-secret-key --base64`` users paste), percent-decoded when not base64;
2. ``file:///abs/path`` or ``file:rel/path``;
3. ``env:NAME``: the environment variable's text, as bytes (not decoded: an htpasswd file
   or a PEM key is text; put a binary key in ``data:;base64,`` form instead);
4. an existing file path;
5. plain base64 text.

Anything else is a :class:`SecretSourceError` naming the *setting* (never echoing the value,
which may be a secret). Reading a file is blocking IO: callers run this at start-up or from a
worker thread, never on the event loop.
"""

from __future__ import annotations

import base64
import binascii
import os
import pathlib
import urllib.parse

from broker.security.errors import SecurityConfigError

__all__ = ["SecretSourceError", "read_secret"]


class SecretSourceError(SecurityConfigError):
    """A secret's config value cannot be read; the message names the setting."""


def _b64decode(text: str) -> bytes:
    cleaned = "".join(text.split())
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        # the URL-safe alphabet; raises binascii.Error when not base64 either
        return base64.b64decode(cleaned, altchars=b"-_", validate=True)


def _read_data_url(value: str, setting: str) -> bytes:
    header, sep, payload = value[len("data:"):].partition(",")
    if not sep:
        raise SecretSourceError(f"{setting}: a data: URL needs a ',' before its data")
    if header.split(";")[-1].strip().lower() == "base64":
        try:
            return _b64decode(payload)
        except (binascii.Error, ValueError):
            raise SecretSourceError(f"{setting}: the data: URL is not valid base64") from None
    return urllib.parse.unquote_to_bytes(payload)


def _read_file(path: pathlib.Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SecretSourceError(f"{setting}: cannot read {str(path)!r}: {exc.strerror}") from None


def read_secret(value: str, *, setting: str) -> bytes:
    """The bytes named by *value* (see the module doc). Blocking: reads files."""
    value = value.strip()
    if not value:
        raise SecretSourceError(f"{setting} is empty")
    if value.startswith("data:"):
        return _read_data_url(value, setting)
    if value.startswith("file:"):
        parsed = urllib.parse.urlparse(value)
        if parsed.netloc not in ("", "localhost"):
            raise SecretSourceError(f"{setting}: file: URLs must name a local file")
        return _read_file(pathlib.Path(urllib.parse.unquote(parsed.path)), setting)
    if value.startswith("env:"):
        name = value[len("env:"):]
        env_value = os.environ.get(name)
        if env_value is None:
            raise SecretSourceError(f"{setting}: environment variable {name!r} is not set")
        return env_value.encode()
    path = pathlib.Path(value)
    if path.is_file():
        return _read_file(path, setting)
    try:
        return _b64decode(value)
    except (binascii.Error, ValueError):
        raise SecretSourceError(
            f"{setting}: not a data:, file: or env: value, an existing file or base64") from None
