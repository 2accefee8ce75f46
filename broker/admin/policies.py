"""Namespace and topic policies over REST: deduplication, schema compatibility, compaction threshold.

Theory of operation: Pulsar's paths and bodies (``NamespacesBase`` / ``PersistentTopicsBase``):

- ``POST|GET|DELETE /admin/v2/namespaces/{t}/{ns}/deduplication`` (body ``true``/``false``)
  and, per topic, ``.../{topic}/deduplicationEnabled``;
- ``PUT|GET|DELETE .../namespaces/{t}/{ns}/schemaCompatibilityStrategy`` (body a JSON string,
  one of Pulsar's SchemaCompatibilityStrategy names) and per topic
  ``.../{topic}/schemaCompatibilityStrategy`` (``?applied=true``: the strategy in force, topic
  > namespace > broker);
- ``PUT|GET|DELETE .../namespaces/{t}/{ns}/compactionThreshold`` (bytes, >= 0) and per topic
  ``.../{topic}/compactionThreshold``;
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/maxProducersPerTopic`` (>= 0, 0 no limit) and per
  topic ``.../{topic}/maxProducers``; likewise ``maxConsumersPerTopic`` (topic:
  ``maxConsumers``), ``maxConsumersPerSubscription`` and ``maxSubscriptionsPerTopic`` (both
  levels);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/schemaValidationEnforced`` (``true``/``false``)
  and per topic ``.../{topic}/schemaValidationEnforced``;
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/delayedDeliveryReplaceByKey`` (``true``/``false``)
  and per topic ``.../{topic}/delayedDeliveryReplaceByKey``: a keyed delayed message replaces
  the pending one with its key, a tombstone cancels it (:mod:`broker.delayed.replace_by_key`);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/maxUnackedMessagesPerConsumer`` and
  ``.../maxUnackedMessagesPerSubscription``; per topic ``.../maxUnackedMessagesOnConsumer``
  and ``.../maxUnackedMessagesOnSubscription`` (>= 0, 0 no limit);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/maxTopicsPerNamespace`` (namespace level only);
- ``POST|GET|DELETE .../{topic}/maxMessageSize`` (bytes, topic level only, as in Pulsar);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/publishRate`` and per topic the same (a
  PublishRate: ``publishThrottlingRateInMsg``, ``publishThrottlingRateInByte``);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/subscribeRate`` and per topic the same (a
  SubscribeRate: ``subscribeThrottlingRatePerConsumer``, ``ratePeriodInSecond``);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/dispatchRate`` (the topic's rate over all its
  subscriptions) and ``.../subscriptionDispatchRate``, each per topic the same
  (a DispatchRate: ``dispatchThrottlingRateInMsg``, ``...InByte``, ``ratePeriodInSecond``);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/subscriptionTypesEnabled`` (a JSON array of
  subscription type names; empty: the broker's) and per topic the same;
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/autoTopicCreation`` (an AutoTopicCreationOverride:
  ``allowAutoTopicCreation``, ``topicType``, ``defaultNumPartitions``) and
  ``.../autoSubscriptionCreation`` (``{"allowAutoSubscriptionCreation": bool}``, also per topic);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/subscriptionExpirationTime`` (minutes, >= 0;
  namespace level only, as Pulsar's REST API): a subscription without consumers that long is
  deleted (:mod:`broker.topics.subscription_expiry`);
- ``GET /admin/v2/namespaces/{t}/{ns}``: the namespace's Policies document.

Values are validated here (400/412 with Pulsar's reasons), stored by the broker's
:class:`broker.topics.policies.PolicyStore` (``AdminService.policy_store``); the topics read
them when they need them (the next producer, subscription or check), and the limits and rates
reach loaded topics at once (:mod:`broker.topics.live_policies`). GET of an unset value answers ``null``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.namespace_create import NS_ENTRY_FILTERS
from broker.admin.namespaces import NAMESPACE, policy_to_body
from broker.admin.offload_fields import NS_OFFLOAD
from broker.admin.policies_quota import policies_document_fields
from broker.admin.policy_parsers import (
    MAX_MESSAGE_SIZE_REFUSAL,
    SCHEMA_STRATEGIES,
    Parser,
    count_parser,
    parse_auto_subscription_creation,
    parse_auto_topic_creation,
    parse_bool,
    parse_dispatch_rate,
    parse_enabled,
    parse_expiration_minutes,
    parse_producer_limit,
    parse_publish_rate,
    parse_strategy,
    parse_subscribe_rate,
    parse_subscription_types,
    parse_threshold,
)
from broker.admin.responses import (
    json_response,
    namespace_of,
    no_content,
    policy_topic_of,
)
from broker.admin.service import AdminService
from broker.admin.storage_policies import (
    DEFAULT_PERSISTENCE,
    NS_DEDUP_SNAPSHOT,
    NS_PERSISTENCE,
    NS_REPLICATOR_RATE,
    TOPIC_DEDUP_SNAPSHOT,
    TOPIC_PERSISTENCE,
    TOPIC_REPLICATOR_RATE,
    offload_document,
    persistence_body,
    replicator_dispatch_rate,
    snapshot_interval,
)
from broker.admin.topics import TOPIC
from broker.topics import policies as P
from broker.topics import policy_limits as L
from broker.topics.names import TopicName
from broker.topics.policy_records import PolicyRecords
from broker.topics.resource_groups import NS_RESOURCE_GROUP

__all__ = ["SCHEMA_STRATEGIES", "add_routes"]


def _store(admin: AdminService) -> P.PolicyStore:
    return admin.policy_store


async def _topic(request: web.Request) -> tuple[AdminService, str]:
    admin, tn = await policy_topic_of(request)
    return admin, tn.full   # the PolicyStore keys a topic by its full name


Handler = Callable[[web.Request], Awaitable[web.Response]]


@dataclass(frozen=True, slots=True)
class _Scope:
    """One level a policy field is set at: where its routes hang, how a request names the
    key, and the PolicyStore calls that read and write that level."""

    base: str
    locate: Callable[[web.Request], Awaitable[tuple[AdminService, str]]]
    read: Callable[[PolicyRecords, str], dict[str, Any]]
    write: Callable[[PolicyRecords, str, str, Any], Awaitable[None]]
    remove: Callable[[PolicyRecords, str, str], Awaitable[None]]


_NAMESPACE_SCOPE = _Scope(NAMESPACE, namespace_of, PolicyRecords.namespace,
                          PolicyRecords.set_namespace_field, PolicyRecords.remove_namespace_field)
_TOPIC_SCOPE = _Scope(TOPIC, _topic, PolicyRecords.topic,
                      PolicyRecords.set_topic_field, PolicyRecords.remove_topic_field)

# (path suffix, namespace field, topic field, parser); "" where a level has no such route
_FIELDS: tuple[tuple[str, str, str, Parser], ...] = (
    ("deduplication", P.NS_DEDUP, "", parse_bool),
    ("deduplicationEnabled", "", P.TOPIC_DEDUP, parse_bool),
    ("schemaCompatibilityStrategy", P.NS_SCHEMA_STRATEGY, P.TOPIC_SCHEMA_STRATEGY, parse_strategy),
    ("compactionThreshold", P.NS_COMPACTION, "", parse_threshold),
    ("compactionThreshold", "", P.TOPIC_COMPACTION,
     count_parser("compactionThreshold", "bytes", "Invalid value for compactionThreshold")),
    ("maxProducersPerTopic", L.NS_MAX_PRODUCERS, "", parse_producer_limit),
    ("maxProducers", "", L.TOPIC_MAX_PRODUCERS, count_parser("maxProducers", "producers")),
    ("maxConsumersPerTopic", L.NS_MAX_CONSUMERS, "",
     count_parser("maxConsumersPerTopic", "consumers")),
    ("maxConsumers", "", L.TOPIC_MAX_CONSUMERS, count_parser("maxConsumers", "consumers")),
    ("maxConsumersPerSubscription", L.NS_MAX_CONSUMERS_PER_SUB, "",
     count_parser("maxConsumersPerSubscription", "consumers")),
    ("maxConsumersPerSubscription", "", L.TOPIC_MAX_CONSUMERS_PER_SUB,
     count_parser("maxConsumersPerSubscription", "consumers",
            "Invalid value for maxConsumersPerSubscription")),
    ("maxSubscriptionsPerTopic", L.NS_MAX_SUBSCRIPTIONS, L.TOPIC_MAX_SUBSCRIPTIONS,
     count_parser("maxSubscriptionsPerTopic", "subscriptions")),
    ("schemaValidationEnforced", P.NS_SCHEMA_VALIDATION, P.TOPIC_SCHEMA_VALIDATION, parse_bool),
    ("delayedDeliveryReplaceByKey", P.NS_REPLACE_BY_KEY, P.TOPIC_REPLACE_BY_KEY, parse_bool),
    ("maxUnackedMessagesPerConsumer", L.NS_MAX_UNACKED_PER_CONSUMER, "",
     count_parser("maxUnackedMessagesPerConsumer", "messages")),
    ("maxUnackedMessagesOnConsumer", "", L.TOPIC_MAX_UNACKED_PER_CONSUMER,
     count_parser("maxUnackedNum", "messages")),
    ("maxUnackedMessagesPerSubscription", L.NS_MAX_UNACKED_PER_SUB, "",
     count_parser("maxUnackedMessagesPerSubscription", "messages")),
    ("maxUnackedMessagesOnSubscription", "", L.TOPIC_MAX_UNACKED_PER_SUB,
     count_parser("maxUnackedNum", "messages")),
    ("publishRate", L.NS_PUBLISH_RATE, L.TOPIC_PUBLISH_RATE, parse_publish_rate),
    ("maxMessageSize", "", L.TOPIC_MAX_MESSAGE_SIZE, count_parser("maxMessageSize", "bytes",
                                                            MAX_MESSAGE_SIZE_REFUSAL)),
    ("dispatchRate", L.NS_DISPATCH_RATE, L.TOPIC_DISPATCH_RATE, parse_dispatch_rate),
    ("subscribeRate", L.NS_SUBSCRIBE_RATE, L.TOPIC_SUBSCRIBE_RATE, parse_subscribe_rate),
    ("subscriptionDispatchRate", L.NS_SUBSCRIPTION_DISPATCH_RATE,
     L.TOPIC_SUBSCRIPTION_DISPATCH_RATE, parse_dispatch_rate),
    ("maxTopicsPerNamespace", L.NS_MAX_TOPICS, "",
     count_parser("maxTopicsPerNamespace", "topics")),
    ("subscriptionTypesEnabled", P.NS_SUBSCRIPTION_TYPES, P.TOPIC_SUBSCRIPTION_TYPES,
     parse_subscription_types),
    ("autoTopicCreation", P.NS_AUTO_TOPIC_CREATION, "", parse_auto_topic_creation),
    ("subscriptionExpirationTime", L.NS_SUBSCRIPTION_EXPIRATION, "", parse_expiration_minutes),
    ("autoSubscriptionCreation", P.NS_AUTO_SUBSCRIPTION_CREATION,
     P.TOPIC_AUTO_SUBSCRIPTION_CREATION, parse_auto_subscription_creation),
    ("persistence", NS_PERSISTENCE, TOPIC_PERSISTENCE, persistence_body),
    ("deduplicationSnapshotInterval", NS_DEDUP_SNAPSHOT, "",
     snapshot_interval("interval must be greater than or equal to 0")),
    ("deduplicationSnapshotInterval", "", TOPIC_DEDUP_SNAPSHOT,
     snapshot_interval("interval must be 0 or more")),
    ("replicatorDispatchRate", NS_REPLICATOR_RATE, TOPIC_REPLICATOR_RATE,
     replicator_dispatch_rate),
    ("dispatcherPauseOnAckStatePersistent", P.NS_DISPATCHER_PAUSE, P.TOPIC_DISPATCHER_PAUSE,
     parse_enabled),
)

#: Fields Pulsar has no DELETE route for (a topic answers 405; a namespace's path is then
#: its bundle-deletion route, which refuses the name as a bundle range)
_NO_DELETE = frozenset({P.NS_SCHEMA_VALIDATION, P.TOPIC_SCHEMA_VALIDATION, NS_DEDUP_SNAPSHOT})


#: Fields whose setter Pulsar has only as POST (a PUT is the other verb: 405)
_POST_ONLY = frozenset({P.NS_DISPATCHER_PAUSE, P.TOPIC_DISPATCHER_PAUSE})


def _rate_body(rate: Any) -> dict[str, Any]:
    return {"dispatchThrottlingRateInMsg": rate.msgs, "dispatchThrottlingRateInByte": rate.bytes,
            "relativeToPublishRate": rate.relative, "ratePeriodInSecond": rate.period_s}


#: ``?applied=true`` of a topic's policy: the value in force when the topic sets none (its
#: namespace's, else the broker's), as Pulsar's topic getters answer it
_APPLIED: dict[str, Callable[[AdminService, TopicName], object]] = {
    P.TOPIC_SCHEMA_STRATEGY: lambda a, tn: a.policies.schema_compatibility(tn),
    P.TOPIC_DEDUP: lambda a, tn: _store(a).dedup_enabled(tn),
    P.TOPIC_COMPACTION: lambda a, tn: _store(a).compaction_threshold(tn),
    P.TOPIC_SCHEMA_VALIDATION: lambda a, tn: _store(a).schema_validation_enforced(tn),
    L.TOPIC_MAX_PRODUCERS: lambda a, tn: _store(a).limits.max_producers_per_topic(tn),
    L.TOPIC_MAX_CONSUMERS: lambda a, tn: _store(a).limits.max_consumers_per_topic(tn),
    L.TOPIC_MAX_UNACKED_PER_CONSUMER:
        lambda a, tn: _store(a).limits.max_unacked_messages_per_consumer(tn),
    L.TOPIC_MAX_UNACKED_PER_SUB:
        lambda a, tn: _store(a).limits.max_unacked_messages_per_subscription(tn),
    L.TOPIC_DISPATCH_RATE: lambda a, tn: _rate_body(_store(a).limits.topic_dispatch_rate(tn)),
    L.TOPIC_SUBSCRIBE_RATE: lambda a, tn: {
        "subscribeThrottlingRatePerConsumer": (r := _store(a).limits.subscribe_rate(tn)).per_consumer,
        "ratePeriodInSecond": r.period_s},
    TOPIC_REPLICATOR_RATE: lambda a, tn: _store(a).records.namespace_value(
        tn.namespace, NS_REPLICATOR_RATE) or {"dispatchThrottlingRateInMsg": 0,
                                              "dispatchThrottlingRateInByte": 0,
                                              "relativeToPublishRate": False,
                                              "ratePeriodInSecond": 1},
    TOPIC_PERSISTENCE: lambda a, tn: _store(a).records.namespace_value(
        tn.namespace, NS_PERSISTENCE) or dict(DEFAULT_PERSISTENCE),
    P.TOPIC_DISPATCHER_PAUSE: lambda a, tn: P.dispatcher_pause_on_ack_state(
        _store(a).records, _store(a).config, tn),
}


#: Topic fields whose GET answers 204 (no body) while unset: Pulsar's getters of an Optional
_NO_CONTENT_WHEN_UNSET = frozenset({L.TOPIC_MAX_CONSUMERS_PER_SUB, L.TOPIC_MAX_SUBSCRIPTIONS,
                                    L.TOPIC_PUBLISH_RATE, P.TOPIC_SUBSCRIPTION_TYPES,
                                    L.TOPIC_MAX_MESSAGE_SIZE})


def _handlers(scope: _Scope, field: str, parse: Parser) -> tuple[Handler, Handler, Handler]:
    # what GET answers while unset: Pulsar's namespace strategy reads "UNDEFINED", its
    # namespace subscription types an empty set, its max topics per namespace 0, schema
    # validation (a primitive boolean in its policies) false at both levels, others null
    unset: object = {P.NS_SCHEMA_STRATEGY: "UNDEFINED", P.NS_SUBSCRIPTION_TYPES: [],
                     L.NS_MAX_TOPICS: 0, P.NS_SCHEMA_VALIDATION: False,
                     P.NS_DISPATCHER_PAUSE: False,   # also the topic's (the same key)
                     P.TOPIC_SCHEMA_VALIDATION: False}.get(field)
    applied_of = _APPLIED.get(field) if scope is _TOPIC_SCOPE else None
    no_content_unset = scope is _TOPIC_SCOPE and field in _NO_CONTENT_WHEN_UNSET
    # Pulsar removes a topic's subscription types by storing an empty list (read as unset)
    removed: object = [] if (scope is _TOPIC_SCOPE and field == P.TOPIC_SUBSCRIPTION_TYPES) \
        else None

    async def get(request: web.Request) -> web.Response:
        admin, key = await scope.locate(request)
        applied = request.query.get("applied", "false").lower() in ("1", "true")
        value = scope.read(_store(admin).records, key).get(field)
        if applied and value is None and applied_of is not None:
            # the value in force: topic > namespace > broker (Pulsar's applied read)
            return json_response(applied_of(admin, TopicName.parse(key)))
        if applied and field == P.NS_SCHEMA_VALIDATION and not value:
            return json_response(_store(admin).config.is_schema_validation_enforced)
        if value is None and no_content_unset:
            return no_content()
        return json_response(unset if value is None else value)

    async def put(request: web.Request) -> web.Response:
        body = bodies.load_json(await request.read())
        admin, key = await scope.locate(request)
        value = parse(body)
        if field == L.TOPIC_MAX_MESSAGE_SIZE and isinstance(value, int) \
                and value > _store(admin).config.max_message_size:
            raise E.precondition_failed(MAX_MESSAGE_SIZE_REFUSAL)
        await scope.write(_store(admin).records, key, field, value)
        if scope is _NAMESPACE_SCOPE and field == L.NS_DISPATCH_RATE:
            # Pulsar writes its deprecated per-cluster rate with it
            await scope.write(_store(admin).records, key, L.NS_CLUSTER_DISPATCH_RATE, value)
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        admin, key = await scope.locate(request)
        if removed is None:
            await scope.remove(_store(admin).records, key, field)
            if scope is _NAMESPACE_SCOPE and field == L.NS_DISPATCH_RATE:
                await scope.remove(_store(admin).records, key, L.NS_CLUSTER_DISPATCH_RATE)
        else:
            await scope.write(_store(admin).records, key, field, removed)
        return no_content()

    return get, put, delete


async def get_namespace_policies(request: web.Request) -> web.Response:
    """Pulsar's Policies document of a namespace (the fields Horae keeps; unset ones left out)."""
    admin, ns = await namespace_of(request)
    fields = _store(admin).records.namespace(ns)
    delayed = admin.policies.delayed_body(ns)
    doc: dict[str, Any] = {
        "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
        "replication_clusters": [admin.broker.cluster_name],
        "deduplicationEnabled": fields.get(P.NS_DEDUP),
        "schema_compatibility_strategy": fields.get(P.NS_SCHEMA_STRATEGY, "UNDEFINED"),
        "compaction_threshold": fields.get(P.NS_COMPACTION),
        "max_producers_per_topic": fields.get(L.NS_MAX_PRODUCERS),
        "max_consumers_per_topic": fields.get(L.NS_MAX_CONSUMERS),
        "max_consumers_per_subscription": fields.get(L.NS_MAX_CONSUMERS_PER_SUB),
        "max_subscriptions_per_topic": fields.get(L.NS_MAX_SUBSCRIPTIONS),
        "max_unacked_messages_per_consumer": fields.get(L.NS_MAX_UNACKED_PER_CONSUMER),
        "max_unacked_messages_per_subscription": fields.get(L.NS_MAX_UNACKED_PER_SUB),
        "max_topics_per_namespace": fields.get(L.NS_MAX_TOPICS),
        "subscription_expiration_time_minutes": fields.get(L.NS_SUBSCRIPTION_EXPIRATION),
        # Pulsar keys a namespace's rates by cluster
        "clusterSubscribeRate": {admin.broker.cluster_name: rate}
        if (rate := fields.get(L.NS_SUBSCRIBE_RATE)) is not None else None,
        "topicDispatchRate": {admin.broker.cluster_name: rate}
        if (rate := fields.get(L.NS_DISPATCH_RATE)) is not None else None,
        "clusterDispatchRate": {admin.broker.cluster_name: rate}
        if (rate := fields.get(L.NS_CLUSTER_DISPATCH_RATE)) is not None else None,
        "publishMaxMessageRate": {admin.broker.cluster_name: rate}
        if (rate := fields.get(L.NS_PUBLISH_RATE)) is not None else None,
        "subscriptionDispatchRate": {admin.broker.cluster_name: rate}
        if (rate := fields.get(L.NS_SUBSCRIPTION_DISPATCH_RATE)) is not None else None,
        "subscription_types_enabled": fields.get(P.NS_SUBSCRIPTION_TYPES, []),
        "autoTopicCreationOverride": fields.get(P.NS_AUTO_TOPIC_CREATION),
        "autoSubscriptionCreationOverride": fields.get(P.NS_AUTO_SUBSCRIPTION_CREATION),
        "schema_validation_enforced": bool(fields.get(P.NS_SCHEMA_VALIDATION, False)),
        "is_allow_auto_update_schema": fields.get(P.NS_ALLOW_AUTO_UPDATE_SCHEMA),
        "encryption_required": bool(fields.get(P.NS_ENCRYPTION_REQUIRED, False)),
        "subscription_auth_mode": admin.tenants.subscription_auth_mode(ns),
        "schema_auto_update_compatibility_strategy": fields.get(P.NS_SCHEMA_AUTO_UPDATE_STRATEGY),
        "delayed_delivery_replace_by_key": fields.get(P.NS_REPLACE_BY_KEY),
        "resource_group_name": fields.get(NS_RESOURCE_GROUP),
        "offload_policies": offload_document(fields.get(NS_OFFLOAD)),
        "offload_threshold": fields.get("offload_threshold"),
        "offload_threshold_in_seconds": fields.get("offload_threshold_in_seconds"),
        "offload_deletion_lag_ms": fields.get("offload_deletion_lag_ms"),
        "entryFilters": fields.get(NS_ENTRY_FILTERS),
        "delayed_delivery_policies": None,
        **policies_document_fields(_store(admin), ns),
    }
    if delayed is not None:
        doc["delayed_delivery_policies"] = policy_to_body(
            admin.policies.resolve_namespace_delay(delayed))
    # Pulsar leaves out the policies a namespace does not set (its Policies omits nulls)
    return json_response({key: value for key, value in doc.items() if value is not None})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(NAMESPACE, get_namespace_policies)
    for suffix, ns_field, topic_field, parse in _FIELDS:
        for scope, field in ((_NAMESPACE_SCOPE, ns_field), (_TOPIC_SCOPE, topic_field)):
            if not field:
                continue
            get, put, delete = _handlers(scope, field, parse)
            path = f"{scope.base}/{suffix}"
            r.add_get(path, get)
            r.add_post(path, put)
            if field not in _POST_ONLY:
                r.add_put(path, put)
            if field not in _NO_DELETE:
                r.add_delete(path, delete)
