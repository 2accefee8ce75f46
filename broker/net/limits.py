"""Connection limits with Pulsar's names: connections per broker and per IP.

Theory of operation
-------------------
The server (:class:`broker.server.BrokerServer`) asks :meth:`ConnectionLimiter.admit` for every
accepted TCP connection, before anything is read from it, and calls
:meth:`ConnectionLimiter.release` exactly once for each admitted one when it closes. A refused
connection is closed at once without a reply, as Pulsar's ConnectionController does (no
command is possible before CONNECT). ``0`` means no limit. Counts are plain integers on the
event loop; nothing here blocks or allocates per byte.

The producer and consumer limits (``maxProducersPerTopic``, ``maxConsumersPerTopic``,
``maxConsumersPerSubscription``) are decided where a producer or consumer is registered, in
the same event-loop step: :meth:`broker.topics.access_modes.ProducerAdmission.add` and
:mod:`broker.subscriptions.limits`.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["ConnectionLimiter"]


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
