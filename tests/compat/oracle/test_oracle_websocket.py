"""Pulsar's WebSocket API against Pulsar 4.0 standalone: the same sessions, the same frames.

A scenario opens producer, consumer and reader sessions (``/ws/v2/...``) on each broker, in
topic names of its own, and records one observation a step: the status of a refused upgrade,
or a frame's JSON shape (keys and types, as :func:`peers.shape`) with the values that are the
step's point (``result``, the payloads in the order they came). The records must be equal
except where :data:`ALLOWED` lists the difference with its reason. The Pulsar peer runs with
its WebSocket service on (``webSocketServiceEnabled=true``, served on its web port as Horae
serves it).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from peers import Peer, Peers, shape, unique_names

Record = dict[str, str]
FRAME_TIMEOUT_S = 10.0
COUNT = 3


def _ws_url(peer: Peer, kind: str, rest: str) -> str:
    return peer.web_url.replace("http://", "ws://", 1) + f"/ws/v2/{kind}/persistent/{rest}"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _observe(frame: dict[str, Any], *values: str) -> str:
    """A frame as its shape, with the values named kept (payloads decoded)."""
    kept = {}
    for key in values:
        value = frame.get(key)
        kept[key] = base64.b64decode(value).decode() if key == "payload" and value else value
    return json.dumps({"shape": shape(frame), **kept}, sort_keys=True)


async def _refused(session: aiohttp.ClientSession, url: str) -> str:
    """The status of an upgrade the broker refuses (or ``open`` when it accepts it)."""
    try:
        ws = await session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=2.0))
    except aiohttp.WSServerHandshakeError as exc:
        return f"refused {exc.status}"
    await ws.close()
    return "open"


async def _receive(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    message = await ws.receive(timeout=FRAME_TIMEOUT_S)
    assert message.type == aiohttp.WSMsgType.TEXT, message
    frame: dict[str, Any] = json.loads(message.data)
    return frame


async def produce_consume_read(peer: Peer) -> Record:
    names = unique_names("websocket")
    topic = f"public/default/{names['topic']}"
    out: Record = {}
    async with aiohttp.ClientSession() as session:
        consumer = await session.ws_connect(
            _ws_url(peer, "consumer", f"{topic}/sub?subscriptionType=Shared"))
        producer = await session.ws_connect(_ws_url(peer, "producer", topic))
        for i in range(COUNT):
            await producer.send_str(json.dumps({
                "payload": _b64(f"m{i}"), "properties": {"k": "v"}, "context": f"c{i}",
                "key": f"key{i}"}))
            out[f"ack {i}"] = _observe(await _receive(producer), "result", "context")
        await producer.send_str("{not json")
        out["bad frame"] = _observe(await _receive(producer), "result")
        await producer.close()
        received = [await _receive(consumer) for _ in range(COUNT)]
        out["consumed"] = " ".join(_observe(f, "payload", "key", "properties")
                                   for f in received)
        for frame in received:
            await consumer.send_str(json.dumps({"messageId": frame["messageId"]}))
        await consumer.close()
        reader = await session.ws_connect(_ws_url(peer, "reader", f"{topic}?messageId=earliest"))
        read = [await _receive(reader) for _ in range(COUNT)]
        out["read"] = " ".join(_observe(f, "payload") for f in read)
        await reader.close()
        out["consumer without subscription"] = await _refused(
            session, _ws_url(peer, "consumer", topic))
        out["bad subscription type"] = await _refused(
            session, _ws_url(peer, "consumer", f"{topic}/sub?subscriptionType=Nope"))
        out["producer in a missing namespace"] = await _refused(
            session, _ws_url(peer, "producer", f"public/missing-{names['ns']}/t"))
    return out


SCENARIOS: dict[str, Callable[[Peer], Awaitable[Record]]] = {
    "produce, consume, read": produce_consume_read,
}

#: (scenario, label) -> the observation pair ``(horae, pulsar)`` that stays, and why.
ALLOWED: dict[tuple[str, str], tuple[tuple[str, str], str]] = {}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_websocket_answers_as_pulsar(peers: Peers, scenario: str) -> None:
    records = {peer.name: asyncio.run(asyncio.wait_for(SCENARIOS[scenario](peer), 120))
               for peer in peers.both()}
    horae, pulsar = records["horae"], records["pulsar"]
    assert horae.keys() == pulsar.keys()
    unexplained, stale = [], []
    for label in horae:
        pair = (horae[label], pulsar[label])
        allowed = ALLOWED.get((scenario, label))
        if pair[0] != pair[1] and (allowed is None or allowed[0] != pair):
            unexplained.append(f"{label}:\n    horae  {pair[0]}\n    pulsar {pair[1]}")
        if allowed is not None and pair[0] == pair[1]:
            stale.append(f"{label}: both {pair[0]!r} ({allowed[1]})")
    assert not unexplained and not stale, (
        "differences from Pulsar:\n  " + "\n  ".join(unexplained)
        + ("\nallowed differences that no longer show:\n  " + "\n  ".join(stale) if stale else ""))
