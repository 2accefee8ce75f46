"""``horae-admin`` argument values: topic and namespace names, durations, sizes, message ids.

Theory of operation: pure functions from command-line text to the values and URL path parts
the REST API wants; bad text raises :class:`UsageError` (exit code 2, as argparse's own
errors). A command is a :data:`Builder` (parsed arguments -> :class:`Request`). Topic arguments
accept short names ("t" is persistent://public/default/t, "tenant/ns/t" too). Durations are
``500ms``, ``30s``, ``10m``, ``1h``, ``2d``, ``1w`` (a bare number is seconds); sizes ``100``,
``512k``, ``10M``, ``1G`` (``-1`` is unlimited). Used by :mod:`cli.admin.main` and
:mod:`cli.admin.policies`; no I/O.
"""

from __future__ import annotations

import argparse
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from cli.admin.rest import Request

__all__ = ["DOMAINS", "Builder", "UsageError", "namespace_path", "non_negative_int",
           "parse_duration_ms", "parse_ledger_entry", "parse_message_id", "parse_size_bytes",
           "parse_triplet", "q", "topic_base", "topic_path"]

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
            "w": 604_800_000, "y": 31_536_000_000, None: 1000}
_SIZE = re.compile(r"^\s*(-?\d+)\s*([kmgt])?\s*$", re.IGNORECASE)
_SIZE_UNIT = {None: 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
DOMAINS = ("persistent", "non-persistent")


class UsageError(Exception):
    """Bad command-line input: exit code 2."""




Builder = Callable[[Any], Request]
"""A command: parsed arguments -> the request it sends."""


def q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def parse_duration_ms(text: str) -> int:
    """"500ms" -> 500, "30s" -> 30000, "10m", "1h", "2d", "1w", "1y"; a bare number is
    seconds. Negative durations read as pulsar-admin's (``-1`` is -1000); each command
    decides what a negative value means or refuses it."""
    m = _DURATION.match(text)
    if m is None:
        raise UsageError(f"invalid duration {text!r} (examples: 500ms, 30s, 10m, 1h, 2d)")
    unit = m.group(2).lower() if m.group(2) else None
    return int(float(m.group(1)) * _UNIT_MS[unit])


def parse_size_bytes(text: str) -> int:
    """pulsar-admin sizes: "10M" -> 10485760, "1G", "512k", "100" bytes; "-1" is unlimited."""
    m = _SIZE.match(text)
    if m is None:
        raise UsageError(f"invalid size {text!r} (examples: 100, 512k, 10M, 1G, -1)")
    value = int(m.group(1))
    if value < 0:
        if value != -1 or m.group(2):
            raise UsageError(f"invalid size {text!r}: -1 (unlimited) is the only negative value")
        return -1
    return value * _SIZE_UNIT[m.group(2).lower() if m.group(2) else None]


def _split_topic(topic: str) -> tuple[str, str]:
    name = topic.strip()
    if "://" in name:
        domain, rest = name.split("://", 1)
        if domain not in DOMAINS:
            raise UsageError(f"invalid topic domain {domain!r} in {topic!r}")
    elif "/" in name:
        domain, rest = "persistent", name
    else:
        domain, rest = "persistent", f"public/default/{name}"
    parts = rest.split("/")
    if len(parts) != 3 or not all(parts):
        raise UsageError(f"invalid topic name {topic!r}: use 'name', 'tenant/namespace/name' "
                         "or 'persistent://tenant/namespace/name'")
    return domain, "/".join(q(p) for p in parts)


def topic_path(topic: str) -> str:
    """A topic argument -> "tenant/ns/local" (URL-quoted), persistent topics only."""
    domain, path = _split_topic(topic)
    if domain != "persistent":
        raise UsageError(f"only persistent topics are supported, not {topic!r}")
    return path


def topic_base(topic: str) -> str:
    """A topic argument (either domain) -> "/admin/v2/{domain}/tenant/ns/local"."""
    domain, path = _split_topic(topic)
    return f"/admin/v2/{domain}/{path}"


def namespace_path(namespace: str) -> str:
    parts = namespace.strip().split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"invalid namespace {namespace!r}: use 'tenant/namespace'")
    return "/".join(q(p) for p in parts)


def parse_message_id(text: str) -> tuple[int, int, int | None]:
    """"L:E" or "L:E:B" -> (ledger, entry, batch or None)."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 2:
            return int(parts[0]), int(parts[1]), None
        if len(parts) == 3:
            return int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        pass
    raise UsageError(f"invalid message id {text!r}: use ledgerId:entryId[:batchIndex]")


def parse_triplet(text: str) -> tuple[int, int, int | None]:
    """PIP-423's ``--messageId-triplet ledgerId:entryId:batchIndex`` -> (ledger, entry, batch
    or None for a negative batchIndex); exactly three parts, ledger and entry >= 0."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 3 and int(parts[0]) >= 0 and int(parts[1]) >= 0:
            batch = int(parts[2])
            return int(parts[0]), int(parts[1]), batch if batch >= 0 else None
    except ValueError:
        pass
    raise UsageError(f"invalid message id triplet {text!r}: use ledgerId:entryId:batchIndex "
                     "(batchIndex -1: the whole entry)")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (a count)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def parse_ledger_entry(text: str) -> tuple[int, int, int | None]:
    """PIP-423's ``-m ledgerId=entryId`` -> (ledger, entry, None); both >= 0."""
    ledger, sep, entry = text.strip().partition("=")
    try:
        if sep and int(ledger) >= 0 and int(entry) >= 0:
            return int(ledger), int(entry), None
    except ValueError:
        pass
    raise UsageError(f"invalid message id {text!r}: use ledgerId=entryId")
