"""What a persistent topic's subscriptions are built with: the delayed-delivery policy in force,
the tracker factory, the Key_Shared selector kind and the failover delay.

Theory of operation
-------------------
One :class:`TopicDelivery` per loaded topic (``Topic.delivery``). The delayed-delivery policy
is resolved once (topic > namespace > broker config, by the service) and cached in
:attr:`TopicDelivery.resolved`, which the topic's publish guard reads on every SEND; when a
namespace or topic policy changes the service calls :meth:`invalidate_policy`, which resolves it
again and pushes it to every subscription (``Subscription.on_policy_changed``), so the next
message and the next dispatch see it without a restart. The broker settings are read from the
service at each call, so a dynamic configuration change applies to the next subscription built.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from broker.config import BrokerConfig
from broker.delayed import TrackerFactory
from broker.delayed.policy import DelayPolicy
from broker.subscriptions.selectors import KeySharedSelector, new_selector
from broker.subscriptions.subscription import Subscription
from broker.topics.names import TopicName
from storage.cursor import ManagedCursor
from storage.snapshots import SnapshotStore

__all__ = ["DeliveryHost", "TopicDelivery"]


class DeliveryHost(Protocol):
    """What the topic's delivery settings read of the service (``BrokerService``)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def snapshots(self) -> SnapshotStore: ...

    def resolve_delay_policy(self, name: TopicName) -> DelayPolicy: ...


class TopicDelivery:
    """The settings one topic's subscriptions are built with (see the module docstring)."""

    def __init__(self, host: DeliveryHost, name: TopicName,
                 subscriptions: Mapping[str, Subscription]) -> None:
        self.host = host
        self.name = name
        self._subscriptions = subscriptions  # the topic's: a changed policy is pushed to them
        #: The delayed-delivery policy as last resolved (None: resolve at the next read).
        self.resolved: DelayPolicy | None = None

    def delay_policy(self) -> DelayPolicy:
        policy = self.resolved
        if policy is None:
            policy = self.resolved = self.host.resolve_delay_policy(self.name)
        return policy

    def invalidate_policy(self) -> None:
        """A delayed-delivery policy changed: resolve it again and push it to every
        subscription."""
        self.resolved = None
        policy = self.delay_policy()
        for sub in list(self._subscriptions.values()):
            sub.on_policy_changed(policy)

    def tracker_factory(self, cursor: ManagedCursor | None) -> TrackerFactory:
        """How one of this topic's subscriptions builds its delayed-delivery tracker (bucket
        snapshots only for a durable one, which passes its *cursor*)."""
        return TrackerFactory(self.host.config, self.host.loop, cursor,
                              self.host.snapshots if cursor is not None else None)

    def new_key_shared_selector(self, sticky: bool) -> KeySharedSelector:
        """A Key_Shared selector for one of this topic's subscriptions
        (``subscriptionKeySharedUseConsistentHashing`` picks AUTO_SPLIT's kind)."""
        return new_selector(sticky, consistent_hashing=(
            self.host.config.subscription_key_shared_use_consistent_hashing))

    @property
    def read_ahead_ms(self) -> int:
        """How long before a deliver time after a quiet spell a subscription's dispatcher
        reads the first due entries (``delayedDeliveryReadAheadMillis``; 0: never)."""
        return self.host.config.delayed_delivery_read_ahead_millis

    @property
    def failover_delay_s(self) -> float:
        return self.host.config.active_consumer_failover_delay_time_millis / 1000
