"""/admin/v2/brokers/health runs Pulsar's heartbeat round trip.

A healthy broker answers "ok" after producing and consuming one message on
``persistent://pulsar/<cluster>/<advertisedAddress>:<webPort>/healthcheck`` (V1, the default) or
``persistent://pulsar/<advertisedAddress>:<webPort>/healthcheck`` (V2); the heartbeat namespace
shows in no user listing; a dispatch that never delivers is a 500 within healthCheckTimeoutMs;
with token authentication the caller's token is what the loopback connection presents. Read-only
storage answering 500 is pinned in tests/broker/test_broker_disk_full.py.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import jwt

from tests.admin.conftest import Api, Reply, http

SECRET = b"s" * 32
SECURED = {
    "authenticationEnabled": True,
    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
    "authorizationEnabled": True,
    "superUserRoles": "admin",
}


def _heartbeat_topics(broker: Any) -> dict[str, list[str]]:
    """Loaded heartbeat topics -> their subscription names."""
    def read() -> dict[str, list[str]]:
        return {name: sorted(t.subscriptions) for name, t in broker.service.topics.items()
                if name.startswith("persistent://pulsar/")}
    result: dict[str, list[str]] = broker.call(read)
    return result


def test_health_round_trip_on_the_v1_and_v2_heartbeat_topics(broker: Any, api: Api) -> None:
    web = f"127.0.0.1:{broker.web_port}"
    assert api("GET", "/admin/v2/brokers/health").body == "ok"
    assert api("GET", "/admin/v2/brokers/health?topicVersion=V2").body == "ok"
    assert api("GET", "/admin/v2/brokers/health?topicVersion=V1").body == "ok"
    topics = _heartbeat_topics(broker)
    assert topics == {f"persistent://pulsar/standalone/{web}/healthcheck": [],
                      f"persistent://pulsar/{web}/healthcheck": []}


def test_heartbeat_namespace_is_hidden_from_user_listings(broker: Any, api: Api) -> None:
    assert api("GET", "/admin/v2/brokers/health?topicVersion=V2").body == "ok"
    tenants = api("GET", "/admin/v2/tenants").body
    assert "pulsar" not in tenants
    assert api("GET", "/admin/v2/persistent/public/default").body == []
    assert api("GET", "/admin/v2/namespaces/public").body == ["public/default"]


def test_health_passes_with_auto_topic_creation_off(broker_factory: Callable[..., Any]) -> None:
    b = broker_factory(config_overrides={"allowAutoTopicCreation": False})
    assert http(b.web_url, "GET", "/admin/v2/brokers/health").body == "ok"


def test_unknown_topic_version_is_a_bad_request(api: Api) -> None:
    reply = api("GET", "/admin/v2/brokers/health?topicVersion=V3")
    assert reply.status == 400
    assert reply.reason is not None and "topicVersion" in reply.reason


def test_dispatch_that_never_delivers_fails_the_check_within_the_timeout(
        broker_factory: Callable[..., Any]) -> None:
    b = broker_factory(config_overrides={"healthCheckTimeoutMs": 700})
    assert http(b.web_url, "GET", "/admin/v2/brokers/health").body == "ok"
    topic_name = f"persistent://pulsar/standalone/127.0.0.1:{b.web_port}/healthcheck"

    def stall_dispatch() -> Callable[[], None]:
        subs = b.service.topics[topic_name].subscriptions
        original = subs.notify_new_entries
        def drop_notification() -> None:   # entries are stored, never dispatched
            subs._notify_scheduled = False
        subs.notify_new_entries = drop_notification

        def restore() -> None:
            del subs.notify_new_entries
            assert subs.notify_new_entries == original
        return restore

    restore = b.call(stall_dispatch)
    started = time.monotonic()
    reply = http(b.web_url, "GET", "/admin/v2/brokers/health")
    elapsed = time.monotonic() - started
    assert reply.status == 500
    assert reply.reason is not None and "timed out after 700 ms" in reply.reason
    assert 0.6 < elapsed < 5.0
    assert _heartbeat_topics(b)[topic_name] == []   # the reader's subscription was removed
    b.call(restore)
    assert http(b.web_url, "GET", "/admin/v2/brokers/health").body == "ok"


def _get(url: str, token: str | None) -> Reply:
    import json
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return Reply(resp.status, resp.read().decode(), resp.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, json.loads(exc.read() or b"null"), "")


def test_with_authentication_the_callers_token_makes_the_round_trip(
        broker_factory: Callable[..., Any]) -> None:
    b = broker_factory(config_overrides=dict(SECURED))
    url = f"{b.web_url}/admin/v2/brokers/health"
    admin = jwt.encode({"sub": "admin"}, SECRET, algorithm="HS256")
    bob = jwt.encode({"sub": "bob"}, SECRET, algorithm="HS256")
    assert _get(url, admin).body == "ok"
    assert _get(url, None).status == 401
    assert _get(url, bob).status == 403


def test_brokers_list_names_this_broker_as_pulsar_does(broker: Any, api: Api) -> None:
    me = f"127.0.0.1:{broker.web_port}"
    assert api("GET", "/admin/v2/brokers/standalone").body == [me]
    assert api("GET", "/admin/v2/brokers/leaderBroker").body == {
        "brokerId": me, "serviceUrl": broker.web_url}
    other = api("GET", "/admin/v2/brokers/elsewhere")
    assert other.status == 404
    assert other.reason == "Cluster does not exist: cluster=elsewhere"
    assert api("GET", "/admin/v2/brokers/ready").body == "ok"


def test_brokers_routes_require_a_super_user(broker_factory: Callable[..., Any]) -> None:
    b = broker_factory(config_overrides=dict(SECURED))
    admin = jwt.encode({"sub": "admin"}, SECRET, algorithm="HS256")
    bob = jwt.encode({"sub": "bob"}, SECRET, algorithm="HS256")
    assert _get(f"{b.web_url}/admin/v2/brokers/standalone", bob).status == 403
    reply = _get(f"{b.web_url}/admin/v2/brokers/standalone", admin)
    assert reply.status == 200
    assert reply.body == f'["127.0.0.1:{b.web_port}"]'


def test_heartbeat_topics_are_exported_under_their_own_namespace(broker: Any, api: Api) -> None:
    from broker.metrics.exposition import topic_namespace

    assert topic_namespace("persistent://public/default/t") == "public/default"
    assert topic_namespace("persistent://pulsar/standalone/h:8080/healthcheck") == (
        "pulsar/standalone/h:8080")
    assert api("GET", "/admin/v2/brokers/health").body == "ok"
    metrics = api("GET", "/metrics").body
    v1 = f"pulsar/standalone/127.0.0.1:{broker.web_port}"
    assert (f'pulsar_topics_count{{cluster="standalone",namespace="{v1}"}} 1.0'
            in metrics)


def test_status_page_answers_probes_without_credentials(
        broker_factory: Callable[..., Any]) -> None:
    b = broker_factory(config_overrides=dict(SECURED))
    assert _get(f"{b.web_url}/status.html", None).body == "OK"          # no token needed
    assert _get(f"{b.web_url}/admin/v2/brokers/ready", None).status == 401  # the admin API is
