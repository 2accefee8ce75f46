"""Helpers for the consumer-side tests (official client against an in-process broker)."""

from __future__ import annotations

import itertools
import threading
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


class Collector:
    """Consumers with a message listener that acks and records every message.

    The client runs listeners on one thread, so ``received`` is in the order the messages were
    handed to the application, across consumers.
    """

    def __init__(self, *, ack: bool = True, work_s: float = 0.0) -> None:
        self.ack = ack
        self.work_s = work_s  # simulated processing time: lets receiver queues fill up
        self.received: list[tuple[Any, Any, int]] = []  # (consumer, message, receipt ms)
        self._cond = threading.Condition()

    def listener(self, consumer: Any, msg: Any) -> None:
        if self.work_s:
            time.sleep(self.work_s)
        if self.ack:
            consumer.acknowledge(msg)
        with self._cond:
            self.received.append((consumer, msg, int(time.time() * 1000)))
            self._cond.notify_all()

    def subscribe(self, client: Any, topic: str, sub: str, **kw: Any) -> Any:
        return client.subscribe(topic, sub, message_listener=self.listener, **kw)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> bool:
        """Wait until at least ``count`` messages were received."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.received) >= count, timeout_s)

    def wait_until(self, done: Callable[[list[tuple[Any, Any, int]]], bool],
                   timeout_s: float = 30.0) -> bool:
        """Wait until ``done(received)`` holds (checked after each arrival)."""
        with self._cond:
            return self._cond.wait_for(lambda: done(self.received), timeout_s)

    def wait_idle(self, idle_ms: int = 500, timeout_s: float = 20.0) -> None:
        """Wait until nothing has arrived for ``idle_ms``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while time.monotonic() < deadline:
                before = len(self.received)
                self._cond.wait(idle_ms / 1000)
                if len(self.received) == before:
                    return
