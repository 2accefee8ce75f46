"""Deletion of inactive topics (Pulsar's ``brokerDeleteInactiveTopicsEnabled`` and
``inactiveTopicPolicies``).

Theory of operation
-------------------
One :class:`InactiveTopicSweeper` per broker, owned by the service and ticked by its
one-second timer; every ``brokerDeleteInactiveTopicsFrequencySeconds`` it looks at the loaded
topics. A topic is active while it has a producer, or (mode
``delete_when_no_subscriptions``) any subscription, or (mode
``delete_when_subscriptions_caught_up``) a subscription with a consumer or a backlog. A topic
inactive for longer than ``maxInactiveDurationSeconds``, whose resolved policy says
``deleteWhileInactive``, is deleted as an admin delete without force would (never with a
client attached). Partitions of partitioned topics are left alone (Pulsar deletes those only
with their whole partitioned topic; Horae does not yet). The policy is resolved per topic
(topic > namespace > broker config), so enabling it on one namespace needs no restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from broker.subscriptions.subscription import Subscription
from broker.topics.names import TopicName
from broker.topics.policies import PolicyStore
from broker.topics.producer import Producer

__all__ = ["InactiveTopicSweeper"]

log = logging.getLogger("horae.topic")


class SweptTopic(Protocol):
    name: TopicName
    full: str

    @property
    def producers(self) -> dict[str, Producer]: ...

    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...


class InactiveTopicSweeper:
    """Finds and deletes inactive topics (module docstring)."""

    def __init__(self, policies: PolicyStore, frequency_s: float,
                 delete: Callable[[str], Awaitable[None]]) -> None:
        self.policies = policies
        self.frequency_s = frequency_s
        self._delete = delete
        self._inactive_since: dict[str, float] = {}
        self._next = 0.0
        self.deleted = 0

    async def tick(self, now: float, topics: Mapping[str, SweptTopic]) -> None:
        if now < self._next:
            return
        self._next = now + self.frequency_s
        for full in list(self._inactive_since):
            if full not in topics:
                del self._inactive_since[full]
        for full, topic in list(topics.items()):
            if topic.name.is_partition:
                continue
            if topic.producers:   # active in every mode: no policy to resolve
                self._inactive_since.pop(full, None)
                continue
            policy = self.policies.inactive_topic_policies(topic.name)
            if not policy["deleteWhileInactive"] or _active(topic,
                                                            policy["inactiveTopicDeleteMode"]):
                self._inactive_since.pop(full, None)
                continue
            since = self._inactive_since.setdefault(full, now)
            if now - since >= int(policy["maxInactiveDurationSeconds"]):
                del self._inactive_since[full]
                try:
                    await self._delete(full)
                except Exception as exc:   # became active meanwhile, or a storage failure
                    log.info("inactive topic %s not deleted: %s", full, exc)
                else:
                    self.deleted += 1
                    log.info("deleted inactive topic %s", full)


def _active(topic: SweptTopic, mode: str) -> bool:
    if topic.producers:
        return True
    if mode == "delete_when_no_subscriptions":
        return bool(topic.subscriptions)
    return any(s.consumers or s.cursor.backlog for s in topic.subscriptions.values())
