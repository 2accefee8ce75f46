"""Namespace and topic policies (Pulsar's ``Policies`` / ``TopicPolicies`` fields) and their resolution.

Theory of operation
-------------------
One :class:`PolicyStore` per broker, owned by :class:`broker.topics.service.BrokerService`
(``service.policies``). It keeps, in the metadata store and mirrored in memory:

- kind ``"ns_policies"``, key ``"tenant/ns"``: the namespace's policy fields under Pulsar's
  ``Policies`` JSON names (``deduplicationEnabled``, ``schema_compatibility_strategy``,
  ``compaction_threshold``, ``max_producers_per_topic``, ``max_consumers_per_topic``, ...);
- kind ``"topic_policies"``, key the full topic name (a partitioned topic's parent name covers
  its partitions): Pulsar's ``TopicPolicies`` names (``deduplicationEnabled``,
  ``compactionThreshold``, ``schemaCompatibilityStrategy``).

Writes go to the metadata store first, then the mirror, so a reader never sees a value that
is not durable. The delayed-delivery policies are not here (``broker.delayed.policy``, kinds
``namespace_policy`` / ``topic_policy``).

Resolution (:meth:`dedup_enabled`, :meth:`compaction_threshold`,
:meth:`schema_compatibility`, ...): the topic's value, else the namespace's, else the broker
configuration (``brokerDeduplicationEnabled``, ``brokerServiceCompactionThresholdInBytes``,
``schemaCompatibilityStrategy``). Readers are the service (PRODUCER, SUBSCRIBE, housekeeping)
and the admin API; nothing here touches topics (the service applies a change to loaded ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig
from broker.delayed.policy import DelayPolicy, resolve_policy
from broker.subscriptions.dispatch_rate import DispatchRate
from broker.topics.names import TopicName
from broker.topics.publish_rate import PublishRate
from broker.topics.subscribe_rate import SubscribeRate
from protocol.errors import NotAllowedError
from storage.metadata import MetadataStore

__all__ = ["NS_COUNT_LIMITS", "NS_DELAYED", "NS_KIND", "TOPIC_DELAYED", "TOPIC_KIND",
           "AutoTopicCreation", "PolicyLimitError", "PolicyStore"]

NS_KIND = "ns_policies"
TOPIC_KIND = "topic_policies"

# Namespace Policies field -> TopicPolicies field, for what both levels know.
NS_DEDUP = "deduplicationEnabled"
NS_COMPACTION = "compaction_threshold"
NS_SCHEMA_STRATEGY = "schema_compatibility_strategy"
TOPIC_DEDUP = "deduplicationEnabled"
TOPIC_COMPACTION = "compactionThreshold"
TOPIC_SCHEMA_STRATEGY = "schemaCompatibilityStrategy"
NS_RETENTION = "retention_policies"
TOPIC_RETENTION = "retentionPolicies"
NS_TTL = "message_ttl_in_seconds"
TOPIC_TTL = "messageTTLInSeconds"
NS_BACKLOG_QUOTA = "backlog_quota_map"
TOPIC_BACKLOG_QUOTA = "backLogQuotaMap"
NS_INACTIVE = "inactive_topic_policies"
TOPIC_INACTIVE = "inactiveTopicPolicies"
NS_DELAYED = "delayed_delivery_policies"
TOPIC_DELAYED = "delayedDeliveryPolicies"
NS_MAX_PRODUCERS = "max_producers_per_topic"
NS_SCHEMA_VALIDATION = "schema_validation_enforced"
TOPIC_SCHEMA_VALIDATION = "schemaValidationEnforced"
TOPIC_MAX_PRODUCERS = "maxProducerPerTopic"
NS_REPLACE_BY_KEY = "delayed_delivery_replace_by_key"
TOPIC_REPLACE_BY_KEY = "delayedDeliveryReplaceByKey"
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
TOPIC_DISPATCH_RATE = "dispatchRate"
NS_SUBSCRIPTION_DISPATCH_RATE = "subscriptionDispatchRate"
TOPIC_SUBSCRIPTION_DISPATCH_RATE = "subscriptionDispatchRate"
NS_SUBSCRIPTION_TYPES = "subscription_types_enabled"
TOPIC_SUBSCRIPTION_TYPES = "subscriptionTypesEnabled"
NS_AUTO_TOPIC_CREATION = "autoTopicCreationOverride"
NS_AUTO_SUBSCRIPTION_CREATION = "autoSubscriptionCreationOverride"
TOPIC_AUTO_SUBSCRIPTION_CREATION = "autoSubscriptionCreationOverride"

#: Namespace count limits (Policies field -> Pulsar's name in its 412 reasons); 0 is no limit.
NS_COUNT_LIMITS = {NS_MAX_PRODUCERS: "maxProducersPerTopic",
                   NS_MAX_UNACKED_PER_CONSUMER: "maxUnackedMessagesPerConsumer",
                   NS_MAX_UNACKED_PER_SUB: "maxUnackedMessagesPerSubscription",
                   NS_MAX_TOPICS: "maxTopicsPerNamespace",
                   NS_MAX_CONSUMERS: "maxConsumersPerTopic",
                   NS_MAX_CONSUMERS_PER_SUB: "maxConsumersPerSubscription",
                   NS_MAX_SUBSCRIPTIONS: "maxSubscriptionsPerTopic"}

#: Where delayed-delivery bodies were kept before they joined the fields above (read at load).
LEGACY_DELAYED_KINDS = (("namespace_policy", NS_KIND, NS_DELAYED),
                        ("topic_policy", TOPIC_KIND, TOPIC_DELAYED))


class PolicyLimitError(NotAllowedError):
    """A namespace limit refuses to create something (``maxTopicsPerNamespace``): NotAllowed
    on the wire, 412 Precondition Failed over REST, as Pulsar answers."""


@dataclass(frozen=True, slots=True)
class AutoTopicCreation:
    """Whether a producer, consumer or lookup may create a missing topic, and as what."""

    allowed: bool
    partitioned: bool
    partitions: int   # of a partitioned one


class PolicyStore:
    """Namespace and topic policy fields, durable in the metadata store (module docstring)."""

    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.config = config
        self._md = metadata
        self._ns: dict[str, dict[str, Any]] = {}
        self._topics: dict[str, dict[str, Any]] = {}

    async def load(self) -> None:
        self._ns = dict(await self._md.list(NS_KIND))
        self._topics = dict(await self._md.list(TOPIC_KIND))
        for legacy, kind, field in LEGACY_DELAYED_KINDS:
            mirror = self._ns if kind == NS_KIND else self._topics
            for key, body in await self._md.list(legacy):
                if mirror.get(key, {}).get(field) is None:
                    await self._write(kind, mirror, key, field, body)
                await self._md.delete(legacy, key)

    # ------------------------------------------------------------------ raw fields

    def namespace(self, namespace: str) -> dict[str, Any]:
        """A copy of the namespace's stored fields (empty when none is set)."""
        return dict(self._ns.get(namespace, {}))

    def topic(self, full: str) -> dict[str, Any]:
        return dict(self._topics.get(full, {}))

    async def set_namespace_field(self, namespace: str, field: str, value: Any) -> None:
        await self._write(NS_KIND, self._ns, namespace, field, value)

    async def remove_namespace_field(self, namespace: str, field: str) -> None:
        await self._write(NS_KIND, self._ns, namespace, field, None)

    async def set_topic_field(self, full: str, field: str, value: Any) -> None:
        await self._write(TOPIC_KIND, self._topics, full, field, value)

    async def remove_topic_field(self, full: str, field: str) -> None:
        await self._write(TOPIC_KIND, self._topics, full, field, None)

    async def drop_namespace(self, namespace: str) -> None:
        if self._ns.pop(namespace, None) is not None:
            await self._md.delete(NS_KIND, namespace)

    async def drop_topic(self, full: str) -> None:
        if self._topics.pop(full, None) is not None:
            await self._md.delete(TOPIC_KIND, full)

    async def _write(self, kind: str, mirror: dict[str, dict[str, Any]], key: str, field: str,
                     value: Any) -> None:
        fields = dict(mirror.get(key, {}))
        if value is None:
            if field not in fields:
                return
            del fields[field]
        else:
            fields[field] = value
        if fields:
            await self._md.put(kind, key, fields)
            mirror[key] = fields
        else:
            await self._md.delete(kind, key)
            mirror.pop(key, None)

    # ------------------------------------------------------------------ resolution

    def _resolve(self, tn: TopicName, topic_field: str, ns_field: str) -> Any:
        for key in (tn.full, tn.partitioned_parent if tn.is_partition else None):
            if key is not None:
                value = self._topics.get(key, {}).get(topic_field)
                if value is not None:
                    return value
        return self._ns.get(tn.namespace, {}).get(ns_field)

    def dedup_enabled(self, tn: TopicName) -> bool:
        value = self._resolve(tn, TOPIC_DEDUP, NS_DEDUP)
        return self.config.broker_deduplication_enabled if value is None else bool(value)

    def delayed_replace_by_key(self, tn: TopicName) -> bool:
        """Does a keyed delayed message replace the pending one with its key, and a tombstone
        cancel it (:mod:`broker.delayed.replace_by_key`)? Off unless a level sets it."""
        return bool(self._resolve(tn, TOPIC_REPLACE_BY_KEY, NS_REPLACE_BY_KEY))

    def compaction_threshold(self, tn: TopicName) -> int:
        """Backlog bytes above which the topic is compacted automatically (0: never)."""
        value = self._resolve(tn, TOPIC_COMPACTION, NS_COMPACTION)
        return self.config.broker_service_compaction_threshold_in_bytes if value is None \
            else int(value)

    def retention(self, tn: TopicName) -> tuple[int, int]:
        """(retentionTimeInMinutes, retentionSizeInMB); -1 is unlimited, 0 keeps nothing."""
        value = self._resolve(tn, TOPIC_RETENTION, NS_RETENTION)
        if value is None:
            return (self.config.default_retention_time_in_minutes,
                    self.config.default_retention_size_in_mb)
        return int(value["retentionTimeInMinutes"]), int(value["retentionSizeInMB"])

    def message_ttl_s(self, tn: TopicName) -> int:
        """Seconds after which unacknowledged messages expire (0: never)."""
        value = self._resolve(tn, TOPIC_TTL, NS_TTL)
        return self.config.ttl_duration_default_in_seconds if value is None else int(value)

    def backlog_quotas(self, tn: TopicName) -> dict[str, dict[str, Any]]:
        """Quota type (destination_storage, message_age) -> {limitSize, limitTime, policy}."""
        value = self._resolve(tn, TOPIC_BACKLOG_QUOTA, NS_BACKLOG_QUOTA)
        if value is not None:
            return dict(value)
        c = self.config
        out: dict[str, dict[str, Any]] = {}
        if c.backlog_quota_default_limit_bytes >= 0:
            out["destination_storage"] = {
                "limitSize": c.backlog_quota_default_limit_bytes, "limitTime": -1,
                "policy": c.backlog_quota_default_retention_policy}
        if c.backlog_quota_default_limit_second >= 0:
            out["message_age"] = {
                "limitSize": -1, "limitTime": c.backlog_quota_default_limit_second,
                "policy": c.backlog_quota_default_retention_policy}
        return out

    def inactive_topic_policies(self, tn: TopicName) -> dict[str, Any]:
        """{inactiveTopicDeleteMode, maxInactiveDurationSeconds, deleteWhileInactive}."""
        value = self._resolve(tn, TOPIC_INACTIVE, NS_INACTIVE)
        if value is not None:
            return dict(value)
        c = self.config
        return {"inactiveTopicDeleteMode": c.broker_delete_inactive_topics_mode,
                "maxInactiveDurationSeconds":
                    c.broker_delete_inactive_topics_max_inactive_duration_seconds,
                "deleteWhileInactive": c.broker_delete_inactive_topics_enabled}

    def delayed_body(self, level: str, key: str) -> dict[str, Any] | None:
        """The delayed-delivery body stored at *level* (``"namespace"`` or ``"topic"``)."""
        body: dict[str, Any] | None = (self._ns.get(key, {}).get(NS_DELAYED)
                                       if level == "namespace"
                                       else self._topics.get(key, {}).get(TOPIC_DELAYED))
        return body

    def delay_policy(self, tn: TopicName) -> DelayPolicy:
        """The effective delayed-delivery rules: the topic's body (else, for a partition, its
        partitioned topic's) over the namespace's, field by field, over the broker config."""
        topic_body = self._topics.get(tn.full, {}).get(TOPIC_DELAYED)
        if topic_body is None and tn.is_partition:
            topic_body = self._topics.get(tn.partitioned_parent, {}).get(TOPIC_DELAYED)
        ns_body = self._ns.get(tn.namespace, {}).get(NS_DELAYED)
        return resolve_policy(self.config, ns_body, topic_body)

    def max_producers_per_topic(self, tn: TopicName) -> int:
        """Most producers on the topic (0: no limit), ``maxProducersPerTopic`` by default."""
        value = self._resolve(tn, TOPIC_MAX_PRODUCERS, NS_MAX_PRODUCERS)
        return self.config.max_producers_per_topic if value is None else int(value)

    def max_consumers_per_topic(self, tn: TopicName) -> int:
        """Most consumers on the topic (0: no limit), ``maxConsumersPerTopic`` by default."""
        value = self._resolve(tn, TOPIC_MAX_CONSUMERS, NS_MAX_CONSUMERS)
        return self.config.max_consumers_per_topic if value is None else int(value)

    def max_consumers_per_subscription(self, tn: TopicName) -> int:
        """Most consumers on one subscription of the topic (0: no limit),
        ``maxConsumersPerSubscription`` by default."""
        value = self._resolve(tn, TOPIC_MAX_CONSUMERS_PER_SUB, NS_MAX_CONSUMERS_PER_SUB)
        return self.config.max_consumers_per_subscription if value is None else int(value)

    def max_subscriptions_per_topic(self, tn: TopicName) -> int:
        """Most subscriptions on the topic (0: no limit), ``maxSubscriptionsPerTopic`` by
        default; a subscribe that would create one more is refused with NotAllowed."""
        value = self._resolve(tn, TOPIC_MAX_SUBSCRIPTIONS, NS_MAX_SUBSCRIPTIONS)
        return self.config.max_subscriptions_per_topic if value is None else int(value)

    def max_unacked_messages_per_consumer(self, tn: TopicName) -> int:
        """Unacknowledged messages a Shared/Key_Shared consumer may hold (0: no limit),
        ``maxUnackedMessagesPerConsumer`` by default."""
        value = self._resolve(tn, TOPIC_MAX_UNACKED_PER_CONSUMER, NS_MAX_UNACKED_PER_CONSUMER)
        return self.config.max_unacked_messages_per_consumer if value is None else int(value)

    def max_unacked_messages_per_subscription(self, tn: TopicName) -> int:
        """Unacknowledged messages a Shared/Key_Shared subscription may hold (0: no limit),
        ``maxUnackedMessagesPerSubscription`` by default."""
        value = self._resolve(tn, TOPIC_MAX_UNACKED_PER_SUB, NS_MAX_UNACKED_PER_SUB)
        return self.config.max_unacked_messages_per_subscription if value is None \
            else int(value)

    def publish_rate(self, tn: TopicName) -> PublishRate:
        """The topic's (else the namespace's) ``publishRate``, else
        ``maxPublishRatePerTopicInMessages`` / ``...InBytes``."""
        value = self._resolve(tn, TOPIC_PUBLISH_RATE, NS_PUBLISH_RATE)
        if value is None:
            c = self.config
            return PublishRate(c.max_publish_rate_per_topic_in_messages,
                               c.max_publish_rate_per_topic_in_bytes)
        return PublishRate(int(value["publishThrottlingRateInMsg"]),
                           int(value["publishThrottlingRateInByte"]))

    def topic_max_message_size(self, tn: TopicName) -> int:
        """The topic's ``maxMessageSize`` policy in bytes (0: none; the broker's
        ``maxMessageSize`` bounds every frame anyway). Pulsar has no namespace level."""
        for key in (tn.full, tn.partitioned_parent if tn.is_partition else None):
            if key is not None:
                value = self._topics.get(key, {}).get(TOPIC_MAX_MESSAGE_SIZE)
                if value is not None:
                    return int(value)
        return 0

    def subscribe_rate(self, tn: TopicName) -> SubscribeRate:
        """The topic's (else the namespace's) ``subscribeRate``, else
        ``subscribeThrottlingRatePerConsumer`` per ``subscribeRatePeriodPerConsumerInSecond``."""
        value = self._resolve(tn, TOPIC_SUBSCRIBE_RATE, NS_SUBSCRIBE_RATE)
        if value is None:
            c = self.config
            return SubscribeRate(c.subscribe_throttling_rate_per_consumer,
                                 c.subscribe_rate_period_per_consumer_in_second)
        return SubscribeRate(int(value["subscribeThrottlingRatePerConsumer"]),
                             int(value["ratePeriodInSecond"]))

    def topic_dispatch_rate(self, tn: TopicName) -> DispatchRate:
        """The topic's (else the namespace's) ``dispatchRate``, else
        ``dispatchThrottlingRatePerTopicInMsg`` / ``...InByte`` per second."""
        value = self._resolve(tn, TOPIC_DISPATCH_RATE, NS_DISPATCH_RATE)
        if value is None:
            c = self.config
            return DispatchRate(c.dispatch_throttling_rate_per_topic_in_msg,
                                c.dispatch_throttling_rate_per_topic_in_byte, 1)
        return DispatchRate(int(value["dispatchThrottlingRateInMsg"]),
                            int(value["dispatchThrottlingRateInByte"]),
                            int(value["ratePeriodInSecond"]))

    def subscription_dispatch_rate(self, tn: TopicName) -> DispatchRate:
        """The topic's (else the namespace's) ``subscriptionDispatchRate``, else
        ``dispatchThrottlingRatePerSubscriptionInMsg`` / ``...InByte`` per second."""
        value = self._resolve(tn, TOPIC_SUBSCRIPTION_DISPATCH_RATE, NS_SUBSCRIPTION_DISPATCH_RATE)
        if value is None:
            c = self.config
            return DispatchRate(c.dispatch_throttling_rate_per_subscription_in_msg,
                                c.dispatch_throttling_rate_per_subscription_in_byte, 1)
        return DispatchRate(int(value["dispatchThrottlingRateInMsg"]),
                            int(value["dispatchThrottlingRateInByte"]),
                            int(value["ratePeriodInSecond"]))

    def max_topics_per_namespace(self, namespace: str) -> int:
        """Most persistent topics (partitions counting) in *namespace* (0: no limit), the
        namespace's value else ``maxTopicsPerNamespace``."""
        value = self._ns.get(namespace, {}).get(NS_MAX_TOPICS)
        return self.config.max_topics_per_namespace if value is None else int(value)

    def subscription_types_enabled(self, tn: TopicName) -> tuple[str, ...]:
        """The subscription types a SUBSCRIBE may use (Pulsar's names): the topic's (else the
        namespace's) non-empty list, else ``subscriptionTypesEnabled``."""
        value = self._resolve(tn, TOPIC_SUBSCRIPTION_TYPES, NS_SUBSCRIPTION_TYPES)
        if not value:
            return self.config.subscription_types_enabled_names
        return tuple(value)

    def auto_topic_creation(self, tn: TopicName) -> AutoTopicCreation:
        """The namespace's ``autoTopicCreationOverride`` (Pulsar has no topic level), else
        ``allowAutoTopicCreation``, ``allowAutoTopicCreationType``, ``defaultNumPartitions``."""
        c = self.config
        override = self._ns.get(tn.namespace, {}).get(NS_AUTO_TOPIC_CREATION)
        if override is None:
            return AutoTopicCreation(c.allow_auto_topic_creation,
                                     c.allow_auto_topic_creation_type == "partitioned",
                                     c.default_num_partitions)
        partitioned = override.get("topicType") == "partitioned"
        partitions = override.get("defaultNumPartitions")
        return AutoTopicCreation(bool(override.get("allowAutoTopicCreation")), partitioned,
                                 c.default_num_partitions if partitions is None
                                 else int(partitions))

    def allow_auto_subscription_creation(self, tn: TopicName) -> bool:
        """Whether a durable SUBSCRIBE may create a missing subscription: the topic's (else the
        namespace's) ``autoSubscriptionCreationOverride``, else ``allowAutoSubscriptionCreation``."""
        value = self._resolve(tn, TOPIC_AUTO_SUBSCRIPTION_CREATION, NS_AUTO_SUBSCRIPTION_CREATION)
        if value is None:
            return self.config.allow_auto_subscription_creation
        return bool(value.get("allowAutoSubscriptionCreation"))

    def schema_validation_enforced(self, tn: TopicName) -> bool:
        """Producers without a schema are refused on a topic with one: the broker's
        ``isSchemaValidationEnforced`` or the topic's (else the namespace's) policy."""
        if self.config.is_schema_validation_enforced:
            return True
        return bool(self._resolve(tn, TOPIC_SCHEMA_VALIDATION, NS_SCHEMA_VALIDATION))

    def schema_compatibility(self, tn: TopicName) -> str:
        """The compatibility strategy name (Pulsar's SchemaCompatibilityStrategy)."""
        value = self._resolve(tn, TOPIC_SCHEMA_STRATEGY, NS_SCHEMA_STRATEGY)
        if value is None or value == "UNDEFINED":
            return self.config.schema_compatibility_strategy
        return str(value)
