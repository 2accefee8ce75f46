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

    def _route(self, position: Position, info: EntryInfo | None, sticky_hash: int,
               from_replay: bool, blocked: set[int]) -> Consumer | None:
        consumers = self.consumers
        n = len(consumers)
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
