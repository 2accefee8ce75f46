"""Limits with Pulsar's names: connections per broker and per IP, producers and consumers per
topic and per subscription.

Theory of operation
-------------------
The server (:class:`broker.server.BrokerServer`) asks :meth:`ConnectionLimiter.admit` for every
accepted TCP connection, before anything is read from it, and calls
:meth:`ConnectionLimiter.release` exactly once for each admitted one when it closes. A refused
connection is closed at once without a reply, as Pulsar's ConnectionController does (no
command is possible before CONNECT). ``0`` means no limit. Counts are plain integers on the
event loop; nothing here blocks or allocates per byte.

:func:`check_producers` and :func:`check_consumers` are called by the PRODUCER and SUBSCRIBE
handlers before a producer or consumer is attached (``maxProducersPerTopic``,
``maxConsumersPerTopic``, ``maxConsumersPerSubscription``; 0 = no limit) and raise Pulsar's
errors: ProducerBusy "Topic reached max producers limit", ConsumerBusy "Topic reached max
consumers limit" / "Subscription reached max consumers limit". The request fails; the
connection stays.
"""

from __future__ import annotations

from collections import Counter

from protocol.errors import ConsumerBusyError, ProducerBusyError

__all__ = ["ConnectionLimiter", "check_consumers", "check_producers"]


def check_producers(current: int, limit: int) -> None:
    if 0 < limit <= current:
        raise ProducerBusyError("Topic reached max producers limit")


def check_consumers(on_topic: int, on_subscription: int, per_topic: int,
                    per_subscription: int) -> None:
    if 0 < per_topic <= on_topic:
        raise ConsumerBusyError("Topic reached max consumers limit")
    if 0 < per_subscription <= on_subscription:
        raise ConsumerBusyError("Subscription reached max consumers limit")


class ConnectionLimiter:
    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self._max = max_connections
        self._max_per_ip = max_per_ip
        self._total = 0
        self._per_ip: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return self._total

    def refusal(self, ip: str) -> str | None:
        """Why a new connection from *ip* is refused, or None (then it is counted)."""
        if self._max > 0 and self._total >= self._max:
            return f"Reached the maximum number of connections {self._max}"
        if self._max_per_ip > 0 and self._per_ip[ip] >= self._max_per_ip:
            return f"Reached the maximum number of connections {self._max_per_ip} from {ip}"
        self._total += 1
        self._per_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self._total -= 1
        left = self._per_ip[ip] - 1
        if left > 0:
            self._per_ip[ip] = left
        else:
            del self._per_ip[ip]
