"""``horae-admin`` argument values: topic and namespace names, durations, message ids.

Theory of operation: pure functions from command-line text to the values and URL path parts
the REST API wants; bad text raises :class:`UsageError` (exit code 2, as argparse's own
errors). Topic arguments accept short names ("t" is persistent://public/default/t,
"tenant/ns/t" too). Durations are ``500ms``, ``30s``, ``10m``, ``1h``, ``2d``, ``1w`` (a bare
number is seconds). Used by :mod:`broker.admin.cli` only; no I/O.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["UsageError", "namespace_path", "parse_duration_ms", "parse_ledger_entry",
           "parse_message_id", "topic_path"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
            "w": 604_800_000, None: 1000}


class UsageError(Exception):
    """Bad command-line input: exit code 2."""


def parse_duration_ms(text: str) -> int:
    """"500ms" -> 500, "30s" -> 30000, "10m", "1h", "2d", "1w"; a bare number is seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise UsageError(f"invalid duration {text!r} (examples: 500ms, 30s, 10m, 1h, 2d)")
    unit = m.group(2).lower() if m.group(2) else None
    return int(float(m.group(1)) * _UNIT_MS[unit])


def topic_path(topic: str) -> str:
    """A topic argument -> "tenant/ns/local" (URL-quoted), persistent topics only."""
    name = topic.strip()
    if "://" in name:
        domain, rest = name.split("://", 1)
        if domain != "persistent":
            raise UsageError(f"only persistent topics are supported, not {topic!r}")
    elif "/" in name:
        rest = name
    else:
        rest = f"public/default/{name}"
    parts = rest.split("/")
    if len(parts) != 3 or not all(parts):
        raise UsageError(f"invalid topic name {topic!r}: use 'name', 'tenant/namespace/name' "
                         "or 'persistent://tenant/namespace/name'")
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


def namespace_path(namespace: str) -> str:
    parts = namespace.strip().split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"invalid namespace {namespace!r}: use 'tenant/namespace'")
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


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


def parse_ledger_entry(text: str) -> tuple[int, int, int | None]:
    """PIP-423's ``-m ledgerId=entryId`` -> (ledger, entry, None); both >= 0."""
    ledger, sep, entry = text.strip().partition("=")
    try:
        if sep and int(ledger) >= 0 and int(entry) >= 0:
            return int(ledger), int(entry), None
    except ValueError:
        pass
    raise UsageError(f"invalid message id {text!r}: use ledgerId=entryId")
