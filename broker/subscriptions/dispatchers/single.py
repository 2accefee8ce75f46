"""Exclusive and Failover: one active consumer receives everything, in order.

Theory of operation
-------------------
Exclusive admits one consumer (the subscription refuses a second with ConsumerBusy). Failover
admits many and picks the active one like Pulsar's single-active-consumer dispatcher: consumers
sorted by priority level, then name; on a partition ``partition_index % n`` of that order spreads
partitions over consumers (when no consumer asks for a priority), else the first. Every change of
the active consumer hands the previous active consumer's unacknowledged messages back for
redelivery (Pulsar rewinds the cursor), so nothing is lost and order is kept (replays go first),
and sends ACTIVE_CONSUMER_CHANGE to each consumer whose state changed. On Failover both the
notifications and the dispatch to the new active consumer wait ``activeConsumerFailoverDelayTimeMillis``
(Pulsar's 1 s by default; changes meanwhile share that one wait): the old active consumer has time
to see it is no longer active before its messages go elsewhere, and a client gets its
notification after its SUCCESS, once it has registered the consumer (the Go client drops an
ACTIVE_CONSUMER_CHANGE that comes before). Delayed messages are delivered
at once (``deliver_at_time`` is ignored), as in Pulsar.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from broker.subscriptions.dispatchers.base import DispatchContext, Dispatcher
from protocol.metadata import EntryInfo
from protocol.sub_types import SubType
from storage.positions import Position

if TYPE_CHECKING:
    from broker.subscriptions.consumer import Consumer

__all__ = ["SingleActiveDispatcher"]


class SingleActiveDispatcher(Dispatcher):
    def __init__(self, sub: DispatchContext, sub_type: SubType, failover_delay_s: float = 0.0) -> None:
        super().__init__(sub)
        self.sub_type = sub_type
        self.active: Consumer | None = None
        self._failover_delay_s = failover_delay_s if sub_type == SubType.Failover else 0.0
        self._switching: asyncio.TimerHandle | None = None  # a Failover change waiting its delay

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._pick_active(joining=consumer)
        self.schedule()

    def after_subscribe(self, consumer: Consumer) -> None:
        if self.sub_type == SubType.Failover and self._switching is None:
            consumer.notify_active(consumer is self.active)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.hand_back(consumer, None, count_redelivery=False)
        if consumer is self.active:
            self.active = None
        self._pick_active(joining=None)
        self.schedule()

    def _pick_active(self, *, joining: Consumer | None) -> None:
        if not self.consumers:
            self.active = None
            return
        ordered = sorted(self.consumers, key=lambda c: (c.priority_level, c.name))
        partition = self.sub.partition_index
        if partition >= 0 and not any(c.priority_level for c in ordered):
            chosen = ordered[partition % len(ordered)]
        else:
            chosen = ordered[0]
        previous = self.active
        if chosen is previous:
            return
        self.active = chosen
        if previous is not None and previous in self.consumers:
            # The new active consumer gets everything the old one has not acknowledged.
            self.hand_back(previous, None, count_redelivery=False)
        if self.sub_type != SubType.Failover:
            return
        if self._failover_delay_s > 0:
            if self._switching is None:
                self._switching = asyncio.get_running_loop().call_later(
                    self._failover_delay_s, self._switched)
            return
        for c in self.consumers:
            if c is not joining:  # a joining consumer is told after its SUCCESS
                c.notify_active(c is chosen)

    def _switched(self) -> None:
        """The Failover delay is over: tell every consumer, feed the active one."""
        self._switching = None
        for c in self.consumers:
            c.notify_active(c is self.active)
        self.schedule()

    async def close(self) -> None:
        if self._switching is not None:
            self._switching.cancel()
            self._switching = None
        await super().close()

    def _budget(self) -> int:
        active = self.active
        if active is None or self._switching is not None or not active.available:
            return 0
        return active.permits

    def _route(self, position: Position, info: EntryInfo | None, sticky_hash: int,
               from_replay: bool, blocked: set[int]) -> Consumer | None:
        active = self.active
        if self._switching is not None:
            return None
        return active if active is not None and active.available else None
