"""A persistent topic's subscriptions: the mapping by name, and creating and removing them.

Theory of operation
-------------------
:class:`TopicSubscriptions` is the topic's ``subscriptions``: a ``dict`` of name ->
:class:`broker.subscriptions.subscription.Subscription` (readers iterate it as a plain dict on
the hot path), which only this class adds to or removes from, except the topic's load, which
restores the durable ones from their cursors before anything else can see the topic.

- Creating (:meth:`get_or_create_subscription`) is concurrency-safe: a second caller for the
  same name awaits the first; the subscriptions being created count against
  ``maxSubscriptionsPerTopic`` and hold trimming back (:attr:`creating_subscription`).
- Removing (:meth:`delete_subscription`, :meth:`remove_subscription`) keeps what the
  subscription delivered in :attr:`removed_msg_out` / :attr:`removed_bytes_out`, so the topic's
  out counters never go back.
- Caching: the ledger's new entries enter the entry cache only while one of the topic's
  subscriptions has a consumer attached (:meth:`update_caching`, after every subscription or
  consumer added or removed: Pulsar caches an entry only while its managed ledger has active
  cursors, and a cursor is active while its subscription has consumers), so a topic nobody
  reads, or whose readers are away, does not fill the cache with entries that wait there
  until a consumer comes back (they are read from disk then); with
  ``managedLedgerCacheForInactiveCursors`` a subscription without consumers counts too.
- New entries: the ledger's listener (:meth:`on_durable`, once per group commit) calls
  :meth:`notify_new_entries` at once, which tells every subscription: their dispatch rounds
  run inside the store's hand-back of the group commit, so the MESSAGEs leave in the same
  held write as the receipts of that commit (:class:`broker.net.output.WriteHold`).

The topic hands itself over as the :class:`SubscriptionsOwner` (what a subscription is opened
with, plus its state and replace-by-key record); nothing here reaches further up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Protocol

from broker.delayed.residual import delete_residual_snapshots
from broker.subscriptions.subscription import Subscription, TopicContext
from broker.topics.compaction import COMPACTION_CURSOR
from broker.topics.dedup import DEDUP_CURSOR
from broker.topics.replace_by_key import TopicReplaceByKey
from broker.topics.storage_errors import StorageOp, storage_failure
from protocol.errors import NotAllowedError, ServiceNotReadyError, SubscriptionNotFoundError
from storage.errors import StorageError
from storage.positions import Position
from storage.snapshots import SnapshotStore

__all__ = ["SubscriptionsOwner", "TopicSubscriptions", "close_subscription"]

log = logging.getLogger("horae.topic")


class SubscriptionsOwner(TopicContext, Protocol):
    """What the subscriptions ask of their topic (implemented by
    :class:`broker.topics.topic.Topic`)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def serving(self) -> bool: ...

    @property
    def replace_by_key(self) -> TopicReplaceByKey: ...

    async def forget_pending_acks(self, subscription: str) -> None:
        """A subscription is being deleted: its acknowledgements pending in transactions go
        (durably) before its cursor does."""


