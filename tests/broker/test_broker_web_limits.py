"""The web port cannot be held by clients that send slowly, idle, or open too many sockets.

``httpServerRequestHeaderTimeoutMs`` closes a connection whose request head trickles in;
``httpServerIdleTimeoutMs`` closes an idle keep-alive connection; ``maxHttpServerConnections``
closes connections over the limit at accept, counts them and logs a (rate-limited) warning. In
every case a healthy REST client and a binary client keep working. The timeouts are short here
so the tests are quick; nothing asserts how soon a close came, only that it came while the
offending client was still at it.
"""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from broker_rawclient import RawClient
from waiting import wait_until

from broker.admin.listener import WebConnectionGuard, web_connection_limit

HEADER_TIMEOUT_MS = 300
IDLE_TIMEOUT_MS = 600


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def _connect(broker: Any, sockets: list[socket.socket]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.web_port), timeout=10)
    sockets.append(sock)
    return sock


def _closed_by_broker(sock: socket.socket) -> bool:
    """True when the broker closed *sock* (EOF or reset); waits at most a short while."""
    sock.settimeout(0.05)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except TimeoutError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def _rest_works(broker: Any) -> None:
    with urllib.request.urlopen(broker.web_url + "/admin/v2/clusters", timeout=10) as resp:
        assert resp.status == 200 and json.loads(resp.read()) == ["standalone"]


def _rest_answers(broker: Any) -> bool:
    """True when a REST request got its answer (False when its connection was refused)."""
    try:
        _rest_works(broker)
    except (ConnectionError, urllib.error.URLError):
        return False
    return True


def _binary_works(broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        raw.handshake()


def _metric(broker: Any, name: str) -> float:
    with urllib.request.urlopen(broker.web_url + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


def test_a_trickled_request_head_is_closed_at_the_header_timeout(
        broker_factory: Callable[..., Any], sockets: list[socket.socket]) -> None:
    broker = broker_factory(config_overrides={
        "httpServerRequestHeaderTimeoutMs": HEADER_TIMEOUT_MS, "httpServerIdleTimeoutMs": 60_000})
    slow = _connect(broker, sockets)
    slow.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    closed = False
    for i in range(400):  # one byte of a header every 50 ms, for up to 20 s: never a whole head
        try:
            slow.sendall(b"y")
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        if _closed_by_broker(slow):
            closed = True
            break
        if i == 2:
            _rest_works(broker)  # a healthy client meanwhile
            _binary_works(broker)
    assert closed, "a client trickling a request head kept its connection"
    assert _metric(broker, "horae_http_request_header_timeouts_total") == 1
    _rest_works(broker)


def test_an_idle_keep_alive_connection_is_closed(
        broker_factory: Callable[..., Any], sockets: list[socket.socket]) -> None:
    broker = broker_factory(config_overrides={"httpServerIdleTimeoutMs": IDLE_TIMEOUT_MS})
    idle = _connect(broker, sockets)
    idle.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n")
    idle.settimeout(10)
    assert idle.recv(65536).startswith(b"HTTP/1.1 200")
    _rest_works(broker)
    _binary_works(broker)
    wait_until(lambda: _closed_by_broker(idle), timeout_s=20,
               message="the idle keep-alive connection closed by the broker")


def test_a_connection_over_the_limit_is_refused_while_others_work(
        broker_factory: Callable[..., Any], sockets: list[socket.socket],
        caplog: pytest.LogCaptureFixture) -> None:
    limit = 4
    broker = broker_factory(config_overrides={"maxHttpServerConnections": limit})
    caplog.set_level(logging.WARNING, logger="horae.web")
    held = [_connect(broker, sockets) for _ in range(limit)]
    wait_until(lambda: broker.call(lambda: broker.server.web_guard.open_connections) == limit,
               message="the broker holds the first connections")
    over = [_connect(broker, sockets) for _ in range(3)]
    for sock in over:
        wait_until(lambda s=sock: _closed_by_broker(s), message="a connection over the limit closed")
    assert not any(_closed_by_broker(sock) for sock in held)
    _binary_works(broker)  # the binary port is not affected
    refusals = [r for r in caplog.records
                if r.levelno == logging.WARNING and "maxHttpServerConnections" in r.getMessage()]
    assert len(refusals) == 1, "refusals are logged once per interval"
    # A held connection leaves: a healthy REST client gets its place.
    held.pop().close()
    wait_until(lambda: broker.call(lambda: broker.server.web_guard.open_connections) < limit,
               message="the broker saw a held connection close")
    with urllib.request.urlopen(broker.web_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'horae_http_connections_refused_total{cluster="standalone"} 3.0' in text
    assert f'horae_http_connections{{cluster="standalone"}} {float(limit)}' in text


def test_the_web_port_never_takes_more_than_half_the_open_file_limit(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="horae.web")
    assert web_connection_limit(2048, 100_000) == 2048
    assert not caplog.records
    assert web_connection_limit(2048, 256) == 128
    assert web_connection_limit(0, 256) == 128  # "no limit" still leaves the binary port room
    assert len(caplog.records) == 2 and "LimitNOFILE" in caplog.records[0].getMessage()


def test_refusals_are_counted_each_and_logged_once_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    class Transport:
        def get_extra_info(self, name: str) -> Any:
            return ("10.0.0.1", 5000)

    async def run() -> None:
        guard = WebConnectionGuard(1, 1.0)
        guard.open_connections = 1
        for _ in range(5):
            assert not guard.admit(Transport())  # type: ignore[arg-type]
        assert guard.refused_times == 5

    caplog.set_level(logging.WARNING, logger="horae.web")
    asyncio.run(run())  # five refusals in a row, well within one WARN_INTERVAL_S
    assert len(caplog.records) == 1


def test_idle_web_sockets_cannot_lock_the_binary_port_out_of_file_descriptors(
        run_broker_process: Callable[..., Any], tmp_path: Any,
        sockets: list[socket.socket]) -> None:
    """A broker allowed 256 open files: 300 idle web sockets used to take them all, and the
    binary port could accept nothing. The web port now keeps to half of the limit."""
    broker = run_broker_process(tmp_path / "data", open_files_limit=256)
    idle = [_connect(broker, sockets) for _ in range(300)]
    # The broker holds at most 128 of them; it closes the others at accept.
    wait_until(lambda: sum(_closed_by_broker(s) for s in idle[128:]) == len(idle) - 128,
               timeout_s=30, message="web sockets over half the open-file limit closed")
    _binary_works(broker)
    assert "maxHttpServerConnections=2048 does not leave the binary port" in broker.log()
    for sock in idle[:8]:
        sock.close()
    wait_until(lambda: _rest_answers(broker), message="a REST client got a place")
