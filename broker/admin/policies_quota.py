"""Namespace and topic policies over REST: retention, message TTL, backlog quotas, inactive topics.

Theory of operation: Pulsar's paths and bodies (``Namespaces`` / ``PersistentTopics``):

- ``POST|GET|DELETE .../namespaces/{t}/{ns}/retention`` and ``.../{topic}/retention``, body
  ``{"retentionTimeInMinutes": m, "retentionSizeInMB": s}`` (-1 unlimited);
- ``POST|GET|DELETE .../namespaces/{t}/{ns}/messageTTL`` (body: seconds) and
  ``.../{topic}/messageTTL?messageTTL=seconds`` (a body is accepted too);
- ``POST|DELETE .../backlogQuota?backlogQuotaType=destination_storage|message_age`` with
  ``{"limitSize", "limitTime", "policy"}`` (``limit`` is the old name of ``limitSize``) and
  ``GET .../backlogQuotaMap``, at both levels;
- ``POST|GET|DELETE .../inactiveTopicPolicies`` with ``{"inactiveTopicDeleteMode",
  "maxInactiveDurationSeconds", "deleteWhileInactive"}``, at both levels.

Values are checked here (400 malformed, 412 out of range, with Pulsar's reasons) and stored
in the :class:`broker.topics.policies.PolicyStore` under Pulsar's ``Policies`` /
``TopicPolicies`` names; the topics read them at their next check (TTL and quota checks,
trimming, the inactive-topic sweep), so a change needs no restart. GET of an unset value
answers ``null`` (``?applied=true``: the value in force, after topic > namespace > broker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.namespaces import NAMESPACE
from broker.admin.policy_parsers import (
    parse_inactive,
    parse_quota,
    parse_retention,
    parse_topic_ttl,
    parse_ttl,
)
from broker.admin.responses import admin_of, json_response, no_content
from broker.admin.service import topic_name
from broker.admin.topics import TOPIC
from broker.topics import policies as P
from broker.topics.names import TopicName
from protocol import admin_names

__all__ = ["QUOTA_TYPES", "add_routes"]

QUOTA_TYPES = admin_names.BACKLOG_QUOTA_TYPES
Handler = Callable[[web.Request], Awaitable[web.Response]]


class _Target:
    """A namespace or a topic a request names, with the store fields of its level."""

    def __init__(self, store: P.PolicyStore, namespace: str, topic: TopicName | None) -> None:
        self.store = store
        self.namespace = namespace   # "tenant/ns"
        self.topic = topic           # None: the namespace level

    def get(self, ns_field: str, topic_field: str) -> Any:
        if self.topic is not None:
            return self.store.records.topic(self.topic.full).get(topic_field)
        return self.store.records.namespace(self.namespace).get(ns_field)

    async def set(self, ns_field: str, topic_field: str, value: Any) -> None:
        if self.topic is not None:
            await self.store.records.set_topic_field(self.topic.full, topic_field, value)
        else:
            await self.store.records.set_namespace_field(self.namespace, ns_field, value)

    def applied_name(self) -> TopicName:
        """The topic the value in force is resolved for (any topic, for a namespace)."""
        if self.topic is not None:
            return self.topic
        return TopicName.parse(f"persistent://{self.namespace}/_")


async def _target(request: web.Request) -> _Target:
    admin = admin_of(request)
    m = request.match_info
    await admin.tenants.require_namespace(m["tenant"], m["namespace"])
    namespace = f"{m['tenant']}/{m['namespace']}"
    if "topic" in m:
        tn = topic_name(m["tenant"], m["namespace"], m["topic"])
        await admin.topics.require_policy_topic(tn)
        return _Target(admin.policy_store, namespace, tn)
    return _Target(admin.policy_store, namespace, None)


def _applied(request: web.Request) -> bool:
    return request.query.get("applied", "false").lower() == "true"


# --- simple fields -------------------------------------------------------------------------
def _field(ns_field: str, topic_field: str, parse: Callable[[object], Any],
           applied: Callable[[P.PolicyStore, TopicName], Any]) -> tuple[Handler, Handler,
                                                                          Handler]:
    async def get(request: web.Request) -> web.Response:
        t = await _target(request)
        if _applied(request):
            return json_response(applied(t.store, t.applied_name()))
        return json_response(t.get(ns_field, topic_field))

    async def set_(request: web.Request) -> web.Response:
        raw = await request.read()
        if topic_field == P.TOPIC_TTL and "messageTTL" in request.query:
            try:
                body: object = int(request.query["messageTTL"])
            except ValueError:
                raise E.bad_request("Invalid message TTL: expected an integer") from None
        else:
            body = bodies.load_json(raw)
        value = parse(body)
        t = await _target(request)
        await t.set(ns_field, topic_field, value)
        return no_content()

    async def delete(request: web.Request) -> web.Response:
        t = await _target(request)
        await t.set(ns_field, topic_field, None)
        return no_content()

    return get, set_, delete


def _retention_applied(store: P.PolicyStore, tn: TopicName) -> dict[str, int]:
    minutes, size = store.retention(tn)
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}


# --- backlog quotas ------------------------------------------------------------------------
def _quota_type(request: web.Request) -> str:
    kind = request.query.get("backlogQuotaType", "destination_storage")
    if kind not in QUOTA_TYPES:
        raise E.bad_request(f"Invalid backlogQuotaType {kind!r}: one of " + ", ".join(QUOTA_TYPES))
    return kind


def _written(quotas: dict[str, Any]) -> dict[str, Any]:
    """A quota map as Pulsar writes it: each quota also under its deprecated ``limit`` name."""
    return {kind: {"limit": quota.get("limitSize"), **quota} if isinstance(quota, dict) else quota
            for kind, quota in quotas.items()}


async def get_quota_map(request: web.Request) -> web.Response:
    t = await _target(request)
    if _applied(request):
        return json_response(_written(t.store.backlog_quotas(t.applied_name())))
    return json_response(_written(t.get(P.NS_BACKLOG_QUOTA, P.TOPIC_BACKLOG_QUOTA) or {}))


async def set_quota(request: web.Request) -> web.Response:
    kind = _quota_type(request)
    quota = parse_quota(bodies.load_json(await request.read()))
    t = await _target(request)
    current = dict(t.get(P.NS_BACKLOG_QUOTA, P.TOPIC_BACKLOG_QUOTA) or {})
    current[kind] = quota
    await t.set(P.NS_BACKLOG_QUOTA, P.TOPIC_BACKLOG_QUOTA, current)
    return no_content()


async def remove_quota(request: web.Request) -> web.Response:
    kind = _quota_type(request)
    t = await _target(request)
    current = dict(t.get(P.NS_BACKLOG_QUOTA, P.TOPIC_BACKLOG_QUOTA) or {})
    current.pop(kind, None)
    await t.set(P.NS_BACKLOG_QUOTA, P.TOPIC_BACKLOG_QUOTA, current or None)
    return no_content()


def policies_document_fields(store: P.PolicyStore, namespace: str) -> dict[str, Any]:
    """The fields of this module in a namespace's Policies document (GET namespace)."""
    fields = store.records.namespace(namespace)
    return {
        "retention_policies": fields.get(P.NS_RETENTION),
        "message_ttl_in_seconds": fields.get(P.NS_TTL),
        "backlog_quota_map": _written(fields.get(P.NS_BACKLOG_QUOTA) or {}),
        "inactive_topic_policies": fields.get(P.NS_INACTIVE),
    }


def add_routes(app: web.Application) -> None:
    r = app.router
    simple = (
        ("retention", P.NS_RETENTION, P.TOPIC_RETENTION, parse_retention, _retention_applied),
        ("messageTTL", P.NS_TTL, P.TOPIC_TTL, parse_ttl,
         lambda store, tn: store.message_ttl_s(tn)),
        ("inactiveTopicPolicies", P.NS_INACTIVE, P.TOPIC_INACTIVE, parse_inactive,
         lambda store, tn: store.inactive_topic_policies(tn)),
    )
    for base in (NAMESPACE, TOPIC):
        for suffix, ns_field, topic_field, parse, applied in simple:
            if base == TOPIC and parse is parse_ttl:
                parse = parse_topic_ttl
            get, set_, delete = _field(ns_field, topic_field, parse, applied)
            r.add_get(f"{base}/{suffix}", get)
            r.add_post(f"{base}/{suffix}", set_)
            r.add_put(f"{base}/{suffix}", set_)
            r.add_delete(f"{base}/{suffix}", delete)
        r.add_get(f"{base}/backlogQuotaMap", get_quota_map)
        r.add_post(f"{base}/backlogQuota", set_quota)
        r.add_delete(f"{base}/backlogQuota", remove_quota)
