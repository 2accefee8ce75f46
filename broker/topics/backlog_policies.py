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

Every backlog-quota check, with or without a ``message_age`` quota, also notes the publish time
of the oldest unacknowledged message (Pulsar's best-effort backlog age,
``pulsar_storage_backlog_age_seconds``): the entry after the slowest cursor's mark-delete
position, read only when that position moved since the previous check. Metrics read
:meth:`BacklogPolicies.backlog_age_seconds` and :meth:`BacklogPolicies.quota_limits` without any
read of stored entries.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
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
from storage.positions import Position

__all__ = ["QUOTA_EXCEEDED_REASON", "BacklogPolicies"]

log = logging.getLogger("horae.topic")

QUOTA_EXCEEDED_REASON = "Cannot create producer on topic with backlog quota exceeded"


class BacklogSize(Protocol):
    """The topic's backlog estimate (:class:`broker.topics.meters.TopicMeters`)."""

    def backlog_size_bytes(self) -> int: ...


class PolicedTopic(Protocol):
    """What the checks read of their topic (:class:`broker.topics.topic.Topic`)."""

    name: TopicName
    full: str
    ledger: ManagedLedger
    loop: asyncio.AbstractEventLoop

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...

    @property
    def producers(self) -> dict[str, Producer]: ...

    @property
    def meters(self) -> BacklogSize: ...


class BacklogPolicies:
    """TTL and backlog-quota checks of one topic (module docstring)."""

    def __init__(self, topic: PolicedTopic, policies: PolicyStore, config: BrokerConfig) -> None:
        self.topic = topic
        self.policies = policies
        self.config = config
        self.age_exceeded_policy: str | None = None   # set by the last message_age check
        # The last check's oldest unacknowledged entry: (position, publish ms), None when there
        # was no backlog; _age_checked is False until the first check.
        self._oldest: tuple[Position, int] | None = None
        self._age_checked = False
        self.task: asyncio.Task[None] | None = None
        now = topic.loop.time()
        self._next_ttl = now + config.message_expiry_check_interval_in_minutes * 60
        self._next_quota = now + config.backlog_quota_check_interval_in_seconds

    # ------------------------------------------------------------------ producers

    def exceeded_policy(self) -> str | None:
        """The policy of a quota the backlog is over now (size now, age at the last check)."""
        storage = self.policies.backlog_quotas(self.topic.name).get("destination_storage")
        if storage is not None and 0 <= int(storage["limitSize"]) < \
                self.topic.meters.backlog_size_bytes():
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

    def quota_limits(self) -> tuple[int, int]:
        """(``destination_storage`` limitSize in bytes, ``message_age`` limitTime in seconds) in
        force, each -1 when none (Pulsar's ``pulsar_storage_backlog_quota_limit`` and
        ``pulsar_storage_backlog_quota_limit_time``)."""
        quotas = self.policies.backlog_quotas(self.topic.name)
        storage = quotas.get("destination_storage")
        age = quotas.get("message_age")
        return (int(storage["limitSize"]) if storage is not None else -1,
                int(age["limitTime"]) if age is not None else -1)

    def backlog_age_seconds(self, now_ms: int | None = None) -> int:
        """Whole seconds since the oldest unacknowledged message (as of the last check) was
        published: 0 when that check found no backlog, -1 before the first check."""
        if not self._age_checked:
            return -1
        if self._oldest is None:
            return 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0, (now - self._oldest[1]) // 1000)

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
        if ttl_due and self.policies.message_ttl_s(self.topic.name) <= 0:
            ttl_due = False  # nothing can expire: no task for an idle topic
        if quota_due and self._nothing_to_check():
            quota_due = False
        if ttl_due or quota_due:
            self.task = self.topic.loop.create_task(self._run(ttl_due, quota_due))

    def _nothing_to_check(self) -> bool:
        """No subscription has a backlog and no quota is exceeded: the quota check would
        change nothing but record that (done here, without starting a task)."""
        if any(sub.cursor.backlog for sub in self.topic.subscriptions.values()):
            return False
        self.age_exceeded_policy = None
        self._oldest = None
        self._age_checked = True
        return self.exceeded_policy() is None

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
        oldest = await self._oldest_unacked_publish_ms()
        if age is not None and int(age["limitTime"]) >= 0:
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
        """Publish time of the first entry after the slowest mark-delete position among the
        subscriptions with a backlog (None: no backlog); kept for :meth:`backlog_age_seconds`.
        The entry is read only when that position changed since the last call."""
        ledger = self.topic.ledger
        first: Position | None = None
        for sub in self.topic.subscriptions.values():
            if sub.cursor.backlog:
                pos = ledger.next_position(sub.cursor.mark_delete_position)
                if first is None or pos < first:
                    first = pos
        known = self._oldest
        if first is None:
            self._oldest = None
        elif known is None or known[0] != first:
            entry = await ledger.read_entry(first)
            self._oldest = (None if entry is None
                            else (first, entry_timestamp(entry.data)))
        self._age_checked = True
        return None if self._oldest is None else self._oldest[1]

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
