"""Count limits and rates of topics (Pulsar's limit policies), resolved topic > namespace > broker.conf.

Theory of operation
-------------------
:class:`LimitPolicies` answers, for one topic, the limits an operator sets on its clients:
producers, consumers and subscriptions per topic, consumers per subscription, unacknowledged
messages per consumer and per subscription, the topic's largest message, the publish, dispatch
and subscribe rates, and how long an unused subscription lives. Each reads the stored fields
(:class:`broker.topics.policy_records.PolicyRecords`): the topic's value, else its partitioned
topic's, else the namespace's, else the broker configuration's key named in its docstring
(0 or a negative rate is no limit). The field names are Pulsar's (``Policies`` for a
namespace, ``TopicPolicies`` for a topic). The readers are PRODUCER and SUBSCRIBE (which check
the counts when a client arrives), :mod:`broker.topics.live_policies` (which hands the rates
and unacked limits to loaded topics when a field changes) and the subscription expiry check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.config import BrokerConfig
from broker.subscriptions.dispatch_rate import DispatchRate
from broker.topics.names import TopicName
from broker.topics.policy_records import PolicyRecords
from broker.topics.publish_rate import PublishRate
from broker.topics.subscribe_rate import SubscribeRate

__all__ = ["LimitPolicies"]

NS_MAX_PRODUCERS = "max_producers_per_topic"
TOPIC_MAX_PRODUCERS = "maxProducerPerTopic"
NS_MAX_CONSUMERS = "max_consumers_per_topic"
TOPIC_MAX_CONSUMERS = "maxConsumerPerTopic"
NS_MAX_CONSUMERS_PER_SUB = "max_consumers_per_subscription"
TOPIC_MAX_CONSUMERS_PER_SUB = "maxConsumersPerSubscription"
NS_MAX_SUBSCRIPTIONS = "max_subscriptions_per_topic"
TOPIC_MAX_SUBSCRIPTIONS = "maxSubscriptionsPerTopic"
NS_MAX_UNACKED_PER_CONSUMER = "max_unacked_messages_per_consumer"
TOPIC_MAX_UNACKED_PER_CONSUMER = "maxUnackedMessagesOnConsumer"
NS_MAX_UNACKED_PER_SUB = "max_unacked_messages_per_subscription"
TOPIC_MAX_UNACKED_PER_SUB = "maxUnackedMessagesOnSubscription"
NS_MAX_TOPICS = "max_topics_per_namespace"
NS_PUBLISH_RATE = "publishMaxMessageRate"
TOPIC_PUBLISH_RATE = "publishRate"
TOPIC_MAX_MESSAGE_SIZE = "maxMessageSize"
NS_SUBSCRIBE_RATE = "clusterSubscribeRate"
TOPIC_SUBSCRIBE_RATE = "subscribeRate"
NS_DISPATCH_RATE = "topicDispatchRate"
#: Pulsar's deprecated per-cluster dispatch rate: the namespace's rate where topicDispatchRate
#: has none (AbstractTopic); a create body may set it alone, the dispatchRate route sets both
NS_CLUSTER_DISPATCH_RATE = "clusterDispatchRate"
TOPIC_DISPATCH_RATE = "dispatchRate"
NS_SUBSCRIPTION_DISPATCH_RATE = "subscriptionDispatchRate"
TOPIC_SUBSCRIPTION_DISPATCH_RATE = "subscriptionDispatchRate"
NS_SUBSCRIPTION_EXPIRATION = "subscription_expiration_time_minutes"


class LimitPolicies:
    """The limits and rates in force for a topic (module docstring)."""

    def __init__(self, records: PolicyRecords, config: Callable[[], BrokerConfig]) -> None:
        self._records = records
        self._config = config   # read at each call: dynamic configuration swaps it

    def _count(self, tn: TopicName, topic_field: str, ns_field: str, default: int) -> int:
        value = self._records.resolve(tn, topic_field, ns_field)
        return default if value is None else int(value)

    def max_producers_per_topic(self, tn: TopicName) -> int:
        """Most producers on the topic (0: no limit), ``maxProducersPerTopic`` by default."""
        return self._count(tn, TOPIC_MAX_PRODUCERS, NS_MAX_PRODUCERS,
                           self._config().max_producers_per_topic)

    def max_consumers_per_topic(self, tn: TopicName) -> int:
        """Most consumers on the topic (0: no limit), ``maxConsumersPerTopic`` by default."""
        return self._count(tn, TOPIC_MAX_CONSUMERS, NS_MAX_CONSUMERS,
                           self._config().max_consumers_per_topic)

    def max_consumers_per_subscription(self, tn: TopicName) -> int:
        """Most consumers on one subscription of the topic (0: no limit),
        ``maxConsumersPerSubscription`` by default."""
        return self._count(tn, TOPIC_MAX_CONSUMERS_PER_SUB, NS_MAX_CONSUMERS_PER_SUB,
                           self._config().max_consumers_per_subscription)

    def max_subscriptions_per_topic(self, tn: TopicName) -> int:
        """Most subscriptions on the topic (0: no limit), ``maxSubscriptionsPerTopic`` by
        default; a subscribe that would create one more is refused with NotAllowed."""
        return self._count(tn, TOPIC_MAX_SUBSCRIPTIONS, NS_MAX_SUBSCRIPTIONS,
                           self._config().max_subscriptions_per_topic)

    def max_unacked_messages_per_consumer(self, tn: TopicName) -> int:
        """Unacknowledged messages a Shared/Key_Shared consumer may hold (0: no limit),
        ``maxUnackedMessagesPerConsumer`` by default."""
        return self._count(tn, TOPIC_MAX_UNACKED_PER_CONSUMER, NS_MAX_UNACKED_PER_CONSUMER,
                           self._config().max_unacked_messages_per_consumer)

    def max_unacked_messages_per_subscription(self, tn: TopicName) -> int:
        """Unacknowledged messages a Shared/Key_Shared subscription may hold (0: no limit),
        ``maxUnackedMessagesPerSubscription`` by default."""
        return self._count(tn, TOPIC_MAX_UNACKED_PER_SUB, NS_MAX_UNACKED_PER_SUB,
                           self._config().max_unacked_messages_per_subscription)

    def subscription_expiration_minutes(self, tn: TopicName) -> int:
        """Minutes a subscription without consumers lives (0: for ever), the namespace's
        ``subscriptionExpirationTime``, else ``subscriptionExpirationTimeMinutes`` (Pulsar's REST
        API has no topic level)."""
        value = self._records.namespace_value(tn.namespace, NS_SUBSCRIPTION_EXPIRATION)
        return self._config().subscription_expiration_time_minutes if value is None \
            else int(value)

    def max_topics_per_namespace(self, namespace: str) -> int:
        """Most persistent topics (partitions counting) in *namespace* (0: no limit), the
        namespace's value else ``maxTopicsPerNamespace``."""
        value = self._records.namespace_value(namespace, NS_MAX_TOPICS)
        return self._config().max_topics_per_namespace if value is None else int(value)

    def topic_max_message_size(self, tn: TopicName) -> int:
        """The topic's ``maxMessageSize`` policy in bytes (0: none; the broker's
        ``maxMessageSize`` bounds every frame anyway). Pulsar has no namespace level."""
        value = self._records.topic_value(tn, TOPIC_MAX_MESSAGE_SIZE)
        return 0 if value is None else int(value)

    def publish_rate(self, tn: TopicName) -> PublishRate:
        """The topic's (else the namespace's) ``publishRate``, else
        ``maxPublishRatePerTopicInMessages`` / ``...InBytes``."""
        value = self._records.resolve(tn, TOPIC_PUBLISH_RATE, NS_PUBLISH_RATE)
        if value is None:
            c = self._config()
            return PublishRate(c.max_publish_rate_per_topic_in_messages,
                               c.max_publish_rate_per_topic_in_bytes)
        return PublishRate(int(value["publishThrottlingRateInMsg"]),
                           int(value["publishThrottlingRateInByte"]))

    def subscribe_rate(self, tn: TopicName) -> SubscribeRate:
        """The topic's (else the namespace's) ``subscribeRate``, else
        ``subscribeThrottlingRatePerConsumer`` per ``subscribeRatePeriodPerConsumerInSecond``."""
        value = self._records.resolve(tn, TOPIC_SUBSCRIBE_RATE, NS_SUBSCRIBE_RATE)
        if value is None:
            c = self._config()
            return SubscribeRate(c.subscribe_throttling_rate_per_consumer,
                                 c.subscribe_rate_period_per_consumer_in_second)
        return SubscribeRate(int(value["subscribeThrottlingRatePerConsumer"]),
                             int(value["ratePeriodInSecond"]))

    def topic_dispatch_rate(self, tn: TopicName) -> DispatchRate:
        """The topic's (else the namespace's, else its ``clusterDispatchRate``) ``dispatchRate``, else
        ``dispatchThrottlingRatePerTopicInMsg`` / ``...InByte`` per second."""
        value = self._records.resolve(tn, TOPIC_DISPATCH_RATE, NS_DISPATCH_RATE)
        if value is None:
            value = self._records.namespace_value(tn.namespace, NS_CLUSTER_DISPATCH_RATE)
        if value is None:
            c = self._config()
            return DispatchRate(c.dispatch_throttling_rate_per_topic_in_msg,
                                c.dispatch_throttling_rate_per_topic_in_byte, 1)
        return _dispatch_rate(value)

    def subscription_dispatch_rate(self, tn: TopicName) -> DispatchRate:
        """The topic's (else the namespace's) ``subscriptionDispatchRate``, else
        ``dispatchThrottlingRatePerSubscriptionInMsg`` / ``...InByte`` per second."""
        value = self._records.resolve(tn, TOPIC_SUBSCRIPTION_DISPATCH_RATE,
                                      NS_SUBSCRIPTION_DISPATCH_RATE)
        if value is None:
            c = self._config()
            return DispatchRate(c.dispatch_throttling_rate_per_subscription_in_msg,
                                c.dispatch_throttling_rate_per_subscription_in_byte, 1)
        return _dispatch_rate(value)


def _dispatch_rate(value: dict[str, Any]) -> DispatchRate:
    return DispatchRate(int(value["dispatchThrottlingRateInMsg"]),
                        int(value["dispatchThrottlingRateInByte"]),
                        int(value["ratePeriodInSecond"]),
                        bool(value.get("relativeToPublishRate", False)))
