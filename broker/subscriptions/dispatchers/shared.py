"""Shared: entries go round robin to consumers that have permits.

Theory of operation
-------------------
Consumers with the best (lowest) priority level that still have permits are served first, round
robin among them, like Pulsar's PersistentDispatcherMultipleConsumers. Each message sent is
pending on its consumer until acked; a consumer that leaves or asks for redelivery hands its
pending messages back to the replay set (redelivery asked by the client increments
``redelivery_count``). Delayed messages are held back by the delayed delivery it is given
(base class).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.delayed.delivery import DelayedDelivery
from broker.subscriptions.dispatchers.base import DispatchContext, Dispatcher
from protocol.metadata import EntryInfo
from protocol.sub_types import SubType
from storage.positions import Position

if TYPE_CHECKING:
    from broker.subscriptions.consumer import Consumer

__all__ = ["SharedDispatcher"]


class SharedDispatcher(Dispatcher):
    sub_type = SubType.Shared

    def __init__(self, sub: DispatchContext, delayed: DelayedDelivery) -> None:
        super().__init__(sub, delayed)
        self._next = 0
        #: every consumer has the same priority level (None: look again, the consumers changed)
        self._one_level: bool | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        self._one_level = None
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self._one_level = None
        super().remove_consumer(consumer)

    def _route(self, position: Position, info: EntryInfo | None, sticky_hash: int,
               from_replay: bool, blocked: set[int]) -> Consumer | None:
        consumers = self.consumers
        n = len(consumers)
        if self._one_level is None:
            self._one_level = len({c.priority_level for c in consumers}) <= 1
        if self._one_level and n:
            # one priority level (the usual case): the first available consumer in round-robin
            # order is the one the scan below picks; most often the next one in turn is
            start = self._next
            if start < n:
                c = consumers[start]
                if c.permits > 0 and not c.blocked_on_unacked and not c.closed \
                        and not c.side.writes_paused:
                    self._next = start + 1 if start + 1 < n else 0
                    return c
            start %= n
            for step in range(n):
                i = start + step
                if i >= n:
                    i -= n
                c = consumers[i]
                # Consumer.available, spelled out: one property hop fewer per message
                if c.permits > 0 and not c.blocked_on_unacked and not c.closed \
                        and not c.side.writes_paused:
                    self._next = i + 1 if i + 1 < n else 0
                    return c
            return None
        best: Consumer | None = None
        best_index = 0
        for step in range(n):
            i = (self._next + step) % n
            c = consumers[i]
            if c.permits > 0 and (best is None or c.priority_level < best.priority_level) \
                    and c.available:
                best = c
                best_index = i
        if best is not None:
            self._next = (best_index + 1) % n
        return best
