"""Admin REST against Pulsar 4.0 standalone: the same calls, the same status codes and shapes.

Each scenario of :mod:`scenarios_rest` runs against Horae and against Pulsar (names of its
own on each), and every call's status code and body shape (keys and JSON types, not values)
must agree, except where :data:`ALLOWED` lists the difference with its reason. An allowed
difference that no longer shows fails too, so the table stays true. ``HORAE_ORACLE=full`` runs
every scenario, otherwise the sample. A second test checks that the scenarios call every route
Horae's router has, without starting anything.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from typing import Any

import pytest
from peers import Answer, Peer, Peers, shape_diff, unique_names
from scenarios_rest import SAMPLE, SCENARIOS, Call, Publish, Scenario
from scenarios_storage import STORAGE_SCENARIOS

FULL = os.environ.get("HORAE_ORACLE") == "full"
RUN = SCENARIOS if FULL else [s for s in SCENARIOS if s.name in SAMPLE]


@dataclass(frozen=True)
class Allowed:
    scenario: str
    """fnmatch pattern of scenario names"""
    step: str
    """fnmatch pattern of step labels"""
    lines: tuple[str, ...]
    """fnmatch patterns of the difference lines this allows"""
    reason: str
    racy: bool = False
    """Pulsar shows it only sometimes (a race of its own): not required to show"""


JETTY_404 = ("$.message: only in pulsar", "$.servlet: only in pulsar",
             "$.status: only in pulsar", "$.url: only in pulsar", "$.reason: only in horae")
"""A route Pulsar does not have: Jetty's 404 body against Horae's ``{"reason"}``."""


def _only_in_pulsar(*keys: str) -> tuple[str, ...]:
    return tuple(f"$*.{key}: only in pulsar" for key in keys)


def _only_in_horae(*keys: str) -> tuple[str, ...]:
    return tuple(f"$*.{key}: only in horae" for key in keys)


#: Differences from Pulsar 4.0.7 that stay, each with its reason (the README's compatibility
#: section has the same table). A scenario pattern without ``*`` must still show its difference.
ALLOWED: list[Allowed] = [
    Allowed("*", "*bad body*", ("$: horae object, pulsar text",),
            "Pulsar's Jersey answers a body it cannot parse with plain text; Horae answers every "
            'error as Pulsar\'s own handlers do, {"reason": ...}'),
    Allowed("*policy *", "set other verb", ("status: horae 204, pulsar 405",),
            "Horae takes PUT and POST on every policy setter; Pulsar serves one verb per route"),
    Allowed("ns policy schemaCompatibilityStrategy", "remove", ("status: horae 204, pulsar 412",),
            "Pulsar 4.0 has no DELETE for a namespace's strategy (the path falls to its bundle "
            'route: 412 "Invalid bundle range"); Horae removes it, as at topic level'),
    Allowed("*policy schemaCompatibilityStrategy", "set bad body",
            ("status: horae 400, pulsar 204",),
            "Pulsar stores an unknown strategy name; Horae refuses it, naming the strategies"),
    Allowed("*policy inactiveTopicPolicies", "set bad body", ("status: horae 412, pulsar 204",),
            "Pulsar reads an unknown delete mode as null and stores the policy; Horae refuses it"),
    Allowed("topic policy messageTTL", "set bad body", ("status: horae 400, pulsar 204",),
            "Pulsar's topic route reads only ?messageTTL= and ignores a body; Horae also reads "
            "a body and refuses one that is not a number"),
    Allowed("topic policy delayedDelivery", "get applied",
            _only_in_horae("fixedDeliveryDelayInMillis"),
            "Horae's fixed delivery delay (PIP-437), which Pulsar 4.0 does not have"),
    Allowed("wrongly typed bodies", "*", ("$: horae object, pulsar text",),
            "Pulsar's Jackson answers a body of the wrong JSON type with plain text; Horae answers "
            'every error as {"reason": ...}'),
    Allowed("wrongly typed bodies", "partitions", ("status: horae 400, pulsar 204",),
            "Jackson reads 1.5 partitions as 1; Horae refuses a count that is not an integer"),
    Allowed("backlog quota", "ns set bad type", ("status: horae 400, pulsar 404", *JETTY_404),
            "an unknown ?backlogQuotaType=: Jersey's failed parameter conversion is a 404; "
            "Horae answers 400 naming the types"),
    Allowed("permissions", "ns grant bad action", ("status: horae 412, pulsar 204",),
            "Pulsar grants a role an action it does not know (nothing); Horae refuses it"),
    Allowed("permissions", "topic get*", ("$.role-b: only in pulsar",),
            "follows from the refused grant above: Pulsar lists role-b, Horae never granted it"),
    Allowed("clusters", "get", _only_in_pulsar(
        "brokerClientSslFactoryPlugin", "brokerClientTlsEnabled",
        "brokerClientTlsEnabledWithKeyStore", "brokerClientTlsKeyStoreType",
        "brokerClientTlsTrustStoreType", "tlsAllowInsecureConnection"),
            "settings of a broker's client to other clusters (geo-replication); Horae has none"),
    Allowed("clusters", "*", ("status: horae 404, pulsar *",),
            "Horae is one node in one cluster: only its own cluster record exists, other names "
            "are 404 (Pulsar creates and updates cluster records for geo-replication)"),
    Allowed("namespaces", "policies", _only_in_pulsar(
        "allowed_clusters", "auth_policies", "clusterDispatchRate", "clusterSubscribeRate",
        "deleted", "is_allow_auto_update_schema", "latency_stats_sample_rate", "migrated",
        "offload_threshold",
        "offload_threshold_in_seconds", "properties", "publishMaxMessageRate",
        "replicatorDispatchRate", "schema_validation_enforced", "subscriptionDispatchRate",
        "subscription_types_enabled", "topicDispatchRate"),
            "policies Horae does not have (rates, offload, replication, namespace "
            "properties); the Policies document carries the ones it enforces"),
    Allowed("*", "*stats", _only_in_pulsar(
        "abortedTxnCount", "committedTxnCount", "ongoingTxnCount", "lastOffloadFailureTimeStamp",
        "lastOffloadLedgerId", "lastOffloadSuccessTimeStamp", "compaction", "ownerBroker",
        "backlogQuotaLimitSize", "backlogQuotaLimitTime", "bytesOutInternalCounter",
        "systemTopicBytesInCounter", "oldestBacklogMessageAgeSeconds",
        "delayedMessageIndexSizeInBytes", "publishRateLimitedTimes"),
            "topic stats Horae does not keep: transactions, offload, compaction history, "
            "owner broker, backlog quota limits, system-topic and rate-limit counters"),
    Allowed("*", "*stats", _only_in_horae(
        "delayedMessagesRejectedCounter", "fixedDelayOverriddenCounter", "topicEpoch",
        "deduplicationStatus", "topicCreationTimeStamp", "lastPublishTimeStamp"),
            "Horae's own counters (delayed messages refused or re-timed by policy), the exclusive "
            "producers' topic epoch, the deduplication state, and the creation and last-publish "
            "times newer Pulsar stats carry (PIP-431, not in 4.0)"),
    Allowed("*", "internal stats", _only_in_pulsar("compactedLedger", "schemaLedgers",
                                                   "cursors.pulsar.dedup"),
            "BookKeeper ledgers Horae does not have (compacted and schema ledgers) and Pulsar's "
            "internal deduplication cursor"),
    Allowed("non-persistent topics", "partitioned stats", (
        *_only_in_pulsar(
            "averageMsgSize", "backlogSize", "earliestMsgPublishTimeInBacklogs",
            "msgChunkPublished", "nonContiguousDeletedMessagesRanges",
            "nonContiguousDeletedMessagesRangesSerializedSize", "offloadedStorageSize",
            "publishers", "replication", "storageSize", "subscriptions", "waitingPublishers"),
        "$.partitions.non-persistent://{t}/{ns}/{topic}-p-partition-*: only in pulsar"),
            "a non-persistent partitioned topic's stats add up rates and counters only, over "
            "the partitions that are loaded"),
    Allowed("partitioned topics", "metadata missing", ("status: horae 200, pulsar 404",),
            "Pulsar 4.0 answers 404 for a topic that does not exist unless asked "
            "?checkAllowAutoCreation=true; Horae answers {\"partitions\": 0} as the clients' "
            "HTTP lookups expect"),
    Allowed("subscriptions", "expire all", ("status: horae 204, pulsar 409",),
            "follows from the peek above: Pulsar's subscription made by the peek has nothing to "
            "expire, and Pulsar answers 409 when any subscription has nothing to expire"),
    Allowed("subscriptions", "expire", ("status: horae 204, pulsar 409",),
            "Pulsar refuses (409) an expiry while its previous one on the subscription is still "
            "running; Horae's expiries complete before they answer", racy=True),
    Allowed("subscriptions", "skip by ids*", ("status: horae 400, pulsar 404", *JETTY_404),
            "skipByMessageIds came with a later Pulsar than 4.0: Horae serves it"),
    Allowed("subscriptions", "message by missing id", ("status: horae 404, pulsar 500",),
            "Pulsar fails with 500 reading an entry id its ledger does not hold; Horae 404 "
            "\"Message not found\""),
    Allowed("delayed cancel", "cancel*", ("status: horae 4*, pulsar 404", *JETTY_404),
            "cancelDelayedMessage is Horae's own route (Pulsar has none)"),
    Allowed("non-persistent topics", "expire to id", ("status: horae 405, pulsar 500",),
            "Pulsar fails with 500; Horae refuses it as the other expiries (405)"),
    Allowed("non-persistent topics", "delete after unload", ("status: horae 404, pulsar 204",),
            "an unloaded non-persistent topic is gone in Horae (nothing of it is kept), so "
            "deleting it is 404; Pulsar answers 204"),
    Allowed("non-persistent topics", "terminate partitions", ("status: horae 406, pulsar 500",),
            "Pulsar fails with 500; Horae refuses as it refuses one non-persistent topic"),
    Allowed("schemas", "upload bad type", ("status: horae 400, pulsar 500",),
            "Pulsar fails with 500 on an unknown schema type; Horae answers 400 naming it"),
    Allowed("lookup", "*persistent", ("$.brokerUrlSsl: only in pulsar",
                                       "$.brokerUrlTls: only in horae",
                                       "$.httpUrlTls: only in horae"),
            "with no TLS listener Pulsar leaves brokerUrlTls/httpUrlTls out and writes the "
            "deprecated brokerUrlSsl; Horae always writes the TLS keys (empty without TLS)"),
    Allowed("lookup", "bad domain", ("status: horae 400, pulsar 500",),
            "Pulsar fails with 500 on an unknown topic domain; Horae answers 400"),
    Allowed("topic policy schemaValidationEnforced", "remove", ("$: horae object, pulsar null",),
            "Pulsar 4.0 has no such route (405 from Jersey, no body); Horae's 405 carries "
            '{"reason"} as all its errors do'),
    Allowed("*policy delayedDeliveryReplaceByKey", "*",
            ("status: horae *, pulsar 40[45]", "status: horae *, pulsar 412", *JETTY_404),
            "replace-by-key (a keyed delayed message replaces the pending one) is Horae's own "
            "policy: Pulsar has no such route"),
    Allowed("*", "delayed list", ("status: horae *, pulsar 404", *JETTY_404),
            "the scheduled-message listing is Horae's own route (Pulsar has none)"),
    Allowed("*", "delayed histogram", ("status: horae *, pulsar 404", *JETTY_404),
            "the scheduled-message histogram is Horae's own route (Pulsar has none)"),
    Allowed("topic inspection", "id by index", ("status: horae *, pulsar 404", *JETTY_404),
            "message id by index (PIP-415) came after Pulsar 4.0: 4.0 has no such route"),
    Allowed("topic inspection", "id by time bad", ("status: horae 400, pulsar 404", *JETTY_404),
            "a timestamp that is not a number: Jersey's failed parameter conversion is a 404; "
            "Horae answers 400 saying so"),
    Allowed("broker ops", "shutdown bad rate", ("status: horae 400, pulsar 404", *JETTY_404),
            "a maxConcurrentUnloadPerSec that is not a number: Jersey's failed parameter "
            "conversion is a 404; Horae answers 400 saying so"),
    Allowed("topic inspection", "internal info missing", ("status: horae 404, pulsar 500",),
            "Pulsar fails with 500 on the internal info of a topic that does not exist; Horae "
            "answers 404 \"Topic not found\""),
    Allowed("namespace operations", "clear backlog of missing", ("status: horae 204, pulsar 500",),
            "Pulsar fails with 500 (\"Cursor not found\") clearing a subscription's backlog "
            "where a loaded topic lacks it; Horae clears it where it exists"),
    Allowed("namespace operations", "clear backlog missing", ("status: horae 404, pulsar 204",),
            "Pulsar answers 204 clearing the backlog of a namespace that does not exist; Horae "
            "answers 404 \"Namespace does not exist\", as both do for its unload"),
    Allowed("broker configuration", "runtime", ("$.*: only in pulsar", "$.*: only in horae"),
            "each broker lists its own settings: Pulsar its ServiceConfiguration (BookKeeper, "
            "ZooKeeper, load balancer, ...), Horae its own (storage, tokens, ...); the keys "
            "both have are compared"),
    Allowed("brokers", "status page", ("status: horae 200, pulsar 404",),
            "Pulsar serves /status.html only with statusFilePath set (standalone: unset); Horae "
            "always serves it"),
    Allowed("brokers", "active brokers missing cluster", ("status: horae 404, pulsar 200",),
            "Pulsar lists its brokers for any cluster name; Horae answers 404 for a cluster "
            "that is not its own"),
]
ALLOWED += [
    *(Allowed(f"ns policy {name}", "set other verb", (
        "$: horae object, pulsar null", *JETTY_404[:4], "$.reason: only in horae"),
        "both answer 405; Pulsar's Jersey with no body (Jetty's error page for a path whose "
        'only route is a PUT), Horae with {"reason"} as all its errors')
      for name in ("isAllowAutoUpdateSchema", "schemaAutoUpdateCompatibilityStrategy",
                   "encryptionRequired", "subscriptionAuthMode")),
    *(Allowed(f"ns policy {name}", "set bad body", ("status: horae 400, pulsar 204",),
              "Pulsar reads an unknown enum name as null and stores it (its GET then answers "
              "the default); Horae refuses it, naming the values")
      for name in ("schemaAutoUpdateCompatibilityStrategy", "subscriptionAuthMode")),
    Allowed("resource groups", "other verb", JETTY_404,
            "both answer 405; Pulsar's is Jetty's error page, Horae's {\"reason\"} as all its "
            "errors"),
    Allowed("shadow topics", "create shadow of a missing source",
            ("status: horae 404, pulsar 500",),
            "Pulsar's broker fails opening the missing source's managed ledger (500); Horae "
            "checks the source first and answers 404 naming it"),
]


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        if re.fullmatch(r"\{(ledger|entry)\d+\}", value):
            return int(names[value[1:-1]])
        return value.format(**names)
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


def _publish(peer: Peer, step: Publish, names: dict[str, str]) -> None:
    from clients import client_for

    topic = f"persistent://{names['t']}/{names['ns']}/{step.topic.format(**names)}"
    with client_for(peer) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(step.count):
            mid = producer.send(f"m{i}".encode())
            names[f"ledger{i}"] = str(mid.ledger_id())
            names[f"entry{i}"] = str(mid.entry_id())
        producer.close()


def _named_keys(body: Any, names: dict[str, str]) -> Any:
    """Object keys that are the scenario's names (topics, partitions) written as placeholders,
    so the two peers' keys compare; values are left alone (only their shape is compared)."""
    if isinstance(body, dict):
        out = {}
        for key, value in body.items():
            for placeholder in ("topic", "ns", "t"):
                key = key.replace(names[placeholder], "{" + placeholder + "}")
            out[key] = _named_keys(value, names)
        return out
    if isinstance(body, list):
        return [_named_keys(item, names) for item in body]
    return body


