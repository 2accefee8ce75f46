"""Helpers for the consumer-side tests (official client against an in-process broker)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pulsar

_names = itertools.count()


def topic_name(prefix: str = "t") -> str:
    """A fresh topic name per call (tests share nothing)."""
    return f"persistent://public/default/{prefix}-{next(_names)}-{int(time.time() * 1000)}"


def receive_all(consumer: Any, count: int, *, timeout_ms: int = 5000,
                ack: bool = True) -> list[Any]:
    """Receive exactly ``count`` messages (each within ``timeout_ms``), acking them."""
    out = []
    for _ in range(count):
        msg = consumer.receive(timeout_ms)
        out.append(msg)
        if ack:
            consumer.acknowledge(msg)
    return out


def receive_none(consumer: Any, timeout_ms: int = 300) -> bool:
    """True when nothing arrives within ``timeout_ms``."""
    try:
        consumer.receive(timeout_ms)
    except pulsar.Timeout:
        return True
    return False


def drain(consumers: list[Any], *, idle_ms: int = 500,
          on_message: Callable[[Any, Any], None] | None = None,
          limit: int = 100_000) -> Iterator[tuple[Any, Any]]:
    """Round-robin over consumers until none of them gets anything for ``idle_ms``."""
    idle_since = time.monotonic()
    for _ in range(limit):
        got = False
        for c in consumers:
            try:
                msg = c.receive(20)
            except pulsar.Timeout:
                continue
            got = True
            yield c, msg
        if got:
            idle_since = time.monotonic()
        elif (time.monotonic() - idle_since) * 1000 > idle_ms:
            return
