"""``POST /admin/v2/brokers/shutdown`` (pulsar-admin ``brokers shutdown``): a ``horae serve``
process shuts down gracefully and exits 0; after a restart on the same data directory every
published message is there and no acknowledged one comes back."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import Any

import pulsar
from waiting import wait_until

from tests.conftest import ROOT, make_client

from .conftest import http

TOPIC = "persistent://public/default/shutdown"
STATS = "/admin/v2/persistent/public/default/shutdown/stats"


def _backlog(web_url: str) -> Any:
    reply = http(web_url, "GET", STATS)
    return reply.body["subscriptions"]["s"]["msgBacklog"] if reply.status == 200 else None


def test_shutdown_over_rest_flushes_and_exits_then_nothing_acknowledged_returns(
        run_broker_process: Any, tmp_path: Any) -> None:
    data = tmp_path / "data"
    first = run_broker_process(data)
    client = make_client(first.service_url)
    consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    acked = {f"m{i}" for i in (*range(10), 12, 15)}
    for _ in range(20):
        msg = consumer.receive(timeout_millis=10_000)
        if msg.data().decode() in acked:
            consumer.acknowledge(msg)
    wait_until(lambda: _backlog(first.web_url) == 8, timeout_s=20,
               message="the acknowledgements reached the broker")
    # a bad query parameter is refused and shuts nothing down
    bad = http(first.web_url, "POST", "/admin/v2/brokers/shutdown?maxConcurrentUnloadPerSec=x")
    assert bad.status == 400 and first.proc.poll() is None
    cli = subprocess.run(
        [sys.executable, "-m", "cli.admin", "--admin-url", first.web_url, "brokers", "shutdown",
         "-m", "5"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert first.proc.wait(60) == 0
    log = first.log()
    assert "graceful shutdown requested over REST (maxConcurrentUnloadPerSec=5, " \
           "forcedTerminateTopic=False)" in log
    assert "stopped" in log
    with contextlib.suppress(Exception):   # the broker is gone: closing may fail to reach it
        client.close()

    second = run_broker_process(data)
    client = make_client(second.service_url)
    try:
        consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Shared)
        got = set()
        for _ in range(8):
            msg = consumer.receive(timeout_millis=10_000)
            got.add(msg.data().decode())
            consumer.acknowledge(msg)
        assert got == {f"m{i}" for i in range(20)} - acked
        with contextlib.suppress(pulsar.Timeout):   # nothing acknowledged comes back
            extra = consumer.receive(timeout_millis=500)
            raise AssertionError(f"an acknowledged message came back: {extra.data()!r}")
    finally:
        client.close()
    assert second.stop() == 0
