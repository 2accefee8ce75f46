"""Key_Shared: every sticky key goes to one consumer, in order, even as consumers come and go.

Theory of operation
-------------------
The selector (:mod:`broker.subscriptions.selectors`, chosen by the topic with the broker's
settings) maps an entry's hash slot to a consumer: consistent hashing or hash-range splitting for
AUTO_SPLIT, declared ranges for STICKY. Ordering across ownership changes follows
Pulsar 4's "draining hashes" rule (PIP-379), which replaced the older "recently joined consumers"
rule: ``hash_owner`` counts, per hash slot, the messages pending on the consumer that received
them. While a slot still has messages pending on consumer A, a message of that slot is not sent
to a different consumer B (the slot moved to B when B joined); it waits in the replay set until A
acknowledges or hands back its messages. Unlike the recently-joined rule this blocks only the
moved slots, never a whole consumer, and a delayed message sitting in the tracker is pending on
nobody, so it can never stall anyone (the stalls of Pulsar issues apache/pulsar#15397 and #8703).

Within a round, once a slot is blocked every later entry of that slot is blocked too, and a fresh
entry whose slot already has entries waiting in the replay set waits behind them: per-key order is
kept. Replays (redeliveries, due delayed messages) go first. A consumer with
``allowOutOfOrderDelivery`` skips the draining rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.delayed.delivery import DelayedDelivery
from broker.subscriptions.dispatchers.base import DispatchContext, Dispatcher
from broker.subscriptions.selectors import ConsistentHashingSelector, KeySharedSelector
from protocol.metadata import EntryInfo
from protocol.sub_types import SubType
from storage.positions import Position

if TYPE_CHECKING:
    from broker.subscriptions.consumer import Consumer

__all__ = ["KeySharedDispatcher"]

MAX_REPLAY_BACKLOG = 10_000  # stop reading ahead when this many entries wait (memory bound)


@dataclass(slots=True)
class _SlotOwner:
    """The consumer a hash slot's pending messages went to, and how many are pending."""

    consumer: Consumer
    pending: int


class KeySharedDispatcher(Dispatcher):
    sub_type = SubType.Key_Shared
    needs_hash = True

    def __init__(self, sub: DispatchContext, delayed: DelayedDelivery, mode: int,
                 selector: KeySharedSelector) -> None:
        super().__init__(sub, delayed)
        self.mode = mode
        self.selector = selector
        self.hash_owner: dict[int, _SlotOwner] = {}

    def check(self, consumer: Consumer) -> None:
        if not isinstance(self.selector, ConsistentHashingSelector):
            self.selector.check(consumer)  # a bad STICKY range, or no AUTO_SPLIT range left

    def add_consumer(self, consumer: Consumer) -> None:
        self.selector.add(consumer)
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self.selector.remove(consumer)
        super().remove_consumer(consumer)

    def reset(self) -> None:
        super().reset()
        self.hash_owner.clear()

    def _released(self, consumer: Consumer, position: Position, sticky_hash: int) -> None:
        owner = self.hash_owner.get(sticky_hash)
        if owner is not None and owner.consumer is consumer:
            owner.pending -= 1
            if owner.pending <= 0:
                del self.hash_owner[sticky_hash]

    def _sent(self, consumer: Consumer, sticky_hash: int) -> None:
        owner = self.hash_owner.get(sticky_hash)
        if owner is None:
            self.hash_owner[sticky_hash] = _SlotOwner(consumer, 1)
        elif owner.consumer is consumer:
            owner.pending += 1

    def _may_read_new(self) -> bool:
        return len(self.replay) < MAX_REPLAY_BACKLOG and super()._may_read_new()

    def _hash_routable(self, sticky_hash: int) -> bool:
        consumer = self.selector.select(sticky_hash)
        if consumer is None or not consumer.available:
            return False
        owner = self.hash_owner.get(sticky_hash)
        return owner is None or owner.consumer is consumer or consumer.allow_out_of_order

    def _route(self, position: Position, info: EntryInfo | None, sticky_hash: int,
               from_replay: bool, blocked: set[int]) -> Consumer | None:
        if sticky_hash in blocked:
            return None
        if not from_replay and sticky_hash in self.hashes_in_replay:
            blocked.add(sticky_hash)  # older entries of this key wait in the replay set
            return None
        consumer = self.selector.select(sticky_hash)
        if consumer is None or not consumer.available:
            blocked.add(sticky_hash)
            return None
        owner = self.hash_owner.get(sticky_hash)
        if owner is not None and owner.consumer is not consumer and not consumer.allow_out_of_order:
            blocked.add(sticky_hash)  # draining: the previous owner still has this key pending
            return None
        return consumer

    def key_hash_ranges(self, consumer: Consumer) -> list[str]:
        return [f"[{s}, {e}]" for s, e in self.selector.ranges_of(consumer)]
