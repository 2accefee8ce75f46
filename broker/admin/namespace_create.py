"""The policies a create-namespace body (Pulsar ``Policies``) sets, checked before the namespace exists.

Theory of operation: ``PUT /admin/v2/namespaces/{t}/{ns}`` with a Policies document creates
the namespace with every policy of it Horae keeps, as Pulsar stores the whole document. Each
field goes through the parser its own route uses (:mod:`broker.admin.policy_parsers`), so a
bad value is refused with that route's status and reason and nothing is created. Pulsar keys
a namespace's rates by cluster: the entry of this node's cluster is taken. Values that are
Pulsar's defaults of a primitive field (``false``, ``"UNDEFINED"``, ``-1``, empty maps and
lists) are left unset, which every getter reads the same way. The deprecated
``clusterDispatchRate`` is kept apart, as Pulsar keeps it: its topics' dispatch rate when
``topicDispatchRate`` has no entry for this cluster. ``resource_group_name`` attaches the
namespace to its group, unchecked as Pulsar's create leaves it (a group that does not exist
limits nothing until it is created). Offload settings and entry filters are kept as Pulsar
keeps them, with no effect on one node.
"""

from __future__ import annotations

from typing import Any

from broker.admin import errors as E
from broker.admin import policy_parsers as PP
from broker.admin.offload_fields import NS_OFFLOAD, legacy_of_create, offload_fields
from broker.admin.properties_routes import PROPERTIES, parse_properties
from broker.admin.schema_policies import AUTO_UPDATE_STRATEGIES
from broker.topics import policies as P
from broker.topics import policy_limits as L
from broker.topics.resource_groups import NS_RESOURCE_GROUP
from protocol import admin_names

__all__ = ["NS_ENTRY_FILTERS", "NS_OFFLOAD", "policy_fields_of_create"]

#: the namespace field of the entry filters (Pulsar's name)
NS_ENTRY_FILTERS = "entryFilters"

#: Policies key -> (namespace field, parser) of a plain value
_PLAIN: dict[str, tuple[str, PP.Parser]] = {
    P.NS_DEDUP: (P.NS_DEDUP, PP.parse_bool),
    P.NS_SCHEMA_STRATEGY: (P.NS_SCHEMA_STRATEGY, PP.parse_strategy),
    P.NS_COMPACTION: (P.NS_COMPACTION, PP.parse_threshold),
    L.NS_MAX_PRODUCERS: (L.NS_MAX_PRODUCERS, PP.parse_producer_limit),
    L.NS_MAX_CONSUMERS: (L.NS_MAX_CONSUMERS, PP.count_parser("maxConsumersPerTopic",
                                                              "consumers")),
    L.NS_MAX_CONSUMERS_PER_SUB: (L.NS_MAX_CONSUMERS_PER_SUB, PP.count_parser(
        "maxConsumersPerSubscription", "consumers")),
    L.NS_MAX_SUBSCRIPTIONS: (L.NS_MAX_SUBSCRIPTIONS, PP.count_parser(
        "maxSubscriptionsPerTopic", "subscriptions")),
    L.NS_MAX_UNACKED_PER_CONSUMER: (L.NS_MAX_UNACKED_PER_CONSUMER, PP.count_parser(
        "maxUnackedMessagesPerConsumer", "messages")),
    L.NS_MAX_UNACKED_PER_SUB: (L.NS_MAX_UNACKED_PER_SUB, PP.count_parser(
        "maxUnackedMessagesPerSubscription", "messages")),
    L.NS_MAX_TOPICS: (L.NS_MAX_TOPICS, PP.count_parser("maxTopicsPerNamespace", "topics")),
    L.NS_SUBSCRIPTION_EXPIRATION: (L.NS_SUBSCRIPTION_EXPIRATION, PP.parse_expiration_minutes),
    P.NS_SCHEMA_VALIDATION: (P.NS_SCHEMA_VALIDATION, PP.parse_bool),
    P.NS_REPLACE_BY_KEY: (P.NS_REPLACE_BY_KEY, PP.parse_bool),
    P.NS_SUBSCRIPTION_TYPES: (P.NS_SUBSCRIPTION_TYPES, PP.parse_subscription_types),
    P.NS_AUTO_TOPIC_CREATION: (P.NS_AUTO_TOPIC_CREATION, PP.parse_auto_topic_creation),
    P.NS_AUTO_SUBSCRIPTION_CREATION: (P.NS_AUTO_SUBSCRIPTION_CREATION,
                                      PP.parse_auto_subscription_creation),
    P.NS_ALLOW_AUTO_UPDATE_SCHEMA: (P.NS_ALLOW_AUTO_UPDATE_SCHEMA, PP.parse_bool),
    P.NS_ENCRYPTION_REQUIRED: (P.NS_ENCRYPTION_REQUIRED, PP.parse_bool),
    P.NS_DISPATCHER_PAUSE: (P.NS_DISPATCHER_PAUSE, PP.parse_bool),
    P.NS_RETENTION: (P.NS_RETENTION, PP.parse_retention),
    P.NS_TTL: (P.NS_TTL, PP.parse_ttl),
    P.NS_INACTIVE: (P.NS_INACTIVE, PP.parse_inactive),
    "persistence": ("persistence", PP.persistence_body),
    "deduplicationSnapshotIntervalSeconds": ("deduplicationSnapshotInterval",
                                             PP.snapshot_interval(
                                                 "interval must be greater than or equal to 0")),
}