def run_scenario(peer: Peer, scenario: Scenario) -> list[tuple[str, Answer | None]]:
    names = {**unique_names(scenario.name), "cluster": "standalone",
             "broker": peer.web_url.removeprefix("http://")}
    record: list[tuple[str, Answer | None]] = []
    for step in scenario.steps:
        if isinstance(step, Publish):
            _publish(peer, step, names)
            continue
        path = step.path.format(**names)
        answer = peer.http(step.method, path, _fill(step.body, names), raw=step.raw,
                           content_type=step.content_type)
        answer = Answer(answer.status, _named_keys(answer.body, names))
        record.append((step.label or f"{step.method} {step.path}", answer))
    return record


def differences(scenario: Scenario, horae: list[tuple[str, Answer | None]],
                pulsar: list[tuple[str, Answer | None]]) -> list[tuple[str, str]]:
    out = []
    calls = [s for s in scenario.steps if isinstance(s, Call)]
    for call, (label, h), (_, p) in zip(calls, horae, pulsar, strict=True):
        assert h is not None and p is not None
        if h.status != p.status:
            out.append((label, f"status: horae {h.status}, pulsar {p.status}"))
        if call.shape and h.status // 100 == p.status // 100:
            out += [(label, line) for line in shape_diff(h.shape, p.shape)]
    return out


