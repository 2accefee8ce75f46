"""Deletion of unused subscriptions (Pulsar's ``subscriptionExpirationTimeMinutes``).

Theory of operation
-------------------
One :class:`SubscriptionExpiry` per broker, owned by the service and ticked by its one-second
timer; every ``subscriptionExpiryCheckIntervalInMinutes`` it looks at the subscriptions of the
loaded persistent topics, as Pulsar's ``checkInactiveSubscriptions``. A subscription is active
while a consumer is attached; one found without consumers is remembered with the time it was
first seen so, and deleted once it has stayed so for longer than the topic's expiration time
(:meth:`broker.topics.policy_limits.LimitPolicies.subscription_expiration_minutes`: the
namespace's ``subscriptionExpirationTime``, else ``subscriptionExpirationTimeMinutes``; 0 never). The compaction and deduplication cursors are not subscriptions of the topic and are
never touched; Horae has no replicated subscriptions to skip. A consumer arriving in between
makes it active again; an error (a consumer won the race, a storage failure) is logged and the
subscription looked at again at the next check. A durable subscription's cursor keeps its last activity (a consumer
added or removed, an acknowledgement, a reset: :mod:`broker.subscriptions.last_active`, as
Pulsar's cursor keeps its lastActive) and an idle subscription is idle since then: neither a
restart nor a kill -9 starts its idle time again. One that keeps none (never had a consumer)
is idle since the first check that found it so. ``clock`` is the wall clock in seconds the idle times are measured with (tests move it
forward instead of waiting).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, ItemsView, Mapping
from typing import Any, Protocol

from broker.subscriptions.last_active import last_active_s
from broker.topics.names import TopicName
from broker.topics.policy_limits import LimitPolicies

__all__ = ["SubscriptionExpiry"]

log = logging.getLogger("horae.topic")


class ExpiringSubscriptions(Protocol):
    def items(self) -> ItemsView[str, Any]: ...

    def delete_subscription(self, name: str, *, force: bool = False) -> Awaitable[None]: ...


class ExpiringTopic(Protocol):
    name: TopicName

    @property
    def subscriptions(self) -> ExpiringSubscriptions: ...


class SubscriptionExpiry:
    """Finds and deletes subscriptions unused for longer than their expiration time."""

    def __init__(self, limits: LimitPolicies, interval_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._limits = limits
        self.interval_s = interval_s
        self.clock = clock
        self._idle_since: dict[tuple[str, str], float] = {}
        self.next_check_at = 0.0   # on the timer's clock
        self.expired = 0   # subscriptions deleted so far

    async def tick(self, now: float, topics: Mapping[str, ExpiringTopic]) -> None:
        """Check when the interval has passed since the last check (*now*: the timer's clock)."""
        if now < self.next_check_at:
            return
        self.next_check_at = now + self.interval_s
        await self.check(topics)

    async def check(self, topics: Mapping[str, ExpiringTopic]) -> int:
        """One look at every subscription of *topics*; returns how many were deleted."""
        now = self.clock()
        idle: dict[tuple[str, str], float] = {}
        deleted = 0
        for full, topic in list(topics.items()):
            minutes = self._limits.subscription_expiration_minutes(topic.name)
            if minutes <= 0:
                continue
            for name, sub in list(topic.subscriptions.items()):
                if sub.consumers:
                    continue
                key = (full, name)
                last_active = last_active_s(sub.cursor)
                since = (min(now, last_active) if last_active is not None
                         else self._idle_since.get(key, now))
                if now - since <= minutes * 60:
                    idle[key] = since
                    continue
                try:
                    await topic.subscriptions.delete_subscription(name)
                except Exception as exc:   # a consumer came meanwhile, or a storage failure
                    log.info("expired subscription %s of %s not deleted: %s", name, full, exc)
                    idle[key] = since
                else:
                    deleted += 1
                    log.info("deleted subscription %s of %s: no consumer for %d minutes",
                             name, full, minutes)
        self._idle_since = idle   # forgets subscriptions gone, active or no longer expiring
        self.expired += deleted
        return deleted