#: Policies key of a per-cluster rate -> (namespace field, parser of one cluster's rate)
_PER_CLUSTER: dict[str, tuple[str, PP.Parser]] = {
    L.NS_DISPATCH_RATE: (L.NS_DISPATCH_RATE, PP.parse_dispatch_rate),
    L.NS_CLUSTER_DISPATCH_RATE: (L.NS_CLUSTER_DISPATCH_RATE, PP.parse_dispatch_rate),
    L.NS_SUBSCRIPTION_DISPATCH_RATE: (L.NS_SUBSCRIPTION_DISPATCH_RATE, PP.parse_dispatch_rate),
    L.NS_SUBSCRIBE_RATE: (L.NS_SUBSCRIBE_RATE, PP.parse_subscribe_rate),
    L.NS_PUBLISH_RATE: (L.NS_PUBLISH_RATE, PP.parse_publish_rate),
    "replicatorDispatchRate": ("replicatorDispatchRate", PP.replicator_dispatch_rate),
}

#: values Pulsar's Policies holds when a primitive field is not set
_DEFAULTS: dict[str, object] = {P.NS_SCHEMA_STRATEGY: "UNDEFINED", P.NS_SCHEMA_VALIDATION: False,
                                P.NS_ENCRYPTION_REQUIRED: False,
                                P.NS_SUBSCRIPTION_TYPES: []}


def _backlog_quotas(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise E.bad_request("Invalid backlog_quota_map: expected an object of backlog quotas")
    quotas: dict[str, Any] = {}
    for kind, quota in body.items():
        if kind not in admin_names.BACKLOG_QUOTA_TYPES:
            raise E.bad_request(f"Invalid backlogQuotaType {kind!r}: one of "
                                + ", ".join(admin_names.BACKLOG_QUOTA_TYPES))
        quotas[kind] = PP.parse_quota(quota)
    return quotas


def policy_fields_of_create(policies: dict[str, Any], cluster: str) -> dict[str, Any]:
    """The namespace fields a create body sets, every one checked (400/412 as its route)."""
    fields: dict[str, Any] = {}
    for key, (field, parse) in _PLAIN.items():
        value = policies.get(key)
        if value is None or (key in _DEFAULTS and value == _DEFAULTS[key]):
            continue
        parsed = parse(value)
        if parsed is not None:
            fields[field] = parsed
    for key, (field, parse) in _PER_CLUSTER.items():
        by_cluster = policies.get(key)
        if by_cluster is None:
            continue
        if not isinstance(by_cluster, dict):
            raise E.bad_request(f"Invalid {key}: expected an object keyed by cluster")
        if by_cluster.get(cluster) is not None:
            fields[field] = parse(by_cluster[cluster])
    quotas = policies.get(P.NS_BACKLOG_QUOTA)
    if quotas:
        fields[P.NS_BACKLOG_QUOTA] = _backlog_quotas(quotas)
    strategy = policies.get(P.NS_SCHEMA_AUTO_UPDATE_STRATEGY)
    if strategy is not None:
        if strategy not in AUTO_UPDATE_STRATEGIES:
            raise E.bad_request(
                f"Invalid schema auto update compatibility strategy: {strategy!r}")
        fields[P.NS_SCHEMA_AUTO_UPDATE_STRATEGY] = strategy
    properties = parse_properties(policies.get(PROPERTIES))
    if properties:
        fields[PROPERTIES] = properties
    fields.update(_unused_features(policies))
    group = policies.get(NS_RESOURCE_GROUP)
    if group is not None:
        if not isinstance(group, str):
            raise E.bad_request("Invalid resource_group_name: expected a string")
        fields[NS_RESOURCE_GROUP] = group
    return fields


def _unused_features(policies: dict[str, Any]) -> dict[str, Any]:
    """Offload and entry filters: stored as Pulsar's create stores them (no check of driver,
    bucket or filter names), shown by their getters and the Policies document, with no effect:
    Horae has no tiered storage and no entry filters."""
    fields: dict[str, Any] = dict(legacy_of_create(policies))
    offload = policies.get(NS_OFFLOAD)
    if offload is not None:
        fields[NS_OFFLOAD] = offload_fields(offload)
    filters = policies.get(NS_ENTRY_FILTERS)
    if filters is not None:
        # Pulsar's EntryFilters also reads a bare string as its names
        names = filters.get("entryFilterNames") if isinstance(filters, dict) else filters
        if not isinstance(names, (str, type(None))):
            raise E.bad_request("Invalid entryFilters: expected {\"entryFilterNames\": \"...\"}")
        fields[NS_ENTRY_FILTERS] = {"entryFilterNames": names}
    return fields