def _allowed_for(scenario: str, label: str, line: str) -> Allowed | None:
    for entry in ALLOWED:
        if (fnmatch.fnmatchcase(scenario, entry.scenario)
                and fnmatch.fnmatchcase(label, entry.step)
                and any(fnmatch.fnmatchcase(line, pattern) for pattern in entry.lines)):
            return entry
    return None


@pytest.mark.parametrize("scenario", RUN, ids=[s.name for s in RUN])
def test_rest_answers_as_pulsar(peers: Peers, scenario: Scenario) -> None:
    horae = run_scenario(peers.horae, scenario)
    pulsar = run_scenario(peers.pulsar, scenario)
    diff = differences(scenario, horae, pulsar)
    unexplained = [f"{label}: {line}" for label, line in diff
                   if _allowed_for(scenario.name, label, line) is None]
    used = {id(a) for label, line in diff
            if (a := _allowed_for(scenario.name, label, line)) is not None}
    stale = [f"{a.scenario} / {a.step}: {a.reason}" for a in ALLOWED
             if a.scenario == scenario.name and not a.racy and id(a) not in used]
    assert not unexplained and not stale, (
        "differences from Pulsar:\n  " + "\n  ".join(unexplained)
        + ("\nallowed differences that no longer show:\n  " + "\n  ".join(stale) if stale else ""))


