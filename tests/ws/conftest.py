"""Helpers for the WebSocket API tests: an aiohttp client session and Pulsar's JSON frames.

(The directory is ``tests/ws``, not ``tests/websocket``: ``tests`` is on ``sys.path``, where a
``websocket`` package would hide the ``websocket-client`` library Pulsar's examples use.)"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

#: Longest wait for one frame in these tests (a bound, not an expectation).
RECEIVE_TIMEOUT_S = 10.0


def ws_base(broker: Any) -> str:
    return broker.web_url.replace("http://", "ws://")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


async def receive(ws: aiohttp.ClientWebSocketResponse, timeout: float = RECEIVE_TIMEOUT_S) -> Any:
    """The next text frame, decoded; fails on anything else."""
    msg = await ws.receive(timeout=timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.data, msg.extra)
    return json.loads(msg.data)


async def nothing_within(ws: aiohttp.ClientWebSocketResponse, seconds: float) -> bool:
    """True when no frame arrives for *seconds* (what a bounded flow must hold back)."""
    try:
        msg = await ws.receive(timeout=seconds)
    except TimeoutError:
        return True
    raise AssertionError(f"unexpected frame {msg.type} {msg.data!r}")


async def eventually(check: Callable[[], Awaitable[Any]], message: str,
                     timeout_s: float = RECEIVE_TIMEOUT_S) -> Any:
    """Await *check* until it returns something truthy (bounded); fail naming *message*."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() >= deadline:
            raise AssertionError(f"{message}: not met within {timeout_s:g} s (last {value!r})")
        await asyncio.sleep(0.02)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
