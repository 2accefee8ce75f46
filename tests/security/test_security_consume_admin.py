"""A role with the consume permission administers its subscriptions over REST, as Pulsar's
allowTopicOperation lets it (peek, skip, expire, reset cursor, backlog size), on a broker
with token authentication and authorization; a produce-only role is refused with 401."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import jwt
import pytest

SECRET = b"s" * 32
SECURED = {
    "authenticationEnabled": True,
    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
    "authorizationEnabled": True,
    "superUserRoles": "admin",
}
TOPIC = "persistent://public/default/audited"
T = "/admin/v2/persistent/public/default/audited"


def _token(sub: str) -> str:
    return jwt.encode({"sub": sub}, SECRET, algorithm="HS256")


def _call(broker: Any, role: str, method: str, path: str,
          body: object = None) -> tuple[int, Any]:
    raw = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(broker.web_url + path, data=raw, method=method, headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + _token(role)})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read()
    try:
        return status, json.loads(payload) if payload else None
    except ValueError:
        return status, payload


@pytest.fixture
def secured(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides=dict(SECURED))


def test_a_consume_role_peeks_skips_expires_and_resets_its_subscription(secured: Any) -> None:
    import pulsar
    from conftest import make_client

    for role, actions in (("reader", ["consume"]), ("writer", ["produce"])):
        assert _call(secured, "admin", "POST", f"{T}/permissions/{role}", actions)[0] == 204
    client = make_client(secured.service_url,
                         authentication=pulsar.AuthenticationToken(_token("admin")))
    try:
        client.subscribe(TOPIC, "s").close()
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()
    sub = f"{T}/subscription/s"
    status, _ = _call(secured, "reader", "GET", f"{sub}/position/1")
    assert status == 200
    assert _call(secured, "reader", "GET", f"{T}/subscriptions") == (200, ["s"])
    assert _call(secured, "reader", "POST", f"{sub}/skip/2")[0] == 204
    assert _call(secured, "reader", "GET", f"{T}/stats")[1]["subscriptions"]["s"][
        "msgBacklog"] == 3
    assert _call(secured, "reader", "POST", f"{sub}/resetcursor/0")[0] == 204
    assert _call(secured, "reader", "GET", f"{T}/stats")[1]["subscriptions"]["s"][
        "msgBacklog"] == 5
    assert _call(secured, "reader", "POST", f"{sub}/expireMessages/0")[0] == 204
    assert _call(secured, "reader", "PUT", f"{T}/backlogSize", {"ledgerId": -1,
                                                                "entryId": -1})[0] == 200
    # produce alone: stats (lookup) yes, the subscription's operations no (Pulsar's 401)
    assert _call(secured, "writer", "GET", f"{T}/stats")[0] == 200
    status, body = _call(secured, "writer", "GET", f"{sub}/position/1")
    assert (status, body["reason"]) == (401, "Unauthorized to validateTopicOperation for "
                                             f"operation [PEEK_MESSAGES] on topic [{TOPIC}]")
    # tenant-admin operations stay the tenant admins'
    status, body = _call(secured, "reader", "POST", f"{T}/terminate")
    assert (status, body["reason"]) == (
        403, "Don't have permission to administrate resources on this tenant")