def _route_pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts)
                      + "$")


#: Routes that no REST scenario compares with Pulsar yet: each needs a scenario. A route listed
#: here that a scenario calls fails the test, so the list only shrinks.
NOT_YET_COMPARED: frozenset[str] = frozenset()

#: Routes compared by another differential test: the WebSocket sessions
#: (``test_oracle_websocket.py`` opens a producer, a consumer and a reader on each broker).
COMPARED_ELSEWHERE: frozenset[str] = frozenset({
    "GET /ws/v2/consumer/{domain}/{tenant}/{namespace}/{rest}",
    "GET /ws/v2/producer/{domain}/{tenant}/{namespace}/{rest}",
    "GET /ws/v2/reader/{domain}/{tenant}/{namespace}/{rest}",
})


def test_scenarios_cover_every_route() -> None:
    from unittest import mock

    from broker.admin.app import create_app

    service = mock.MagicMock()
    service.config.anonymous_user_role = ""
    app = create_app(service)
    routes = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = info.get("path") or info.get("formatter")
        if route.method != "HEAD" and template:
            routes.append((route.method, template, _route_pattern(template)))
    called = set()
    sample = {"t": "t", "ns": "ns", "topic": "topic", "cluster": "standalone",
              "broker": "localhost:8080"}
    sample.update({f"{k}{i}": "1" for k in ("ledger", "entry") for i in range(10)})
    for scenario in [*SCENARIOS, *STORAGE_SCENARIOS]:
        for step in scenario.steps:
            if isinstance(step, Call):
                path = step.path.format(**sample).split("?", 1)[0]
                called.update((m, t) for m, t, rx in routes if m == step.method and rx.match(path))
    missing = [f"{m} {t}" for m, t, _ in routes if (m, t) not in called
               and f"{m} {t}" not in NOT_YET_COMPARED | COMPARED_ELSEWHERE]
    covered_now = sorted(f"{m} {t}" for m, t in called)
    stale = sorted(set(covered_now) & NOT_YET_COMPARED)
    assert len(routes) > 100
    assert not missing, "routes no scenario calls:\n  " + "\n  ".join(missing)
    assert not stale, "compared now, drop from NOT_YET_COMPARED:\n  " + "\n  ".join(stale)
