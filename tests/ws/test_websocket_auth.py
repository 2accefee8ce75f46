"""The WebSocket API with token authentication and authorization on.

As Pulsar's WebSocket service: the token comes in ``Authorization: Bearer`` or, for a browser
that cannot set headers, in the ``token`` query parameter; no or a bad token is HTTP 401
``Failed to authenticate`` and a role without the permission 403 ``Not authorized``, both
before the upgrade; a granted role produces and consumes.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import jwt
import pytest

from tests.ws.conftest import b64, receive, unb64, ws_base

SECRET = b"w" * 32
SECURED = {
    "authenticationEnabled": True,
    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
    "authorizationEnabled": True,
    "superUserRoles": "admin",
}
TOPIC = "persistent/public/default/secured"


def token(sub: str, *, key: bytes = SECRET, exp_in: float | None = None) -> str:
    claims: dict[str, Any] = {"sub": sub}
    if exp_in is not None:
        claims["exp"] = int(time.time() + exp_in)
    return jwt.encode(claims, key, algorithm="HS256")


def bearer(sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(sub)}"}


@pytest.fixture
def secured(broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides=dict(SECURED))


async def _refusal(http: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, str]:
    """Status and reason of a refused upgrade (the body the client would read)."""
    headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", **kw.pop("headers", {})}
    async with http.get(url.replace("ws://", "http://"), headers=headers, **kw) as resp:
        return resp.status, (await resp.json())["reason"]


async def test_round_trip_with_a_token_in_the_header(secured: Any,
                                                     http: aiohttp.ClientSession) -> None:
    base = ws_base(secured)
    consumer = await http.ws_connect(f"{base}/ws/v2/consumer/{TOPIC}/s", headers=bearer("admin"))
    async with http.ws_connect(f"{base}/ws/v2/producer/{TOPIC}", headers=bearer("admin")) as p:
        await p.send_str(json.dumps({"payload": b64(b"secret"), "context": "1"}))
        assert (await receive(p))["result"] == "ok"
    msg = await receive(consumer)
    assert unb64(msg["payload"]) == b"secret"
    await consumer.close()


async def test_token_query_parameter_as_a_browser_sends_it(secured: Any,
                                                           http: aiohttp.ClientSession) -> None:
    base = ws_base(secured)
    reader = await http.ws_connect(f"{base}/ws/v2/reader/{TOPIC}",
                                   params={"token": token("admin"), "messageId": "earliest"})
    async with http.ws_connect(f"{base}/ws/v2/producer/{TOPIC}",
                               params={"token": "Bearer " + token("admin")}) as p:
        await p.send_str(json.dumps({"payload": b64(b"q")}))
        assert (await receive(p))["result"] == "ok"
    assert unb64((await receive(reader))["payload"]) == b"q"
    await reader.close()


async def test_missing_bad_and_expired_tokens_are_401(secured: Any,
                                                      http: aiohttp.ClientSession) -> None:
    url = f"{ws_base(secured)}/ws/v2/producer/{TOPIC}"
    for kw in ({}, {"params": {"token": "garbage"}},
               {"headers": {"Authorization": f"Bearer {token('admin', key=b'x' * 32)}"}},
               {"headers": {"Authorization": f"Bearer {token('admin', exp_in=-60)}"}}):
        assert await _refusal(http, url, **kw) == (401, "Failed to authenticate"), kw
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url)
    assert info.value.status == 401


async def test_permissions_decide_produce_and_consume(secured: Any,
                                                      http: aiohttp.ClientSession) -> None:
    base = ws_base(secured)
    producer_url = f"{base}/ws/v2/producer/{TOPIC}"
    consumer_url = f"{base}/ws/v2/consumer/{TOPIC}/alice-sub"
    for url in (producer_url, consumer_url):
        assert await _refusal(http, url, headers=bearer("alice")) == (403, "Not authorized")
    async with http.post(f"{secured.web_url}/admin/v2/{TOPIC}/permissions/alice",
                         json=["produce"], headers=bearer("admin")) as resp:
        assert resp.status == 204, await resp.text()
    async with http.ws_connect(producer_url, headers=bearer("alice")) as p:
        await p.send_str(json.dumps({"payload": b64(b"from alice")}))
        assert (await receive(p))["result"] == "ok"
    assert await _refusal(http, consumer_url, headers=bearer("alice")) == (403, "Not authorized")
    async with http.post(f"{secured.web_url}/admin/v2/{TOPIC}/permissions/alice",
                         json=["produce", "consume"], headers=bearer("admin")) as resp:
        assert resp.status == 204, await resp.text()
    reader = await http.ws_connect(f"{base}/ws/v2/reader/{TOPIC}?messageId=earliest",
                                   headers=bearer("alice"))
    assert unb64((await receive(reader))["payload"]) == b"from alice"
    await reader.close()