class TopicSubscriptions(dict[str, Subscription]):
    """The topic's subscriptions by name (see the module docstring)."""

    def __init__(self, topic: SubscriptionsOwner, snapshots: SnapshotStore) -> None:
        super().__init__()
        self._topic = topic
        self._snapshots = snapshots  # bucket and cancel snapshots go with a deleted one
        self._sub_creating: dict[str, asyncio.Future[Subscription]] = {}
        self.removed_msg_out = 0
        self.removed_bytes_out = 0

    @property
    def creating_subscription(self) -> bool:
        """A subscription is being created (its cursor may not be known to storage yet)."""
        return bool(self._sub_creating)

    async def get_or_create_subscription(self, name: str, *, durable: bool = True,
                                         initial_position: str = "latest",
                                         start_message_id: tuple[int, int] | None = None,
                                         properties: Mapping[str, str] | None = None,
                                         max_subscriptions: int = 0,
                                         ) -> Subscription:
        """The subscription *name*, created when missing unless the topic already has
        *max_subscriptions* (0: no limit; counted with those being created, in this step)."""
        topic = self._topic
        sub = self.get(name)
        if sub is not None:
            return sub
        pending = self._sub_creating.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        if not topic.serving:
            raise ServiceNotReadyError(f"Topic {topic.full} is being closed or reloaded")
        if name in (DEDUP_CURSOR, COMPACTION_CURSOR):
            raise NotAllowedError(f"Subscription name {name} is reserved")
        if 0 < max_subscriptions <= len(self) + len(self._sub_creating):
            raise NotAllowedError(
                f"Exceed the maximum number of subscriptions of the topic: {topic.full}")
        fut: asyncio.Future[Subscription] = topic.loop.create_future()
        self._sub_creating[name] = fut
        try:
            try:
                sub = await Subscription.open(topic, name, durable=durable,
                                              initial_position=initial_position,
                                              start_message_id=start_message_id,
                                              properties=properties)
            except StorageError as exc:
                raise storage_failure(exc, StorageOp.SUBSCRIBE).error from exc
            self[name] = sub
            self.update_caching()
            topic.replace_by_key.adopt(sub)
            fut.set_result(sub)
            return sub
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            del self._sub_creating[name]

    async def create_subscription(self, name: str,
                                  position: str | tuple[int, int] = "latest") -> Subscription:
        """Admin API: create a durable subscription at latest, earliest or a message id."""
        if name in self:
            raise NotAllowedError(f"Subscription {name} already exists")
        if isinstance(position, tuple):
            return await self.get_or_create_subscription(name, start_message_id=position)
        return await self.get_or_create_subscription(name, initial_position=position)

    async def delete_subscription(self, name: str, *, force: bool = False) -> None:
        sub = self.get(name)
        if sub is None:
            raise SubscriptionNotFoundError("Subscription not found")
        if sub.consumers and not force:
            raise NotAllowedError("Subscription has active connected consumers")
        self._forget_subscription(name, sub)
        await close_subscription(sub)
        await self._topic.forget_pending_acks(name)
        ledger = self._topic.ledger
        if name in ledger.cursors:
            properties = ledger.cursors[name].properties
            await ledger.delete_cursor(name)
            # Its bucket and cancel snapshots go too (Pulsar's cleanResidualSnapshots).
            await delete_residual_snapshots(properties, self._snapshots)

    def update_caching(self) -> None:
        """The ledger caches new entries while a subscription has a consumer, or while there is
        a subscription with ``managedLedgerCacheForInactiveCursors`` (module doc)."""
        topic = self._topic
        caching = topic.ledger.caching
        caching.want(topic.full, bool(self) if caching.for_inactive_cursors
                     else any(sub.consumers for sub in self.values()))

    def consumer_count(self) -> int:
        """Consumers attached to all its subscriptions (``maxConsumersPerTopic``)."""
        return sum(len(sub.consumers) for sub in self.values())

    def remove_subscription(self, sub: Subscription) -> None:
        """Forget a subscription that went away by itself (e.g. a reader's non-durable one)."""
        name = str(sub.name)
        if self.get(name) is sub:
            self._forget_subscription(name, sub)

    def _forget_subscription(self, name: str, sub: Subscription) -> None:
        """Drop *sub*, keeping what it delivered in the topic's out counters."""
        del self[name]
        self.update_caching()
        self.removed_msg_out += sub.msg_out_counter
        self.removed_bytes_out += sub.bytes_out_counter

    # ------------------------------------------------------------------ new entries

    def on_durable(self, _position: Position) -> None:
        """The ledger's listener: entries became durable (once per group commit)."""
        self.notify_new_entries()

    def notify_new_entries(self) -> None:
        self._topic.replace_by_key.flush()
        for sub in list(self.values()):
            try:
                sub.on_new_entries()
            except Exception:
                log.exception("subscription %s on %s failed on new entries", sub.name,
                              self._topic.full)


async def close_subscription(sub: Subscription, *, disconnect_clients: bool = True) -> None:
    try:
        if disconnect_clients:
            sub.disconnect_consumers()
        await sub.close()
    except Exception:
        log.exception("closing subscription %s failed", sub.name)
