"""Message TTL and backlog quotas of one topic: when they are checked and what they do.

Theory of operation
-------------------
One :class:`BacklogPolicies` per loaded topic (``Topic.backlog``); the policies themselves are
resolved at each check from the :class:`broker.topics.policies.PolicyStore` (topic >
namespace > broker config), so a change applies at the next check.

- Message TTL (``messageTTL``): every ``messageExpiryCheckIntervalInMinutes`` each
  subscription acknowledges what was published more than TTL seconds ago
  (:func:`broker.subscriptions.expiry.expire_before`), as Pulsar's expiry monitor moves cursors.
- Backlog quotas (``destination_storage``: backlog bytes over ``limitSize``; ``message_age``:
  the oldest unacknowledged message older than ``limitTime`` seconds), checked every
  ``backlogQuotaCheckIntervalInSeconds`` and, for the size, whenever a producer is created:

  * ``producer_request_hold``: producer creation answers ProducerBlockedQuotaExceededError
    (the client retries until the backlog shrinks); producers connected when the quota is
    exceeded are disconnected, so their re-creation is held the same way;
  * ``producer_exception``: the same with ProducerBlockedQuotaExceededException, on which the
    C++ client fails its pending sends instead of re-sending them;
  * ``consumer_backlog_eviction``: the oldest backlog is acknowledged on the subscriptions over
    the limit (the size as entries at the ledger's average entry size; the age through expiry).

Checks run as one task at a time, off the publish path (the housekeeping tick starts them).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Protocol

from broker.config import BrokerConfig
from broker.subscriptions.expiry import expire_before
from broker.subscriptions.subscription import Subscription
from broker.topics.names import TopicName
from broker.topics.policies import PolicyStore
from broker.topics.producer import Producer
from protocol.errors import ProducerBlockedQuotaExceededException, RequestError, ServerError
from protocol.metadata import entry_timestamp
from storage.ledger import ManagedLedger

__all__ = ["QUOTA_EXCEEDED_REASON", "BacklogPolicies"]

log = logging.getLogger("horae.topic")

QUOTA_EXCEEDED_REASON = "Cannot create producer on topic with backlog quota exceeded"


class PolicedTopic(Protocol):
    """What the checks read of their topic (:class:`broker.topics.topic.Topic`)."""

    name: TopicName
    full: str
    ledger: ManagedLedger
    loop: asyncio.AbstractEventLoop
    subscriptions: dict[str, Subscription]

    @property
    def producers(self) -> dict[str, Producer]: ...

    def backlog_size_bytes(self) -> int: ...


class BacklogPolicies:
    """TTL and backlog-quota checks of one topic (module docstring)."""

    def __init__(self, topic: PolicedTopic, policies: PolicyStore, config: BrokerConfig) -> None:
        self.topic = topic
        self.policies = policies
        self.config = config
        self.age_exceeded_policy: str | None = None   # set by the last message_age check
        self.task: asyncio.Task[None] | None = None
        now = topic.loop.time()
        self._next_ttl = now + config.message_expiry_check_interval_in_minutes * 60
        self._next_quota = now + config.backlog_quota_check_interval_in_seconds

    # ------------------------------------------------------------------ producers

    def exceeded_policy(self) -> str | None:
        """The policy of a quota the backlog is over now (size now, age at the last check)."""
        storage = self.policies.backlog_quotas(self.topic.name).get("destination_storage")
        if storage is not None and 0 <= int(storage["limitSize"]) < \
                self.topic.backlog_size_bytes():
            return str(storage["policy"])
        return self.age_exceeded_policy

    def admit_producer(self) -> None:
        """Raise the quota error a PRODUCER gets while a producer-blocking quota is exceeded."""
        policy = self.exceeded_policy()
        if policy == "producer_exception":
            raise ProducerBlockedQuotaExceededException(QUOTA_EXCEEDED_REASON)
        if policy == "producer_request_hold":
            raise RequestError(QUOTA_EXCEEDED_REASON,
                               ServerError.ProducerBlockedQuotaExceededError)

    # ------------------------------------------------------------------ periodic checks

    def tick(self, now: float) -> None:
        """Housekeeping (once a second): start the checks that are due."""
        if self.task is not None:
            return
        ttl_due = now >= self._next_ttl
        quota_due = now >= self._next_quota
        if ttl_due:
            self._next_ttl = now + self.config.message_expiry_check_interval_in_minutes * 60
        if quota_due:
            self._next_quota = now + self.config.backlog_quota_check_interval_in_seconds
        if ttl_due or quota_due:
            self.task = self.topic.loop.create_task(self._run(ttl_due, quota_due))

    async def _run(self, ttl: bool, quota: bool) -> None:
        try:
            if ttl:
                await self.apply_ttl()
            if quota:
                await self.check_quotas()
        except Exception:
            log.exception("TTL/backlog quota check of %s failed", self.topic.full)
        finally:
            self.task = None

    async def apply_ttl(self) -> int:
        """Expire what is older than the message TTL on every subscription; returns entries."""
        ttl_s = self.policies.message_ttl_s(self.topic.name)
        if ttl_s <= 0:
            return 0
        cutoff = int(time.time() * 1000) - ttl_s * 1000
        return sum([await expire_before(sub, cutoff)
                    for sub in list(self.topic.subscriptions.values())])

    async def check_quotas(self) -> None:
        """Apply the quotas the backlog is over (module docstring)."""
        quotas = self.policies.backlog_quotas(self.topic.name)
        age = quotas.get("message_age")
        self.age_exceeded_policy = None
        if age is not None and int(age["limitTime"]) >= 0:
            oldest = await self._oldest_unacked_publish_ms()
            cutoff = int(time.time() * 1000) - int(age["limitTime"]) * 1000
            if oldest is not None and oldest < cutoff:
                if age["policy"] == "consumer_backlog_eviction":
                    for sub in list(self.topic.subscriptions.values()):
                        await expire_before(sub, cutoff)
                else:
                    self.age_exceeded_policy = str(age["policy"])
        storage = quotas.get("destination_storage")
        if storage is not None and storage["policy"] == "consumer_backlog_eviction":
            await self._evict_to_size(int(storage["limitSize"]))
        if self.exceeded_policy() is not None:
            for producer in list(self.topic.producers.values()):
                producer.disconnect()

    async def _oldest_unacked_publish_ms(self) -> int | None:
        ledger = self.topic.ledger
        oldest: int | None = None
        for sub in self.topic.subscriptions.values():
            if not sub.cursor.backlog:
                continue
            entry = await ledger.read_entry(ledger.next_position(sub.cursor.mark_delete_position))
            if entry is not None:
                published = entry_timestamp(entry.data)
                oldest = published if oldest is None else min(oldest, published)
        return oldest

    async def _evict_to_size(self, limit: int) -> None:
        ledger = self.topic.ledger
        if limit < 0 or not ledger.number_of_entries:
            return
        average = ledger.total_size_bytes / ledger.number_of_entries
        keep = int(limit // average) if average else 0
        for sub in list(self.topic.subscriptions.values()):
            excess = int(sub.cursor.backlog) - keep
            if excess > 0:
                await sub.resets.skip(math.ceil(excess))

    async def close(self) -> None:
        """Wait for a check in progress (the topic is closing)."""
        if self.task is not None:
            await asyncio.wait([self.task])
