"""Namespace and topic policies (Pulsar's ``Policies`` / ``TopicPolicies`` fields) and their resolution.

Theory of operation
-------------------
One :class:`PolicyStore` per broker, owned by :class:`broker.topics.service.BrokerService`
(``service.policies``), made of two collaborators and the resolvers of the remaining policies:

- ``records`` (:class:`broker.topics.policy_records.PolicyRecords`): the fields as stored, kind
  ``"ns_policies"`` (key ``"tenant/ns"``, Pulsar's ``Policies`` JSON names) and kind
  ``"topic_policies"`` (key the full topic name; a partitioned topic's parent name covers its
  partitions; Pulsar's ``TopicPolicies`` names), durable before they are mirrored, with the
  watchers told of each change (:mod:`broker.topics.live_policies` applies it to loaded topics);
- ``limits`` (:class:`broker.topics.policy_limits.LimitPolicies`): count limits and rates;
- here: deduplication, compaction, retention, TTL, backlog quotas, inactive-topic deletion,
  delayed delivery, subscription types, auto-creation and schema policies.

Resolution (:meth:`dedup_enabled`, :meth:`compaction_threshold`,
:meth:`schema_compatibility`, ...): the topic's value, else its partitioned topic's, else the
namespace's, else the broker configuration (``brokerDeduplicationEnabled``,
``brokerServiceCompactionThresholdInBytes``, ``schemaCompatibilityStrategy``). Readers are the
service (PRODUCER, SUBSCRIBE, housekeeping) and the admin API; nothing here touches topics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig
from broker.delayed.policy import DelayPolicy, resolve_policy
from broker.topics import policy_limits as L
from broker.topics.names import TopicName
from broker.topics.policy_limits import LimitPolicies
from broker.topics.policy_records import NS_KIND, TOPIC_KIND, PolicyRecords
from broker.topics.resource_groups import ResourceGroups
from protocol.errors import NotAllowedError
from storage.metadata import MetadataStore

__all__ = ["NS_COUNT_LIMITS", "NS_DELAYED", "NS_KIND", "TOPIC_DELAYED", "TOPIC_KIND",
           "AutoTopicCreation", "PolicyLimitError", "PolicyStore", "ack_state_ranges_limit",
           "dispatcher_pause_on_ack_state", "encryption_required"]


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
NS_SCHEMA_VALIDATION = "schema_validation_enforced"
TOPIC_SCHEMA_VALIDATION = "schemaValidationEnforced"
NS_REPLACE_BY_KEY = "delayed_delivery_replace_by_key"
TOPIC_REPLACE_BY_KEY = "delayedDeliveryReplaceByKey"
NS_SUBSCRIPTION_TYPES = "subscription_types_enabled"
TOPIC_SUBSCRIPTION_TYPES = "subscriptionTypesEnabled"
NS_AUTO_TOPIC_CREATION = "autoTopicCreationOverride"
NS_AUTO_SUBSCRIPTION_CREATION = "autoSubscriptionCreationOverride"
TOPIC_AUTO_SUBSCRIPTION_CREATION = "autoSubscriptionCreationOverride"
NS_ALLOW_AUTO_UPDATE_SCHEMA = "is_allow_auto_update_schema"
NS_SCHEMA_AUTO_UPDATE_STRATEGY = "schema_auto_update_compatibility_strategy"
NS_ENCRYPTION_REQUIRED = "encryption_required"
NS_DISPATCHER_PAUSE = "dispatcherPauseOnAckStatePersistentEnabled"
TOPIC_DISPATCHER_PAUSE = "dispatcherPauseOnAckStatePersistentEnabled"

#: Pulsar's SchemaCompatibilityStrategy.fromAutoUpdatePolicy (AutoUpdateDisabled and unknown
#: names: ALWAYS_INCOMPATIBLE)
_FROM_AUTO_UPDATE = {"Backward": "BACKWARD", "Forward": "FORWARD", "Full": "FULL",
                     "AlwaysCompatible": "ALWAYS_COMPATIBLE",
                     "ForwardTransitive": "FORWARD_TRANSITIVE",
                     "BackwardTransitive": "BACKWARD_TRANSITIVE",
                     "FullTransitive": "FULL_TRANSITIVE"}

#: Namespace count limits (Policies field -> Pulsar's name in its 412 reasons); 0 is no limit.
NS_COUNT_LIMITS = {L.NS_MAX_PRODUCERS: "maxProducersPerTopic",
                   L.NS_MAX_UNACKED_PER_CONSUMER: "maxUnackedMessagesPerConsumer",
                   L.NS_MAX_UNACKED_PER_SUB: "maxUnackedMessagesPerSubscription",
                   L.NS_MAX_TOPICS: "maxTopicsPerNamespace",
                   L.NS_MAX_CONSUMERS: "maxConsumersPerTopic",
                   L.NS_MAX_CONSUMERS_PER_SUB: "maxConsumersPerSubscription",
                   L.NS_MAX_SUBSCRIPTIONS: "maxSubscriptionsPerTopic"}

#: Where delayed-delivery bodies were kept before they joined the fields above (read at load).
LEGACY_DELAYED_KINDS = (("namespace_policy", NS_KIND, NS_DELAYED),
                        ("topic_policy", TOPIC_KIND, TOPIC_DELAYED))


def encryption_required(records: PolicyRecords, tn: TopicName) -> bool:
    """Must producers encrypt (the namespace's ``encryption_required``)? Never on system
    topics, as in Pulsar."""
    if tn.local_name.startswith("__"):
        return False
    return bool(records.namespace_value(tn.namespace, NS_ENCRYPTION_REQUIRED))


def dispatcher_pause_on_ack_state(records: PolicyRecords, config: BrokerConfig,
                                  tn: TopicName) -> bool:
    """dispatcherPauseOnAckStatePersistent in force: topic over namespace over the broker's
    ``dispatcherPauseOnAckStatePersistentEnabled``."""
    value = records.resolve(tn, TOPIC_DISPATCHER_PAUSE, NS_DISPATCHER_PAUSE)
    return config.dispatcher_pause_on_ack_state_persistent_enabled if value is None \
        else bool(value)


def ack_state_ranges_limit(records: PolicyRecords, config: BrokerConfig, tn: TopicName) -> int:
    """The acknowledged ranges a cursor of *tn* may hold before new reads pause (0: never)."""
    if not dispatcher_pause_on_ack_state(records, config, tn):
        return 0
    return max(1, config.managed_ledger_max_unacked_ranges_to_persist)


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
    """The policies of topics, resolved (module docstring): the stored fields are
    :attr:`records`, the limits and rates :attr:`limits`; the rest is resolved here."""

    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.config = config
        self.records = PolicyRecords(metadata)
        self.limits = LimitPolicies(self.records, lambda: self.config)
        #: resource groups and the quotas their namespaces share
        self.resource_groups = ResourceGroups(metadata, self.records)

    async def load(self) -> None:
        await self.records.load(LEGACY_DELAYED_KINDS)
        await self.resource_groups.load()

    def _resolve(self, tn: TopicName, topic_field: str, ns_field: str) -> Any:
        return self.records.resolve(tn, topic_field, ns_field)

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
        body: dict[str, Any] | None = (self.records.namespace_value(key, NS_DELAYED)
                                       if level == "namespace"
                                       else self.records.topic(key).get(TOPIC_DELAYED))
        return body

    def delay_policy(self, tn: TopicName) -> DelayPolicy:
        """The effective delayed-delivery rules: the topic's body (else, for a partition, its
        partitioned topic's) over the namespace's, field by field, over the broker config."""
        topic_body = self.records.topic_value(tn, TOPIC_DELAYED)
        ns_body = self.records.namespace_value(tn.namespace, NS_DELAYED)
        return resolve_policy(self.config, ns_body, topic_body)

    def subscription_types_enabled(self, tn: TopicName) -> tuple[str, ...]:
        """The subscription types a SUBSCRIBE may use (Pulsar's names): the topic's (else the
        namespace's) non-empty list, else ``subscriptionTypesEnabled``. An empty list is unset
        (Pulsar removes a topic's by storing one)."""
        value = self.records.topic_value(tn, TOPIC_SUBSCRIPTION_TYPES) or \
            self.records.namespace_value(tn.namespace, NS_SUBSCRIPTION_TYPES)
        if not value:
            return self.config.subscription_types_enabled_names
        return tuple(value)

    def auto_topic_creation(self, tn: TopicName) -> AutoTopicCreation:
        """The namespace's ``autoTopicCreationOverride`` (Pulsar has no topic level), else
        ``allowAutoTopicCreation``, ``allowAutoTopicCreationType``, ``defaultNumPartitions``."""
        c = self.config
        override = self.records.namespace_value(tn.namespace, NS_AUTO_TOPIC_CREATION)
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

    def allow_auto_update_schema(self, tn: TopicName) -> bool:
        """May a producer register a schema the topic does not have yet? The namespace's
        ``is_allow_auto_update_schema``, else the broker's ``isAllowAutoUpdateSchemaEnabled``;
        always on system topics, as in Pulsar."""
        if tn.local_name.startswith("__"):
            return True
        value = self.records.namespace_value(tn.namespace, NS_ALLOW_AUTO_UPDATE_SCHEMA)
        return self.config.is_allow_auto_update_schema_enabled if value is None else bool(value)

    def encryption_required(self, tn: TopicName) -> bool:
        return encryption_required(self.records, tn)

    def schema_compatibility(self, tn: TopicName) -> str:
        """The compatibility strategy name (Pulsar's SchemaCompatibilityStrategy): the topic's,
        else the namespace's, else (while that is UNDEFINED) its deprecated auto-update
        strategy, else the broker's."""
        value = self._resolve(tn, TOPIC_SCHEMA_STRATEGY, NS_SCHEMA_STRATEGY)
        if value is None or value == "UNDEFINED":
            auto = self.records.namespace_value(tn.namespace, NS_SCHEMA_AUTO_UPDATE_STRATEGY)
            if auto is not None:
                return _FROM_AUTO_UPDATE.get(str(auto), "ALWAYS_INCOMPATIBLE")
            return self.config.schema_compatibility_strategy
        return str(value)
